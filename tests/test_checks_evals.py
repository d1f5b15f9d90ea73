"""The evals steps' exercise checks (walkthrough/checks/evals.py) on edited checkouts of the series:
a correct solution written differently passes, plausible mistakes fail with one readable line."""

import pytest

from check_tags import edited, verdict
from walkthrough import checks


def test_hellaswag_passes_with_the_loss_written_as_log_softmax(series_history, tmp_path):
    tree = edited(
        series_history,
        "hellaswag",
        tmp_path / "tree",
        (
            'losses = F.cross_entropy(logits[mask].float(), targets[mask], reduction="none")',
            "losses = -logits[mask].float().log_softmax(-1)"
            ".gather(1, targets[mask][:, None])[:, 0]",
        ),
        file="longrun/hellaswag_scoring.py",
    )
    result = verdict(tree, "hellaswag")
    assert result.ok, result.message


def test_hellaswag_fails_on_the_loss_taken_from_the_contexts_positions(series_history, tmp_path):
    # the mask one position early: the first scored position predicts the context's last token,
    # not the ending's
    tree = edited(
        series_history,
        "hellaswag",
        tmp_path / "tree",
        (
            "mask.append([False] * (len(ctx) - 1) + [True] * len(cont) + [False] * len(pad))",
            "mask.append([False] * (len(ctx) - 2) + [True] * len(cont) + [False] * (len(pad) + 1))",
        ),
        file="longrun/hellaswag_scoring.py",
    )
    result = verdict(tree, "hellaswag")
    assert not result.ok
    assert result.message.startswith("continuation_losses(), example 0, ending 0's summed loss"), (
        result.message
    )


def test_samples_fail_when_they_draw_from_the_global_generator(series_history, tmp_path):
    tree = edited(
        series_history,
        "samples",
        tmp_path / "tree",
        (
            "out = model.generate(idx, max_length - idx.size(1), generator=generator)",
            "torch.manual_seed(seed)\n        out = model.generate(idx, max_length - idx.size(1))",
        ),
    )
    result = verdict(tree, "samples")
    assert not result.ok
    assert "random state" in result.message and "--sample-every 0" in result.message, result.message


def test_hellaswag_batch_fails_on_answers_left_in_length_order(series_history, tmp_path):
    tree = edited(
        series_history,
        "hellaswag-batch",
        tmp_path / "tree",
        ("predictions = [None] * len(examples)", "predictions = []"),
        ("predictions[i] = (pred, pred_norm)", "predictions.append((pred, pred_norm))"),
        file="longrun/hellaswag_scoring.py",
    )
    result = verdict(tree, "hellaswag-batch")
    assert not result.ok
    assert result.message.startswith(
        "predict(model, 6 examples, device='cpu', batch_size=1), example"
    ), result.message


def test_hellaswag_train_fails_when_the_run_reports_acc(series_history, tmp_path):
    tree = edited(
        series_history,
        "hellaswag-train",
        tmp_path / "tree",
        (
            "_, correct_norm, total = all_reduce_sum(list(counts), device, ddp)",
            "correct_norm, _, total = all_reduce_sum(list(counts), device, ddp)",
        ),
    )
    result = verdict(tree, "hellaswag-train")
    assert not result.ok
    assert (
        result.message.startswith("hellaswag_accuracy(model,") and "acc would be" in result.message
    ), result.message


def test_checkpoints_fail_when_they_hold_the_namespace(series_history, tmp_path):
    # argparse's Namespace pickled whole: torch.load(weights_only=True) refuses the file
    tree = edited(
        series_history,
        "checkpoints",
        tmp_path / "tree",
        ('"args": vars(self.args),', '"args": self.args,'),
    )
    result = verdict(tree, "checkpoints")
    assert not result.ok
    assert result.message.startswith("torch.load(model_00002.pt, weights_only=True)"), (
        result.message
    )


@pytest.fixture(scope="module")
def preset_mistakes(series_history, tmp_path_factory) -> dict[str, checks.Result]:
    """Four slips in the CPU preset of one tree at the last Part I step, each failing its
    own step's check."""
    tree = edited(
        series_history,
        "results",
        tmp_path_factory.mktemp("tree"),
        # validation twice in 20 steps, not every 5
        ("val_every=5,", "val_every=10,"),
        # samples 4 times, not once at the end
        ("sample_every=20,", "sample_every=5,"),
        # 4 checkpoints of a demo
        ("checkpoint_every=0,", "checkpoint_every=5,"),
        (', log_dir="log/cpu"', ""),  # the demo's log in the real run's folder
    )
    return {
        result.slug: result
        for result in checks.run(tree, ["samples", "hellaswag-train", "checkpoints", "results"])
    }


@pytest.mark.parametrize(
    "slug, words",
    [
        (
            "samples",
            "parse_args(['--preset', 'cpu']).sample_every "
            "(samples once, after the last of its 20 steps): expected at least 20, found 5",
        ),
        (
            "hellaswag-train",
            "parse_args(['--preset', 'cpu']).log_dir: expected 'log/cpu', found 'log'",
        ),
        ("checkpoints", "parse_args(['--preset', 'cpu']).checkpoint_every: expected 0, found 5"),
        ("results", "parse_args(['--preset', 'cpu']).val_every: expected 5, found 10"),
    ],
)
def test_a_preset_that_is_not_the_narrated_one_fails(preset_mistakes, slug, words):
    result = preset_mistakes[slug]
    assert not result.ok
    assert result.message == words


def test_results_passes_with_three_decimals_printed(series_history, tmp_path):
    """plot_log.py's figures to 3 decimals ('3.292' for 3.2924, '10.900' for 10.9): each right
    to its precision."""
    tree = edited(
        series_history,
        "results",
        tmp_path / "tree",
        (
            "{first:g} at step {first_step} -> {last:g}",
            "{first:.3f} at step {first_step} -> {last:.3f}",
        ),
        (
            "(OpenAI GPT-2 124M: {GPT2_124M_VAL_LOSS})",
            "(OpenAI GPT-2 124M: {GPT2_124M_VAL_LOSS:.3f})",
        ),
        file="tools/plot_log.py",
    )
    result = verdict(tree, "results")
    assert result.ok, result.message
