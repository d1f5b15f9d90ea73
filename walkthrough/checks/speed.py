"""Checks for the speed steps: the CPU preset, TF32 and the step clock, bf16 autocast,
torch.compile, flash attention and the padded vocabulary.

Most of these steps change how `train_gpt2.py` runs rather than what it computes, so their checks
run the learner's `main([...])` in this process, on a tiny model (`--preset cpu` shrunk by flags, a
small text of common words, a step or two), and watch it from outside: a forward hook on every
module sees the GPT's outputs, an optimizer hook sees the optimizer, and `torch.compile` or
`F.scaled_dot_product_attention` is wrapped while the run lasts.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass, field

from .core import (
    VOCAB,
    check,
    expect,
    expect_close,
    expect_tensors_close,
    flags,
    printed,
    step_lines,
    watch,
)
from .model import gpt2_parameters


@dataclass
class Run:
    """What one in-process training run showed: its GPT's forward calls, the optimizers that
    stepped, its output."""

    shown: str  # the run as a command line the learner can paste, in backquotes (Tree.command)
    forwards: list = field(default_factory=list)  # core.Forward, one per call of a GPT's forward
    optimizers: list = field(default_factory=list)
    losses: list = field(default_factory=list)  # the dtype of each loss the GPT's forward returned
    stdout: str = ""

    def vocabulary(self) -> str:
        """The logits' last dimension, as one number (or every one seen)."""
        return ", ".join(
            str(size) for size in sorted({forward.shape[-1] for forward in self.forwards})
        )


def train_run(tree, *own: str, steps: int = 1) -> Run:
    """`main([...])` of the tree's train_gpt2 with `--preset cpu`, a 2-layer 32-channel model on the
    word corpus, `steps` steps of 2 × 16 tokens, then `own` flags (they win); an argparse error or a
    non-zero exit is a one-line failure."""
    GPT = tree.name("train_gpt2", "GPT")
    argv = tree.quick(
        [
            "--preset",
            "cpu",
            "--data",
            str(tree.corpus()),
            *flags(batch_size=2, seq_len=16, max_steps=steps),
            *own,
        ]
    )
    run = Run(f"`{tree.command(argv)}`")
    with watch(GPT, step=run.optimizers.append) as forwards, loss_dtypes(GPT) as losses:
        run.stdout = tree.main(argv, run.shown).stdout
    run.forwards, run.losses = forwards, losses
    expect(bool(run.forwards), f"{run.shown}", "GPT.forward to run", "no call of a GPT's forward")
    return run


@contextlib.contextmanager
def loss_dtypes(GPT):
    """While the block runs: the dtype of every loss a `GPT`'s forward returns (core.watch keeps
    only its value)."""
    import torch
    from torch.nn.modules.module import register_module_forward_hook

    found = []

    def seen(module, inputs, output):
        loss = output[1] if isinstance(output, (tuple, list)) and len(output) > 1 else None
        if isinstance(module, GPT) and torch.is_tensor(loss):
            found.append(loss.dtype)

    hook = register_module_forward_hook(seen)
    try:
        yield found
    finally:
        hook.remove()


def tf32_setting() -> str:
    """The float32 matmul precision as torch reports it: "high" means TF32 (whichever API
    switched it on)."""
    import torch

    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:  # set through the newer per-backend API: ask the CUDA matmuls directly
        return {"tf32": "high", "ieee": "highest"}.get(
            torch.backends.cuda.matmul.fp32_precision, "unknown"
        )


def expect_rate(what: str, tokens: float, dt: float, rate: float) -> None:
    """A step line's tok/sec × its dt (in ms) equal to `tokens`, within the rounding of the
    two printed figures."""
    # tok/sec may be printed as a whole number: allow its rounding (half a token/s)
    seconds = dt / 1000
    expect_close(what, tokens, rate * seconds, rel=0.03, abs_=0.5 * seconds + 0.5)


MEAN_LINE = re.compile(r"^.*\bmean\b.*?([0-9.]+)\s*ms", re.M | re.I)


@dataclass
class Compiled:
    """One call of the stand-in `torch.compile`: the module it was given (or whose call it was
    given, as `module.compile()` does it), and how many times what it returned was called."""

    module: object
    runs: int = 0


@contextlib.contextmanager
def fake_compile():
    """`torch.compile` replaced while the block runs: each call is recorded, and what it returns
    runs the model eagerly and counts its calls (compiling for real on a CPU takes far longer than a
    check may). Given a module, it returns a wrapper that, like torch's own compiled module, holds
    it as `_orig_mod` and passes attributes through; given a function (`module.compile()` hands over
    the module's call), a counting function."""
    import torch

    calls: list[Compiled] = []

    class CompiledModule(torch.nn.Module):
        def __init__(self, model, record):
            super().__init__()
            self._orig_mod = model
            self._record = record

        def forward(self, *args, **kwargs):
            self._record.runs += 1
            return self._orig_mod(*args, **kwargs)

        def __getattr__(self, name):
            try:
                return super().__getattr__(name)
            except AttributeError:
                return getattr(self._orig_mod, name)

    def compile(model=None, *args, **options):
        if isinstance(model, torch.nn.Module):
            record = Compiled(model)
            calls.append(record)
            return CompiledModule(model, record)
        record = Compiled(getattr(model, "__self__", model))
        calls.append(record)

        def counted(*args, **kwargs):
            record.runs += 1
            return model(*args, **kwargs)

        return counted

    real = torch.compile
    torch.compile = compile
    try:
        yield calls
    finally:
        torch.compile = real


def causal_attention(x, attention, n_head):
    """Multi-head causal self-attention computed by hand in float64 from the module's own c_attn and
    c_proj: scores q·k / sqrt(head size), the future masked out, a softmax, a weighted sum of the
    values, the heads side by side."""
    import torch

    x = x.double()
    B, T, C = x.shape
    qkv = x @ attention.c_attn.weight.double().T + attention.c_attn.bias.double()
    q, k, v = (part.view(B, T, n_head, C // n_head).transpose(1, 2) for part in qkv.split(C, dim=2))
    scores = q @ k.transpose(-2, -1) / math.sqrt(C // n_head)
    future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
    weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
    y = (weights @ v).transpose(1, 2).reshape(B, T, C)
    return y @ attention.c_proj.weight.double().T + attention.c_proj.bias.double()


# --------------------------------------------------------------------------------------------------


@check("preset", "train_gpt2.parse_args", "--preset cpu")
def preset(tree):
    """`--preset cpu` swaps the lecture's GPU-sized defaults (12 layers, 768 channels, B=16, T=1024)
    for a small model that trains on a laptop (4 layers, 4 heads, 128 channels: 7,357,312 parameters
    with lm_head tied; batches of 8 × 64, lr 3e-3, 20 steps), and any flag you give still wins over
    the preset, before or after it on the command line."""

    cpu = tree.parse_args(
        ["--preset", "cpu"], n_layer=4, n_head=4, n_embd=128, batch_size=8, seq_len=64, max_steps=20
    )
    # the flag is `--lr` at this step; later steps call it `--max-lr`
    learning_rate = getattr(cpu, "lr", getattr(cpu, "max_lr", None))
    expect_close("parse_args(['--preset', 'cpu'])'s learning rate", 3e-3, learning_rate or math.nan)
    tree.parse_args(
        ["--preset", "cpu", "--max-steps", "3", "-T", "32"], max_steps=3, seq_len=32, n_layer=4
    )
    tree.parse_args(
        ["--n-layer", "2", "-B", "2", "--preset", "cpu"], n_layer=2, batch_size=2, n_head=4
    )
    # no flags: the lecture's GPU run
    tree.parse_args([], n_layer=12, n_head=12, n_embd=768, batch_size=16, seq_len=1024)

    # the model the preset builds: one step of 1 × 8 tokens, the preset's sizes untouched
    GPT = tree.name("train_gpt2", "GPT")
    argv = [
        "--preset",
        "cpu",
        *flags(device="cpu", data=tree.corpus(), batch_size=1, seq_len=8, max_steps=1),
    ]
    shown = f"`{tree.command(argv)}`"
    with watch(GPT) as forwards:
        tree.main(argv)
    expect(bool(forwards), shown, "a GPT's forward to run", "no call of a GPT's forward")
    found = sum(p.numel() for p in forwards[0].model.parameters())
    expected = gpt2_parameters(4, 128, VOCAB, 1024, tied=True)
    said = f"{expected:,} (7.36M: 4 layers of 128 channels, lm_head tied)"
    expect(found == expected, f"{shown}: the model's parameters", said, f"{found:,}")


# --------------------------------------------------------------------------------------------------


@check(
    "tf32",
    "train_gpt2.main",
    "torch.set_float32_matmul_precision",
    "step lines: dt …ms | tok/sec …",
    "mean step after the first: …ms",
)
def tf32(tree):
    """A training run switches float32 matmuls to TF32 (`torch.get_float32_matmul_precision()` is
    "high" afterwards), and times itself: every step prints its time `dt` in ms and its throughput,
    the tokens it trained on / dt, and the run ends with the mean step time after the first (the
    first pays for warm-up)."""
    import torch

    torch.set_float32_matmul_precision("highest")
    run = train_run(tree, steps=2)
    setting = tf32_setting()
    expect(
        setting == "high",
        "torch.get_float32_matmul_precision() after a training run",
        "'high'",
        repr(setting),
    )

    lines = sorted(step_lines(run.stdout).items())
    steps = [(n, printed(line[0], "dt"), printed(line[0], "tok/sec")) for n, line in lines]
    steps = [step for step in steps if None not in step]
    last = " / ".join(run.stdout.strip().splitlines()[-2:])
    expect(
        len(steps) == 2,
        f"{run.shown}'s step lines ('step N | … | dt …ms | tok/sec …')",
        2,
        f"{len(steps)}" + ("" if steps else f" in: {last!r}"),
    )
    trained = [
        math.prod(forward.shape[:-1])
        for forward in run.forwards
        if forward.training and forward.grad
    ]
    tokens = sum(trained) / len(steps)  # the tokens the GPT's training forwards read, per step
    for n, dt, rate in steps:
        expect_rate(f"step {n}'s tok/sec × dt (the tokens one step trains on)", tokens, dt, rate)
    means = MEAN_LINE.findall(run.stdout)
    expect(
        bool(means),
        f"{run.shown}'s last line",
        "the mean step time after the first, in ms",
        f"{last!r}",
    )
    dts = [dt for _, dt, _ in steps]
    after_first = sum(dts[1:]) / len(dts[1:])
    expect_close(
        "the mean step time after the first (ms)", after_first, float(means[-1]), rel=0.05, abs_=0.5
    )


# --------------------------------------------------------------------------------------------------


@check("bf16", "train_gpt2.main", "--dtype bfloat16", "--device cpu", "GPT.forward")
def bf16(tree):
    """With `--dtype bfloat16` the forward pass runs under bf16 autocast (the logits come out
    bfloat16, the loss float32 and within rounding of float32's first loss) while the weights, their
    gradients and AdamW's moments stay float32; on a CPU the default is plain float32."""
    import torch

    plain = train_run(tree)
    dtypes = ", ".join(sorted({str(forward.dtype) for forward in plain.forwards}))
    expect(
        dtypes == "torch.float32",
        f"{plain.shown}'s logits (float32 is the default on a CPU)",
        "torch.float32",
        dtypes,
    )

    run = train_run(tree, "--dtype", "bfloat16")
    dtypes = ", ".join(sorted({str(forward.dtype) for forward in run.forwards}))
    expect(dtypes == "torch.bfloat16", f"{run.shown}'s logits", "torch.bfloat16 (autocast)", dtypes)
    dtypes = ", ".join(sorted({str(dtype) for dtype in run.losses}))
    what = f"{run.shown}'s loss (autocast computes cross_entropy in float32, from the bf16 logits)"
    expect(dtypes == "torch.float32", what, "torch.float32", dtypes or "no loss from GPT.forward")

    model = run.forwards[-1].model
    wrong = [(name, p.dtype) for name, p in model.named_parameters() if p.dtype != torch.float32]
    expect(
        not wrong,
        f"{run.shown}: the model's weights",
        "float32",
        ", ".join(f"{n} {d}" for n, d in wrong[:2]),
    )
    grads = [(name, p.grad.dtype) for name, p in model.named_parameters() if p.grad is not None]
    expect(bool(grads), f"{run.shown}: the weights' gradients after the step", "gradients", "none")
    wrong = [(name, dtype) for name, dtype in grads if dtype != torch.float32]
    expect(
        not wrong,
        f"{run.shown}: the gradients",
        "float32",
        ", ".join(f"{n} {d}" for n, d in wrong[:2]),
    )
    expect(bool(run.optimizers), f"{run.shown}", "an optimizer step", "none")
    moments = [
        (key, value.dtype)
        for state in run.optimizers[-1].state.values()
        for key, value in state.items()
        if torch.is_tensor(value) and value.dim() > 0
    ]
    expect(bool(moments), f"{run.shown}: the optimizer's state", "AdamW's moments", "no state")
    wrong = {f"{key} {dtype}" for key, dtype in moments if dtype != torch.float32}
    expect(not wrong, f"{run.shown}: the optimizer's moments", "float32", ", ".join(sorted(wrong)))

    # within 0.001, as the narration's runs agree: this tiny model's agree within 1e-4, while a loss
    # taken in bfloat16 (cross_entropy on the bf16 logits outside autocast) lands on bf16's grid,
    # 0.0625 apart near 10.8
    expect_close(
        "the first loss under bf16 autocast (against float32's: rounding noise only)",
        plain.forwards[0].loss,
        run.forwards[0].loss,
        rel=0,
        abs_=0.001,
    )


# --------------------------------------------------------------------------------------------------


@check("compile", "train_gpt2.main", "--compile", "--no-compile", "torch.compile")
def compile_(tree):
    """`--compile` hands the GPT to `torch.compile` and trains the compiled model it returns;
    `--no-compile` does not compile, and neither does a CPU run by default (compiling pays off
    on a GPU)."""
    GPT = tree.name("train_gpt2", "GPT")
    with fake_compile() as calls:
        run = train_run(tree, "--compile")
    compiled = [record for record in calls if isinstance(record.module, GPT)]
    expect(
        bool(compiled),
        f"{run.shown}: torch.compile",
        "called with the GPT",
        f"called with {[type(record.module).__name__ for record in calls]}" if calls else "no call",
    )
    expect(
        sum(record.runs for record in compiled) > 0,
        f"{run.shown}: what torch.compile returned",
        "called in training",
        "never called (the uncompiled model was trained)",
    )

    for own in [("--no-compile",), ()]:
        with fake_compile() as calls:
            run = train_run(tree, *own)
        expect(
            not calls,
            f"{run.shown}: torch.compile",
            "no call",
            f"{len(calls)} call{'s' * (len(calls) != 1)}",
        )


# --------------------------------------------------------------------------------------------------


@check(
    "flash",
    "train_gpt2.GPTConfig",
    "train_gpt2.CausalSelfAttention",
    "CausalSelfAttention.c_attn",
    "CausalSelfAttention.c_proj",
    "F.scaled_dot_product_attention",
)
def flash(tree):
    """`CausalSelfAttention` computes its attention with one call of
    `F.scaled_dot_product_attention`, and the result equals causal softmax attention written out by
    hand: every position attends to itself and the positions before it, never to the future, with
    the scores scaled by 1/sqrt(head size)."""
    import torch
    import torch.nn.functional as F

    config = tree.name("train_gpt2", "GPTConfig")(
        n_layer=2, n_head=4, n_embd=32, block_size=16, vocab_size=64
    )
    torch.manual_seed(0)
    attention = tree.name("train_gpt2", "CausalSelfAttention")(config).eval()
    with torch.no_grad():  # random biases too, so that a forgotten bias shows
        for module in (attention.c_attn, attention.c_proj):
            module.bias.normal_(0, 0.1)
    x = torch.randn(2, 8, 32)  # T = 8, shorter than the block size

    real, calls = F.scaled_dot_product_attention, []

    def recorded(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    module = tree.module("train_gpt2")
    # the names the script bound it to itself (`from ... import` it directly)
    aliases = [name for name, value in vars(module).items() if value is real]
    F.scaled_dot_product_attention = recorded
    for name in aliases:
        setattr(module, name, recorded)
    try:
        with torch.no_grad():
            y = attention(x)
    finally:
        F.scaled_dot_product_attention = real
        for name in aliases:
            setattr(module, name, real)
    expect(
        bool(calls),
        "CausalSelfAttention.forward",
        "a call of F.scaled_dot_product_attention",
        "none",
    )
    expect_tensors_close(
        "CausalSelfAttention(x) (T=8, 4 heads) against causal attention by hand",
        causal_attention(x, attention, config.n_head),
        y,
        atol=1e-5,
    )


# --------------------------------------------------------------------------------------------------


@check(
    "vocab",
    "train_gpt2.main",
    "--vocab-size",
    "train_gpt2.GPTConfig",
    "--pretrained",
    "GPT.from_pretrained",
)
def vocab(tree):
    """A model trained from scratch has a vocabulary padded to 50,304 (393 × 128) by default, in the
    embedding and the output layer alike (still one tied matrix: the padding costs 47 × n_embd
    parameters), `--vocab-size` sets another, `GPTConfig` keeps the tokenizer's 50,257, and
    `--pretrained` still builds a model of the checkpoint's own 50,257 rows."""
    run = train_run(tree)
    expect(
        run.vocabulary() == "50304",
        f"{run.shown}: the logits' last dimension (the vocabulary)",
        50304,
        run.vocabulary(),
    )
    model = run.forwards[-1].model
    with tree.expecting(
        f"{run.shown}'s GPT", "transformer.wte and lm_head, as in OpenAI's checkpoint"
    ):
        wte, head, wpe = (
            model.transformer.wte.weight,
            model.lm_head.weight,
            model.transformer.wpe.weight,
        )
        n_layer = len(model.transformer.h)
    shapes = f"{tuple(wte.shape)} and {tuple(head.shape)}"
    what = f"{run.shown}: transformer.wte.weight and lm_head.weight"
    expect(
        wte is head,
        what,
        "one tied matrix (the embedding padded too)",
        f"two tensors, of shapes {shapes}",
    )
    expect(wte.shape[0] == 50304, f"{what}: the tied matrix's rows", 50304, wte.shape[0])
    C, positions = wte.shape[1], wpe.shape[0]
    # GPT-2's parameters: the tied embedding, the positions, 12C² + 13C per block (attention, MLP,
    # two LayerNorms), and the last LayerNorm
    expected = 50304 * C + positions * C + n_layer * (12 * C * C + 13 * C) + 2 * C
    found = sum(p.numel() for p in model.parameters())
    expect(
        found == expected,
        f"{run.shown}: the parameter count",
        f"{expected:,} (GPT-2's at {n_layer} layers × {C}, one tied 50,304-row embedding)",
        f"{found:,}",
    )
    found = tree.name("train_gpt2", "GPTConfig")().vocab_size
    expect(found == 50257, "GPTConfig().vocab_size (the tokenizer's own)", 50257, found)

    run = train_run(tree, "--vocab-size", "50257")
    expect(
        run.vocabulary() == "50257",
        f"{run.shown}: the logits' last dimension",
        50257,
        run.vocabulary(),
    )

    run = train_run(tree, "--pretrained", str(tree.tiny_gpt2()))
    expect(
        run.vocabulary() == "50257",
        f"{run.shown}: the logits' last dimension (the checkpoint's vocabulary)",
        50257,
        run.vocabulary(),
    )
