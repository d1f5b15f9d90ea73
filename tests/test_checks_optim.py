"""The optimization steps' checks on a learner's tree: correct solutions written differently from
ours pass (the schedule as one expression, figures printed with fewer decimals, DDP's no_sync()
instead of the flag), plausible mistakes fail with a readable line."""

import re
import shlex
import subprocess
import sys

from check_tags import edited, verdict
from walkthrough.checks.core import figure, step_lines

SCHEDULE = """\
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    decay_ratio = (step - warmup_steps) / (max_steps - warmup_steps)  # 0 -> 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # 1 -> 0
    return min_lr + coeff * (max_lr - min_lr)
"""


def test_lr_schedule_passes_written_as_one_expression(series_history, tmp_path):
    one_expression = """\
    progress = min(1.0, (step - warmup_steps) / (max_steps - warmup_steps))
    return max_lr * (step + 1) / warmup_steps if step < warmup_steps else \\
        min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * progress)) / 2
"""
    tree = edited(series_history, "lr-schedule", tmp_path / "tree", (SCHEDULE, one_expression))
    result = verdict(tree, "lr-schedule")
    assert result.ok, result.message


def test_lr_schedule_fails_when_the_warmup_starts_at_zero(series_history, tmp_path):
    tree = edited(
        series_history,
        "lr-schedule",
        tmp_path / "tree",
        ("return max_lr * (step + 1) / warmup_steps", "return max_lr * step / warmup_steps"),
    )
    result = verdict(tree, "lr-schedule")
    assert not result.ok
    assert result.message == (
        "get_lr(0, max_lr=0.003, min_lr=0.0003, warmup_steps=5, max_steps=20): expected 0.0006, "
        "found 0 (off by 0.0006, 6e-10 allowed)"
    )


def test_lr_schedule_fails_when_the_cpu_preset_keeps_its_fixed_lr(series_history, tmp_path):
    """The preset's lr=3e-3 left as it was: argparse keeps it as an unused default, the run warms
    up to 6e-4."""
    tree = edited(
        series_history,
        "lr-schedule",
        tmp_path / "tree",
        ("max_lr=3e-3", "lr=3e-3"),
    )
    result = verdict(tree, "lr-schedule")
    assert not result.ok
    assert result.message == "parse_args(['--preset', 'cpu']).max_lr: expected 0.003, found 0.0006"


def test_lr_schedule_fails_when_the_rate_is_set_after_the_step(series_history, tmp_path):
    """The rate written into the groups after optimizer.step(): each step trains with
    the one before's."""
    tree = edited(
        series_history,
        "lr-schedule",
        tmp_path / "tree",
        ("        optimizer.step()\n", ""),
        ("        lr = get_lr(", "        optimizer.step()\n        lr = get_lr("),
    )
    result = verdict(tree, "lr-schedule")
    assert not result.ok
    assert result.message.startswith("the lr of every parameter group at step 0 of `"), (
        result.message
    )
    assert "(the CPU preset: max_lr 3e-3" in result.message
    assert result.message.endswith("expected 0.0006, found 0.003 (off by 0.0024, 6e-10 allowed)"), (
        result.message
    )


def test_lr_schedule_fails_when_the_line_prints_the_maximum(series_history, tmp_path):
    tree = edited(
        series_history, "lr-schedule", tmp_path / "tree", ("lr {lr:.4e}", "lr {args.max_lr:.4e}")
    )
    result = verdict(tree, "lr-schedule")
    assert not result.ok
    assert result.message.startswith(
        "the lr printed at step 0 of `python train_gpt2.py --n-layer 2 --n-head 2 "
    )
    assert result.message.endswith(
        "--vocab-size 1024 --max-steps 2` (the rate that step trains with): "
        "expected 0.0006, found 0.003 (off by 0.0024, 5e-08 allowed)"
    ), result.message


def test_betas_clip_fails_when_clipping_after_the_step(series_history, tmp_path):
    clip = "        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    clip += "  # bounds the step a bad batch can take\n"
    step = "        optimizer.step()\n"
    tree = edited(series_history, "betas-clip", tmp_path / "tree", (clip + step, step + clip))
    result = verdict(tree, "betas-clip")
    assert not result.ok
    assert result.message.startswith(
        "the gradient norm optimizer.step() applies at step 0 of `python train_gpt2.py"
    )
    assert "--max-steps 4` (printed norm 1.2" in result.message
    assert ": expected 1, found 1.2" in result.message


def test_betas_clip_fails_when_the_printed_norm_adds_up_each_tensors_norm(series_history, tmp_path):
    """Clipped correctly, but the norm printed is the sum of the tensors' norms, not the norm of
    all of them."""
    clip = "        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    summed = "        norm = sum(p.grad.norm() for p in model.parameters())\n"
    summed += "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    tree = edited(series_history, "betas-clip", tmp_path / "tree", (clip, summed))
    result = verdict(tree, "betas-clip")
    assert not result.ok
    assert result.message.startswith("the norm printed at step 0 of `python train_gpt2.py "), (
        result.message
    )
    assert (
        "--max-steps 4` (the global norm of the gradients backward() left, before clipping): "
        "expected 1.2" in result.message
    )


def test_weight_decay_fails_when_1d_tensors_decay(series_history, tmp_path):
    tree = edited(
        series_history,
        "weight-decay",
        tmp_path / "tree",
        (
            "decay = [p for p in params if p.dim() >= 2]",
            "decay = [p for p in params if p.dim() >= 1]",
        ),
        (
            "no_decay = [p for p in params if p.dim() < 2]",
            "no_decay = [p for p in params if p.dim() < 1]",
        ),
    )
    result = verdict(tree, "weight-decay")
    assert not result.ok
    assert result.message.endswith(
        "the weight decay of transformer.h.0.ln_1.weight (1-D): expected 0.0, found 0.05"
    )


def test_grad_accum_fails_when_only_the_printed_loss_is_divided(series_history, tmp_path):
    tree = edited(
        series_history,
        "grad-accum",
        tmp_path / "tree",
        (
            "            loss = loss / grad_accum_steps\n            loss_accum += loss.detach()\n",
            "            loss_accum += loss.detach() / grad_accum_steps\n",
        ),
    )
    result = verdict(tree, "grad-accum")
    assert not result.ok
    assert result.message.startswith("the printed norm at step 0 of `python train_gpt2.py "), (
        result.message
    )
    assert (
        "(2 micro-steps), against the same run with -B 8 (one batch a step): `python"
        in result.message
    )
    # the two commands it quotes, pasted into the tree, print the figures it compared
    ran, against = quoted(result.message)
    expected, found = re.search(r"expected (\S+), found (\S+)", result.message).groups()
    assert f"{printed(tree, ran, 0, 'norm'):.6g}" == found
    assert f"{printed(tree, against, 0, 'norm'):.6g}" == expected


def quoted(message: str) -> list[list[str]]:
    """The command lines a failure quotes (in backquotes), as argument lists."""
    return [shlex.split(line) for line in re.findall(r"`([^`]+)`", message)]


def printed(tree, command: list[str], step: int, name: str) -> float:
    """The figure `name` on step `step`'s line of what `command` prints, run as a learner would
    in the tree."""
    assert command[0] == "python", command
    done = subprocess.run(
        [sys.executable, *command[1:]], cwd=tree, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return figure(step_lines(done.stdout)[step][0], name)[0]


def test_grad_accum_fails_when_the_defaults_keep_the_old_micro_batch(series_history, tmp_path):
    tree = edited(
        series_history,
        "grad-accum",
        tmp_path / "tree",
        ('"-B", type=int, default=64', '"-B", type=int, default=16'),
    )
    result = verdict(tree, "grad-accum")
    assert result.message == "parse_args([]).batch_size: expected 64, found 16"


def test_grad_accum_fails_when_tok_per_sec_counts_one_micro_batch(series_history, tmp_path):
    tree = edited(
        series_history,
        "grad-accum",
        tmp_path / "tree",
        ("tokens_per_sec = args.total_batch / dt", "tokens_per_sec = B * T / dt"),
    )
    result = verdict(tree, "grad-accum")
    assert not result.ok
    assert result.message.startswith(
        "step 0's tok/sec × dt of `python train_gpt2.py --n-layer 2 --n-head 2 "
    )
    assert (
        "--vocab-size 1024 -B 4 --total-batch 512 --max-steps 2` (2 micro-steps) "
        "(the tokens of the whole step): expected 512, found 25"
    ) in result.message


def test_grad_accum_passes_with_fewer_decimals_printed(series_history, tmp_path):
    """A loss printed to 4 decimals and a norm to 2 agree to their own precision."""
    tree = edited(
        series_history,
        "grad-accum",
        tmp_path / "tree",
        ("loss {loss:.6f} |", "loss {loss:.4f} |"),
        ("norm {norm:.4f}", "norm {norm:.2f}"),
    )
    result = verdict(tree, "grad-accum")
    assert result.ok, result.message


def test_ddp_fails_when_every_rank_reads_the_same_batches(series_history, tmp_path):
    tree = edited(
        series_history,
        "ddp",
        tmp_path / "tree",
        (
            "DataLoaderLite(args.data, B, T, rank, world_size)",
            "DataLoaderLite(args.data, B, T)",
        ),
    )
    result = verdict(tree, "ddp")
    assert not result.ok
    assert result.message.startswith(
        "the printed loss at step 0 of `torchrun --nproc_per_node=2 train_gpt2.py "
    )
    assert (
        "--max-steps 3` (2 ranks (1 micro-step of B=4 each)), against the same flags in 1 process"
        in result.message
    )


def test_grad_sync_passes_with_no_sync(series_history, tmp_path):
    """DDP's own no_sync() context around the forward and backward of every micro-step
    but the last."""
    flag = """\
            if ddp:
                # all-reduce gradients on the last micro-step only; set before the forward, \
which arms DDP's hooks
                model.require_backward_grad_sync = micro_step == grad_accum_steps - 1
            with autocast():
                _, loss = model(x, y)
            # cross_entropy averages over B*T tokens; dividing by the micro-steps makes \
the sum an average too
            loss = loss / grad_accum_steps
            loss_accum += loss.detach()
            loss.backward()
"""
    no_sync = """\
            last = micro_step == grad_accum_steps - 1
            with model.no_sync() if ddp and not last else contextlib.nullcontext():
                with autocast():
                    _, loss = model(x, y)
                loss = loss / grad_accum_steps
                loss_accum += loss.detach()
                loss.backward()
"""
    tree = edited(
        series_history,
        "grad-sync",
        tmp_path / "tree",
        (flag, no_sync),
        ("import argparse\n", "import argparse\nimport contextlib\n"),
    )
    result = verdict(tree, "grad-sync")
    assert result.ok, result.message
