"""Checks for the optimization steps: AdamW's betas and clipping, the learning-rate schedule, weight
decay, gradient accumulation, and DistributedDataParallel (2 gloo ranks on the CPU against 1
process).

Most of them run the learner's `main([...flags])` in this process on a tiny model (2 layers, 16
channels, a vocabulary of 1,024) and a small text made of common words, watching every
`optimizer.step()` through PyTorch's global step hook: what the optimizer holds then (betas, lr,
weight decay, the gradients after clipping) is what the step's code did, however it is written.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from .core import (
    CheckFailed,
    check,
    expect,
    expect_close,
    expect_settings,
    expect_tensors_close,
    figure,
    printed,
    step_lines,
    watch,
)
from .speed import expect_rate

# The tiny model (Tree.quick) narrowed to 16 channels; the preset supplies the rest (B=8, T=64, and
# from step 23 on 512 tokens a step). The word corpus only uses tokens below 1,024, so the
# vocabulary (and every logit) can stay small where the script takes --vocab-size.
PRESET = ("--preset", "cpu")
SETUP = (*PRESET, "--n-embd", "16")
SMALL_VOCAB = ("--vocab-size", "1024")


def argv(tree, own: tuple[str, ...]) -> list[str]:
    """The flags of a check's run: the tiny model on the word corpus, then the
    check's `own` flags."""
    setup = [*SETUP, "--data", str(tree.corpus())]
    # a script that refuses it (a check of its own) keeps its default
    if tree.accepts([*setup, *SMALL_VOCAB]):
        setup += SMALL_VOCAB
    return tree.quick([*setup, *own])


def expect_same_printed(
    what: str, expected: tuple[float, float], found: tuple[float, float], rel: float
) -> None:
    """Two printed figures (figure()) equal within `rel` (relative; absolute near 0), or within one
    unit of the coarser one's last digit where that is wider: a learner who prints fewer decimals
    than we do still passes."""
    expect_close(what, expected[0], found[0], rel, max(rel, expected[1], found[1]))


@dataclass
class Step:
    """What the optimizer held when its step() was called."""

    # per parameter group: lr, betas, eps, weight_decay, and the dims of its tensors
    groups: list[dict]
    grad_norm: float  # the global norm of the gradients it is about to apply (after any clipping)
    grads: object  # those gradients, flattened into one tensor
    # the global norm of the gradients as backward() left them, before any clipping
    backward_norm: float


@dataclass
class Run:
    command: str  # the run as a command line the learner can paste (Tree.command)
    text: str = ""  # what the run printed
    steps: list[Step] = field(default_factory=list)

    def figure(self, step: int, name: str) -> tuple[float, float]:
        """The number after `name` ("loss", "norm") on step `step`'s printed line, and one unit of
        its last digit."""
        lines = step_lines(self.text).get(step)
        where = f"step {step}'s printed line of `{self.command}`"
        expect(bool(lines), where, f"'step {step} | loss ... | norm ...'", "none")
        found = figure(lines[0], name)
        expect(found is not None, where, f"a '{name} <number>' field", lines[0].strip())
        return found

    def value(self, step: int, name: str) -> float:
        return self.figure(step, name)[0]


@contextlib.contextmanager
def backward_norms(GPT):
    """While the block runs: the squared norm of each gradient of a `GPT` as backward() leaves it
    (accumulated, before any clipping), by parameter, in the dict it yields. A hook on each
    parameter, hung at the GPT's first forward."""
    from torch.nn.modules.module import register_module_forward_hook

    squares: dict[int, float] = {}
    hooked: set[int] = set()
    hooks = []

    def record(p):
        squares[id(p)] = float(p.grad.detach().double().square().sum())

    def seen(module, inputs, output):
        if isinstance(module, GPT) and id(module) not in hooked:
            hooked.add(id(module))
            hooks.extend(
                p.register_post_accumulate_grad_hook(record)
                for p in module.parameters()
                if p.requires_grad
            )

    hooks.append(register_module_forward_hook(seen))
    try:
        yield squares
    finally:
        for hook in hooks:
            hook.remove()


def snapshot(optimizer, squares: dict[int, float]) -> Step:
    """The optimizer as its step() begins; `squares` (backward_norms') are this step's, and are
    cleared for the next."""
    import torch

    groups = [
        {
            "lr": float(group["lr"]),
            "betas": tuple(float(b) for b in group.get("betas", ())),
            "eps": group.get("eps"),
            "weight_decay": float(group.get("weight_decay", 0.0)),
            "dims": [p.dim() for p in group["params"]],
        }
        for group in optimizer.param_groups
    ]
    grads = [
        p.grad.detach().float().flatten()
        for g in optimizer.param_groups
        for p in g["params"]
        if p.grad is not None
    ]
    flat = torch.cat(grads) if grads else torch.zeros(0)
    backward_norm = math.sqrt(sum(squares.values()))
    squares.clear()
    return Step(groups, float(flat.norm()), flat.clone(), backward_norm)


def train_here(tree, *own: str) -> Run:
    """`python train_gpt2.py --preset cpu OWN` on the tiny model, run as the learner's main() in
    this process, recording every optimizer.step() and the gradients' norm before it."""
    flags = argv(tree, own)
    run = Run(tree.command(flags))
    with backward_norms(tree.name("train_gpt2", "GPT")) as squares:
        with watch(step=lambda optimizer: run.steps.append(snapshot(optimizer, squares))):
            run.text = tree.main(flags, f"`{run.command}`").stdout
    return run


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ranks(tree, own: tuple[str, ...], nproc: int = 2, timeout: float = 90) -> Run:
    """`torchrun --nproc_per_node=2 train_gpt2.py FLAGS`, started as torchrun starts it: one
    `python train_gpt2.py` per rank with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT set (without torchrun's own agent process, which would cost one more start of
    torch). What every rank printed, in rank order."""
    flags = argv(tree, own)
    run = Run(shlex.join(["torchrun", f"--nproc_per_node={nproc}", "train_gpt2.py", *flags]))
    # again only where the machine failed the run, not the code: another program took the free port
    # before rank 0 bound it, or gloo aborted a rank as the process group came down (seen on a
    # loaded machine, twice in a row once)
    for attempt in range(3):
        texts, failed, again = launch(tree, flags, nproc, timeout, f"`{run.command}`", attempt)
        if not again:
            break
    expect(not failed, f"`{run.command}`", "every rank to run", "; ".join(failed))
    run.text = "".join(texts)
    return run


# what a rank prints when gloo aborts it as the process group comes down
TEARDOWN_ABORT = "terminate called without an active exception"


def launch(tree, flags, nproc, timeout, command, attempt):
    """Start the ranks and wait for them: (what each printed, one line per failed rank, whether
    to try again)."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env.update(WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc))
    started = []
    for rank in range(nproc):
        out = open(tree.scratch() / f"rank{rank}-{attempt}.out", "w+")
        err = open(tree.scratch() / f"rank{rank}-{attempt}.err", "w+")
        process = subprocess.Popen(
            [sys.executable, "train_gpt2.py", *flags],
            cwd=tree.path,
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=out,
            stderr=err,
        )
        started.append((process, out, err))
    deadline = time.monotonic() + timeout
    try:
        for process, _, _ in started:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        raise CheckFailed(
            f"{command}: expected it to finish, found it running after {timeout:g} s"
        ) from None
    finally:
        for process, _, _ in started:
            if process.poll() is None:
                process.kill()
                process.wait()
    texts, failed, again = [], [], False
    for rank, (process, out, err) in enumerate(started):
        out.seek(0), err.seek(0)
        texts.append(out.read())
        errors = err.read()
        out.close(), err.close()
        if process.returncode != 0:
            again = again or "address already in use" in errors.lower()
            again = again or (process.returncode == -signal.SIGABRT and TEARDOWN_ABORT in errors)
            lines = [line.strip() for line in errors.splitlines() if line.strip()]
            named = [
                line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b|.*error:", line)
            ]
            failed.append(
                f"rank {rank} exit {process.returncode}: {(named or lines or ['no message'])[-1]}"
            )
    return texts, failed, again


def schedule(step, max_lr, min_lr, warmup_steps, max_steps):
    """The narration's schedule, worked out here as the check's oracle."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    progress = (step - warmup_steps) / (max_steps - warmup_steps)
    return min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * progress)) / 2


def ranks_against_one(tree, B: int, steps: int = 3) -> None:
    """2 gloo ranks, each on micro-batches of B × 64, against one process with the same flags (so
    twice the micro-steps): only rank 0 prints, the same loss and gradient norm at every step,
    replicas that end identical."""
    own = ("-B", str(B), "--total-batch", "512", "--max-steps", str(steps))
    two = ranks(tree, own)
    one = train_here(tree, *own)
    micro = 512 // (B * 64 * 2)
    under = f"2 ranks ({micro} micro-step{'s' if micro > 1 else ''} of B={B} each)"
    lines = step_lines(two.text)
    under = f"`{two.command}` ({under})"
    for step in range(steps):
        count = len(lines.get(step, []))
        expect(
            count == 1,
            f"step {step}'s printed line of {under}",
            "once (only rank 0 prints)",
            f"{count} times",
        )
    for step in range(steps):
        for name, tolerance in (("loss", 2e-6), ("norm", 2e-4)):
            expected, found = one.figure(step, name), two.figure(step, name)
            what = (
                f"the printed {name} at step {step} of {under}, against the same flags in 1 process"
            )
            expect_same_printed(what, expected, found, tolerance)
    drift = printed(two.text, "replicas differ by at most")
    said = "'replicas differ by at most ...'"
    expect(drift is not None, f"what rank 0 prints at the end of {under}", said, "no such line")
    expect(
        drift == 0.0,
        f"the largest weight difference between the ranks of {under}",
        0.0,
        f"{drift:.3e}",
    )


# --------------------------------------------------------------------------------------------------
# ---- step 20: AdamW's betas, and gradient clipping


@check("betas-clip", "train_gpt2.main", "--preset cpu", "--max-steps", "the printed norm")
def betas_clip(tree):
    """The run's AdamW uses GPT-3's betas (0.9, 0.95) and eps 1e-8, and every update is clipped to a
    gradient norm of at most 1.0: the norm printed on a step's line is the global norm of the
    gradients before clipping (the square root of the sum of every gradient's squares), and the
    gradients the optimizer applies have norm min(1, that)."""
    run = train_here(tree, "--max-steps", "4")
    expect(len(run.steps) == 4, f"optimizer steps in `{run.command}`", 4, len(run.steps))
    for group in run.steps[0].groups:
        expect(group["betas"] == (0.9, 0.95), "AdamW's betas", (0.9, 0.95), group["betas"])
        expect(group["eps"] == 1e-8, "AdamW's eps", 1e-8, group["eps"])
    norms = [run.figure(step, "norm") for step in range(4)]
    expect(
        max(norm for norm, _ in norms) > 1.0,
        f"the norms printed by `{run.command}`",
        "the norms before clipping (some above 1.0)",
        ", ".join(f"{norm:.4f}" for norm, _ in norms),
    )
    for step, ((norm, digit), taken) in enumerate(zip(norms, run.steps)):
        expect_close(
            f"the norm printed at step {step} of `{run.command}` "
            "(the global norm of the gradients backward() left, before clipping)",
            taken.backward_norm,
            norm,
            rel=1e-5,
            abs_=0.5 * digit + 1e-6,  # to the printed precision
        )
        expect_close(
            f"the gradient norm optimizer.step() applies at step {step} of `{run.command}` "
            f"(printed norm {norm:.4f})",
            min(norm, 1.0),
            taken.grad_norm,
            rel=2e-4,
            abs_=max(2e-4, digit),
        )


# --------------------------------------------------------------------------------------------------
# ---- step 21: learning-rate warmup and cosine decay


@check(
    "lr-schedule",
    "train_gpt2.get_lr",
    "--max-lr",
    "--min-lr-ratio",
    "--warmup-steps",
    "--max-steps",
    "the printed lr",
)
def lr_schedule(tree):
    """get_lr rises linearly from max_lr / warmup_steps to max_lr over the warmup, follows half a
    cosine down to min_lr at max_steps, and stays at min_lr after it; the run sets that rate on
    every parameter group before each optimizer.step() and prints it on the step's line. The
    defaults: --max-lr 6e-4, --min-lr-ratio 0.1, 10 warmup steps of 50; the CPU preset: max_lr 3e-3,
    5 warmup steps of 20."""
    expect_settings(tree, [], max_lr=6e-4, min_lr_ratio=0.1, warmup_steps=10, max_steps=50)
    expect_settings(tree, PRESET, max_lr=3e-3, min_lr_ratio=0.1, warmup_steps=5, max_steps=20)
    get_lr = tree.name("train_gpt2", "get_lr")
    settings = [
        (
            dict(max_lr=3e-3, min_lr=3e-4, warmup_steps=5, max_steps=20),
            [0, 1, 4, 5, 6, 10, 15, 19, 20, 35],
        ),
        (dict(max_lr=1.0, min_lr=0.25, warmup_steps=3, max_steps=11), [0, 2, 3, 5, 7, 10, 11, 12]),
    ]
    for kwargs, steps in settings:
        for step in steps:
            spelled = ", ".join(f"{k}={v:g}" for k, v in kwargs.items())
            expect_close(
                f"get_lr({step}, {spelled})",
                schedule(step, **kwargs),
                get_lr(step, **kwargs),
                1e-6,
                1e-12,
            )

    runs = [
        # the CPU preset's own schedule, as the step's Try-it runs it: 2 steps of its warmup
        (
            ("--max-steps", "2"),
            (3e-3, 3e-4, 5, 2),
            " (the CPU preset: max_lr 3e-3, 5 warmup steps)",
        ),
        (
            (
                "--max-lr",
                "2e-3",
                "--min-lr-ratio",
                "0.25",
                "--warmup-steps",
                "2",
                "--max-steps",
                "5",
            ),
            (2e-3, 5e-4, 2, 5),
            "",
        ),
    ]
    for own, settings, said in runs:
        run = train_here(tree, *own)
        steps = settings[-1]
        expect(
            len(run.steps) == steps, f"optimizer steps in `{run.command}`", steps, len(run.steps)
        )
        for step, taken in enumerate(run.steps):
            expected = schedule(step, *settings)
            for group in taken.groups:
                what = f"the lr of every parameter group at step {step} of `{run.command}`{said}"
                expect_close(what, expected, group["lr"], 1e-6, 1e-12)
            lr, digit = run.figure(step, "lr")
            what = (
                f"the lr printed at step {step} of `{run.command}` (the rate that step trains with)"
            )
            # equal to the printed precision
            expect_close(what, expected, lr, 1e-6, 0.5 * digit * (1 + 1e-6))


# --------------------------------------------------------------------------------------------------
# ---- step 22: weight decay groups, and fused AdamW


@check("weight-decay", "train_gpt2.GPT.configure_optimizers", "--weight-decay")
def weight_decay(tree):
    """configure_optimizers returns an AdamW whose groups decay every tensor of two or more
    dimensions (matmul weights, embeddings) and no 1-D tensor (biases, LayerNorm), each
    parameter in exactly one group, fused only for CUDA; and the run trains with it, at a decay
    of 0.1 by default."""
    import torch

    tree.name("train_gpt2", "GPT.configure_optimizers")
    model = tree.gpt(vocab_size=1024)
    call = "configure_optimizers(weight_decay=0.05, learning_rate=6e-4, device_type='cpu')"
    optimizer = model.configure_optimizers(weight_decay=0.05, learning_rate=6e-4, device_type="cpu")
    expect(
        isinstance(optimizer, torch.optim.AdamW),
        f"{call}'s optimizer",
        "torch.optim.AdamW",
        type(optimizer).__name__,
    )
    where: dict[int, list[dict]] = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            where.setdefault(id(p), []).append(group)
        expect_close(f"{call}: a group's lr", 6e-4, group["lr"])
        expect(
            tuple(group["betas"]) == (0.9, 0.95),
            f"{call}: a group's betas",
            (0.9, 0.95),
            tuple(group["betas"]),
        )
    for name, p in model.named_parameters():
        groups = where.pop(id(p), [])
        expect(len(groups) == 1, f"{call}: the groups holding {name}", "exactly one", len(groups))
        expected = 0.05 if p.dim() >= 2 else 0.0
        found = groups[0]["weight_decay"]
        expect(
            found == expected, f"{call}: the weight decay of {name} ({p.dim()}-D)", expected, found
        )
    expect(
        not where,
        f"{call}: tensors in its groups",
        "only the model's parameters",
        f"{len(where)} others",
    )
    expect(
        not optimizer.defaults.get("fused"),
        f"{call}: fused",
        "off on the CPU",
        optimizer.defaults.get("fused"),
    )
    cuda = model.configure_optimizers(weight_decay=0.05, learning_rate=6e-4, device_type="cuda")
    expect(
        cuda.defaults.get("fused") is True,
        "configure_optimizers(..., device_type='cuda'): fused",
        True,
        cuda.defaults.get("fused"),
    )

    run = train_here(tree, "--max-steps", "1")
    expect(len(run.steps) == 1, f"optimizer steps in `{run.command}`", 1, len(run.steps))
    for group in run.steps[0].groups:
        for dim in set(group["dims"]):
            expected = 0.1 if dim >= 2 else 0.0
            what = f"the weight decay the run applies to {dim}-D tensors (default --weight-decay)"
            expect(group["weight_decay"] == expected, what, expected, group["weight_decay"])


# --------------------------------------------------------------------------------------------------
# ---- step 23: gradient accumulation


@check("grad-accum", "--total-batch", "--batch-size/-B", "the printed loss and norm", "tok/sec")
def grad_accum(tree):
    """--total-batch 512 with -B 4 (two micro-batches of 4 × 64) takes the same steps as one batch
    of 8 × 64: the same printed loss and gradient norm, and the same gradients at optimizer.step(),
    because each micro-batch's loss is divided by the number of micro-steps; tok/sec counts the
    whole 512. The defaults are GPT-3 small's 2^19 = 524,288 tokens a step in micro-batches of 64 ×
    1024; the CPU preset's, 512 in micro-batches of 8 × 64."""
    expect_settings(tree, [], total_batch=524288, batch_size=64, seq_len=1024)
    expect_settings(tree, PRESET, total_batch=512, batch_size=8, seq_len=64)
    steps = 2
    whole = train_here(tree, "-B", "8", "--total-batch", "512", "--max-steps", str(steps))
    for B, micro in (("4", 2), ("2", 4)):
        parts = train_here(tree, "-B", B, "--total-batch", "512", "--max-steps", str(steps))
        what = f"`{parts.command}` ({micro} micro-steps)"
        against = f"against the same run with -B 8 (one batch a step): `{whole.command}`"
        expect(
            len(parts.steps) == len(whole.steps),
            f"optimizer steps in {what}",
            len(whole.steps),
            len(parts.steps),
        )
        for step in range(steps):
            for name, tolerance in (("loss", 2e-6), ("norm", 2e-4)):
                expect_same_printed(
                    f"the printed {name} at step {step} of {what}, {against}",
                    whole.figure(step, name),
                    parts.figure(step, name),
                    tolerance,
                )
            expect_tensors_close(
                f"the gradients at optimizer.step() at step {step} of {what}",
                whole.steps[step].grads,
                parts.steps[step].grads,
                atol=1e-6,
                rtol=1e-4,
            )
            expect_rate(
                f"step {step}'s tok/sec × dt of {what} (the tokens of the whole step)",
                512,
                parts.value(step, "dt"),
                parts.value(step, "tok/sec"),
            )


# --------------------------------------------------------------------------------------------------
# ---- steps 24 and 25: DistributedDataParallel, and where the sync flag goes


@check(
    "ddp",
    "torchrun --nproc_per_node=2 train_gpt2.py --device cpu",
    "train_gpt2.replica_drift",
    "the printed loss",
)
def ddp(tree):
    """Under torchrun, 2 processes (gloo on the CPU) train one model: each rank reads its own
    slice of the batch, DDP averages their gradients, only rank 0 prints, and every step's loss
    and gradient norm equal one process accumulating the same 512 tokens; the replicas end bit for
    bit the same."""
    ranks_against_one(tree, B=4)


@check(
    "grad-sync",
    "torchrun --nproc_per_node=2 train_gpt2.py --device cpu",
    "model.require_backward_grad_sync",
)
def grad_sync(tree):
    """With 2 micro-steps on each of 2 ranks, the gradients are averaged over the ranks once,
    for the whole accumulated batch (the sync flag is set before the last micro-step's forward,
    where DDP reads it): every step equals one process's on the same 512 tokens, and the
    replicas never drift apart."""
    ranks_against_one(tree, B=2)
