"""The evals steps' exercise checks (walkthrough/checks/evals.py) on edited checkouts of the series: a correct
solution written differently passes, plausible mistakes fail with one readable line."""

from check_tags import edited, verdict


def test_hellaswag_passes_with_the_loss_written_as_log_softmax(series_history, tmp_path):
    tree = edited(
        series_history,
        "hellaswag",
        tmp_path / "tree",
        (
            'losses = F.cross_entropy(logits[mask].float(), targets[mask], reduction="none")',
            "losses = -logits[mask].float().log_softmax(-1).gather(1, targets[mask][:, None])[:, 0]",
        ),
        file="hellaswag_scoring.py",
    )
    result = verdict(tree, "hellaswag")
    assert result.ok, result.message


def test_hellaswag_fails_on_the_loss_taken_from_the_contexts_positions(series_history, tmp_path):
    # the mask one position early: the first scored position predicts the context's last token, not the ending's
    tree = edited(
        series_history,
        "hellaswag",
        tmp_path / "tree",
        (
            "mask.append([False] * (len(ctx) - 1) + [True] * len(cont) + [False] * len(pad))",
            "mask.append([False] * (len(ctx) - 2) + [True] * len(cont) + [False] * (len(pad) + 1))",
        ),
        file="hellaswag_scoring.py",
    )
    result = verdict(tree, "hellaswag")
    assert not result.ok
    assert result.message.startswith("continuation_losses(), example 0, ending 0's summed loss"), result.message


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
        file="hellaswag_scoring.py",
    )
    result = verdict(tree, "hellaswag-batch")
    assert not result.ok
    assert result.message.startswith("predict(model, 6 examples, device='cpu', batch_size=1), example"), result.message


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
    assert result.message.startswith("hellaswag_accuracy(model,") and "acc would be" in result.message, result.message


def test_checkpoints_fail_when_they_hold_the_namespace(series_history, tmp_path):
    # argparse's Namespace pickled whole: torch.load(weights_only=True) refuses the file
    tree = edited(series_history, "checkpoints", tmp_path / "tree", ('"args": vars(self.args),', '"args": self.args,'))
    result = verdict(tree, "checkpoints")
    assert not result.ok
    assert result.message.startswith("torch.load(model_00002.pt, weights_only=True)"), result.message
