"""The data steps' checks on a learner's tree: plausible mistakes fail with a readable line, and a
validation loss written differently from ours passes."""

import subprocess
import sys

import pytest

from check_tags import edited, verdict
from test_checks_optim import quoted
from walkthrough import checks


def test_fineweb_fails_when_the_eot_follows_each_document(series_history, tmp_path):
    tree = edited(
        series_history,
        "fineweb",
        tmp_path / "tree",
        (
            'tokens = [EOT] + enc.encode_ordinary(document["text"])',
            'tokens = enc.encode_ordinary(document["text"]) + [EOT]',
        ),
        file="fineweb.py",
    )
    result = verdict(tree, "fineweb")
    assert not result.ok
    assert result.message.startswith(
        "the shards' tokens, validation shard first: expected <|endoftext|> then"
    )
    assert "at token 0:" in result.message


def test_shards_fails_when_batches_are_int32(series_history, tmp_path):
    tree = edited(
        series_history,
        "shards",
        tmp_path / "tree",
        (
            "buf = torch.from_numpy(buf.astype(np.int64))",
            "buf = torch.from_numpy(buf.astype(np.int32))",
        ),
    )
    result = verdict(tree, "shards")
    assert not result.ok
    assert "inputs' dtype: expected torch.int64, found torch.int32" in result.message


@pytest.fixture(scope="module")
def run_mistakes(series_history, tmp_path_factory) -> dict[str, checks.Result]:
    """Two mistakes in one tree at the real run's step, each failing its own step's check."""
    tree = edited(
        series_history,
        "real-run",
        tmp_path_factory.mktemp("tree"),
        # every shard of the folder trained on, the validation shard first
        (
            'load_split(args.data, "train"), B, T',
            'load_split(args.data, "val") + load_split(args.data, "train"), B, T',
        ),
        # the preset's 512 tokens a step forgotten: it steps 2^19 tokens at a time, a
        # thousand micro-batches each
        ("        total_batch=512,\n", ""),
    )
    return {result.slug: result for result in checks.run(tree, ["shards", "real-run"])}


@pytest.mark.parametrize(
    "slug, words",
    [
        (
            "shards",
            "step 0's inputs: expected the train shards' tokens 0..16, "
            "found the validation shard's tokens: [5000,",
        ),
        ("real-run", "parse_args(['--preset', 'cpu']).total_batch: expected 512, found 524288"),
    ],
)
def test_a_plausible_run_mistake_fails(run_mistakes, slug, words):
    result = run_mistakes[slug]
    assert not result.ok
    assert words in result.message, result.message


def test_data_errors_fail_when_main_lets_the_user_error_out(series_history, tmp_path):
    tree = edited(
        series_history,
        "data-errors",
        tmp_path / "tree",
        ("except UserError as e:", "except KeyError as e:"),
    )
    result = verdict(tree, "data-errors")
    assert not result.ok
    assert (
        "`: expected one line on stderr, no traceback, found a traceback ending" in result.message
    )
    assert "UserError" in result.message
    # the command it quotes, pasted into the tree, ends in that traceback
    ((python, *argv),) = quoted(result.message)
    assert python == "python" and "--data" in argv
    done = subprocess.run(
        [sys.executable, *argv], cwd=tree, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 1 and "Traceback" in done.stderr
    assert done.stderr.strip().splitlines()[-1] in result.message


# val_loss's body, after its docstring: the scenarios below replace it
VAL_LOSS = """    model.eval()
    loader.reset()
    loss = torch.zeros((), device=device)
    for _ in range(steps):
        x, y = loader.next_batch()
        with autocast():
            _, batch_loss = model(x.to(device), y.to(device))
        loss += batch_loss.detach().float() / steps
    model.train()
    return loss
"""
# without @torch.no_grad(): VAL_LOSS_OTHERWISE turns gradients off itself
UNDECORATED = (
    "@torch.no_grad()\ndef val_loss(model, loader, steps, device, autocast):\n",
    "def val_loss(model, loader, steps, device, autocast):\n",
)
VAL_LOSS_OTHERWISE = """    was_training = model.training
    model.train(False)
    fresh = DataLoaderLite(loader.shards, loader.B, loader.T, loader.rank, loader.world_size)
    losses = []
    with torch.inference_mode():
        for _ in range(steps):
            x, y = (t.to(device) for t in fresh.next_batch())
            with autocast():
                losses.append(model(x, y)[1].float())
    model.train(was_training)
    return torch.stack(losses).mean()
"""


@pytest.mark.parametrize(
    "edits, words",
    [
        # a fresh loader instead of reset(), inference_mode, one mean at the end
        ([UNDECORATED, (VAL_LOSS, VAL_LOSS_OTHERWISE)], None),
        (
            [(VAL_LOSS, VAL_LOSS.replace("    loader.reset()\n", ""))],
            "evaluation 2, batch 0: expected the validation split's",
        ),
        (  # the last batch's loss printed, not the mean
            [
                (
                    "loss += batch_loss.detach().float() / steps",
                    "loss = batch_loss.detach().float()",
                )
            ],
            "evaluation 1: the printed validation loss (the mean of its 2 batches' losses): "
            "expected 1",
        ),
    ],
    ids=["written-otherwise", "no-reset", "last-batch"],
)
def test_validation(series_history, tmp_path, edits, words):
    tree = edited(series_history, "validation", tmp_path / "tree", *edits)
    result = verdict(tree, "validation")
    if words is None:
        assert result.ok, result.message
    else:
        assert not result.ok
        assert words in result.message, result.message
