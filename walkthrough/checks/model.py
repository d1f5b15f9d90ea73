"""Checks for the steps that build the model: from the skeleton to GPT-2's initialisation.

The model steps are checked against oracles: transformers' own GPT-2 (`GPT2LMHeadModel`) loaded from
the same small checkpoint, torch's own cross-entropy, and the tokenizer's own ids. The checkpoint is
a small random GPT-2 whose weights are spread wider than a fresh initialisation (LayerNorm gains and
biases included), so that a skipped tensor, a missing transpose, an exact GELU or a wrong attention
scale all move the logits well beyond rounding.
"""

from __future__ import annotations

import math
import re

from .core import (
    PROMPT,
    TINY,
    VOCAB,
    WORDS,
    check,
    expect,
    expect_close,
    expect_tensors_close,
    printed,
    step_lines,
    watch,
)

# stored (in, out) in GPT-2's checkpoint, nn.Linear's (out, in) transposed
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# a text of 25 tokens
SHAKESPEARE = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
)


# --------------------------------------------------------------------------------------------------
# helpers


def gpt2_parameters(n_layer, n_embd, vocab_size, block_size, tied):
    """GPT-2's parameter count, counted from its shapes: embeddings, per block two LayerNorms,
    attention (c_attn, c_proj) and the MLP (c_fc, c_proj) with their biases, the final LayerNorm,
    and lm_head unless it is tied."""
    C = n_embd
    block = 2 * 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * 4 * C + 4 * C) + (4 * C * C + C)
    embeddings = vocab_size * C + block_size * C
    return embeddings + n_layer * block + 2 * C + (0 if tied else vocab_size * C)


def varied_gpt2(tree):
    """The `tiny_gpt2()` checkpoint with every tensor redrawn wider (matrices and embeddings std
    0.2, biases std 0.1, LayerNorm gains 1 ± 0.2), saved by transformers: a checkpoint where every
    tensor and every detail of the forward pass shows in the logits. Returns the folder and
    transformers' model loaded from it (eval mode)."""
    import torch
    from transformers import GPT2LMHeadModel
    from transformers.utils import logging

    logging.disable_progress_bar()  # its bars on stderr are no part of a verdict
    folder = tree.scratch() / "tiny-gpt2-varied"
    if not folder.exists():
        model = GPT2LMHeadModel.from_pretrained(tree.tiny_gpt2())
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():  # wte and lm_head are one tensor: drawn once
                noise = torch.randn(p.shape, generator=generator)
                if p.dim() > 1:
                    p.copy_(0.2 * noise)
                elif ".ln_" in name and name.endswith(".weight"):
                    p.copy_(1 + 0.2 * noise)
                else:
                    p.copy_(0.1 * noise)
        model.save_pretrained(folder)
    return folder, GPT2LMHeadModel.from_pretrained(folder).eval()


def only_checkpoint_names(model, theirs):
    """Fail unless the model's state_dict holds no name the checkpoint lacks: a buffer such as
    the causal mask is no weight, so it stays out (persistent=False), and a state_dict loads
    key for key."""
    extra = [key for key in model.state_dict() if key not in theirs]
    buffers = {name for name, _ in model.named_buffers()}
    hint = (
        " (a buffer: persistent=False keeps it out, it is not a weight)"
        if extra and extra[0] in buffers
        else ""
    )
    blocks = TINY["n_layer"]
    expect(
        not extra,
        "GPT's state_dict",
        f"only the checkpoint's {len(theirs)} names (12 per block × {blocks}, and 5 more)",
        f"also {', '.join(extra[:2])}{', ...' if len(extra) > 2 else ''}{hint}",
    )


def has_forward(GPT):
    """Fail unless GPT defines its own forward (nn.Module's placeholder raises
    an unreadable error)."""
    import torch

    forward = getattr(GPT, "forward", None)
    expect(
        forward is not None and forward is not torch.nn.Module.forward,
        "train_gpt2.GPT.forward",
        "a forward method",
        "none (only nn.Module's placeholder)",
    )


def logits_of(model, idx):
    """The logits of model(idx), whether forward returns them alone (step 2) or as (logits, loss)
    (from step 5)."""
    out = model(idx)
    return out[0] if isinstance(out, (tuple, list)) else out


def among_top(model, out, start, k, block_size, call):
    """Every token of `out` from position `start` on is one of the k most likely after the
    block_size tokens before it."""
    import torch

    with torch.no_grad():
        for t in range(start, out.size(1)):
            last = logits_of(model, out[:, max(0, t - block_size) : t])[:, -1, :]
            for row in range(out.size(0)):
                token = out[row, t].item()
                rank = int((last[row] > last[row, token]).sum().item()) + 1
                expect(
                    rank <= k,
                    f"{call}: token {t} of row {row}",
                    f"one of the {k} most likely next tokens (reading at most {block_size} back)",
                    f"token {token}, ranked {rank}",
                )


def loader_file(folder, name, tokens_mod):
    """A text of common words with a literal '<|endoftext|>' inside, grown until its token count N
    satisfies N % 16 == tokens_mod; returns its path and its tokens (as plain text)."""
    import random

    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    pick = random.Random(name).choice
    text = (
        " ".join(pick(WORDS) for _ in range(60))
        + " <|endoftext|>"
        + "".join(" " + pick(WORDS) for _ in range(60))
    )
    while len(enc.encode_ordinary(text)) % 16 != tokens_mod:
        text += " " + pick(WORDS)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path, enc.encode_ordinary(text)


def flag_default(tree, flag, probe=7):
    """parse_args([])'s value for `flag` (say -B), whatever the attribute is called: the one
    `flag probe` changes."""
    base, probed = vars(tree.parse_args([])), vars(tree.parse_args([flag, str(probe)]))
    changed = [name for name, value in probed.items() if value != base.get(name)]
    return base[changed[0]] if changed else None


def window(tokens, found):
    """Where the flat list `found` sits in `tokens` (its first index), or None."""
    n = len(found)
    return next((s for s in range(len(tokens) - n + 1) if tokens[s : s + n] == found), None)


def read_epoch(tree, DataLoaderLite, path, tokens, B, T):
    """One epoch of `DataLoaderLite(path, B, T)` and the first batch of the next, checked
    batch by batch."""
    import torch

    # tiktoken's encode refuses the text '<|endoftext|>' (a special token) unless told otherwise
    expected = "a loader reading '<|endoftext|>' as plain text (encode_ordinary)"
    with tree.expecting(f"DataLoaderLite({path.name}, {B}, {T})", expected):
        loader = DataLoaderLite(str(path), B, T)
    BT, N = B * T, len(tokens)
    batches = (N - 1) // BT  # each batch needs B*T + 1 tokens: its inputs and one more target
    for k in range(batches + 1):
        what = f"DataLoaderLite({path.name} of {N} tokens, B={B}, T={T}): batch {k + 1}"
        start = 0 if k == batches else k * BT
        when = (
            "the first batch again (a new epoch)"
            if k == batches
            else f"tokens {start}..{start + BT - 1}"
        )
        with tree.expecting(what, when):  # e.g. a last batch one target short
            x, y = loader.next_batch()
        expect(
            tuple(x.shape) == (B, T) and tuple(y.shape) == (B, T),
            f"{what}'s x and y shapes",
            (B, T),
            tuple(x.shape),
        )
        expect(x.dtype == torch.long, f"{what}'s x dtype", torch.long, x.dtype)
        fx, fy = x.reshape(-1).tolist(), y.reshape(-1).tolist()
        sx, sy = window(tokens, fx), window(tokens, fy)
        expect(
            sx is not None,
            f"{what}'s x",
            f"{BT} consecutive tokens of the file (the rows one after another)",
            "other tokens",
        )
        shifted = {sx - 1: "the token before it (shifted the wrong way)", sx: "y equal to x"}.get(
            sy, "other tokens"
        )
        expect(
            sy == sx + 1,
            what,
            "y to be x shifted by one (each target the token after its input)",
            shifted,
        )
        expect(sx == start, f"{what}'s x", when, f"tokens {sx}..{sx + BT - 1}")


# --------------------------------------------------------------------------------------------------
# step 1 to 9


@check(
    "skeleton",
    "train_gpt2.GPTConfig",
    "train_gpt2.GPT",
    "GPT.from_pretrained(folder)",
    "GPT.state_dict",
)
def skeleton(tree):
    """`GPTConfig()` holds GPT-2 124M's sizes (163,037,184 parameters, lm_head untied), and
    `GPT.from_pretrained` loads a GPT-2 checkpoint saved by transformers into our `GPT`: the same
    names as OpenAI's tensors and no others (12 per block and 5 more), every tensor copied, the
    four Conv1D matrices transposed into nn.Linear's (out, in) layout, and the model's sizes taken
    from the checkpoint."""
    import torch

    GPTConfig = tree.name("train_gpt2", "GPTConfig")
    GPT = tree.name("train_gpt2", "GPT")
    sizes = ("block_size", "vocab_size", "n_layer", "n_head", "n_embd")
    default = GPTConfig()
    found = ", ".join(f"{name}={getattr(default, name, None)}" for name in sizes)
    expected = "block_size=1024, vocab_size=50257, n_layer=12, n_head=12, n_embd=768"
    expect(found == expected, "GPTConfig()'s sizes", f"GPT-2 124M's ({expected})", found)

    folder, reference = varied_gpt2(tree)
    from_pretrained = tree.name("train_gpt2", "GPT.from_pretrained")
    model = from_pretrained(str(folder))
    expect(isinstance(model, GPT), "GPT.from_pretrained(folder)", "a GPT", type(model).__name__)
    ours, theirs = model.state_dict(), reference.state_dict()
    missing = [key for key in theirs if key not in ours]
    expect(
        not missing,
        "GPT's state_dict",
        "every name of GPT-2's checkpoint",
        f"no {', '.join(missing[:2])}{', ...' if len(missing) > 2 else ''} "
        f"({len(missing)} missing)",
    )
    only_checkpoint_names(model, theirs)
    for key, value in theirs.items():
        if key.endswith(CONV1D):
            # transformers keeps OpenAI's (in, out) layout; nn.Linear holds (out, in)
            value = value.t()
        mine = ours[key]
        expect(
            tuple(mine.shape) == tuple(value.shape),
            f"{key}'s shape",
            tuple(value.shape),
            tuple(mine.shape),
        )
        hint = " (copied without the transpose?)" if key.endswith(CONV1D) else ""
        same = torch.equal(mine.detach().cpu().float(), value.float())
        expect(same, f"GPT.from_pretrained: {key}", "the checkpoint's values", f"others{hint}")

    # on the meta device: shapes, no memory
    with torch.device("meta"), tree.expecting("GPT(GPTConfig()) on the meta device", "a model"):
        full = GPT(default)
    count = sum(p.numel() for p in full.parameters())
    expected = gpt2_parameters(12, 768, VOCAB, 1024, tied=False)
    said = (
        f"{expected:,} (163.04M: 124M, and lm_head's own copy of the token embedding until step 12)"
    )
    expect(count == expected, "GPT(GPTConfig())'s parameters", said, f"{count:,}")


@check("forward", "GPT.from_pretrained(folder)", "GPT.forward(idx)")
def forward(tree):
    """`GPT.forward(idx)` computes GPT-2's function: on the same checkpoint, its logits for random
    tokens equal transformers' GPT2LMHeadModel's to float32 rounding, and it is causal, so changing
    a token never changes the logits at the positions before it; the causal mask, no weight, stays
    out of the state_dict."""
    import torch

    GPT = tree.name("train_gpt2", "GPT")
    has_forward(GPT)
    folder, reference = varied_gpt2(tree)
    model = GPT.from_pretrained(str(folder)).eval()
    only_checkpoint_names(model, reference.state_dict())
    # fewer tokens than the checkpoint's 64 positions, and all of them
    for B, T in ((2, 48), (1, 64)):
        idx = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(T))
        what = f"GPT.forward(idx)'s logits for ({B}, {T}) tokens"
        with torch.no_grad():
            with tree.expecting(f"{what} (block_size 64)", "logits"):
                logits = logits_of(model, idx)
            expect(tuple(logits.shape) == (B, T, VOCAB), what, (B, T, VOCAB), tuple(logits.shape))
            changed = idx.clone()
            changed[:, 40] = (idx[:, 40] + 1) % VOCAB
            worst = (logits_of(model, changed)[:, :40] - logits[:, :40]).abs().max().item()
            expect(
                worst <= 1e-5,
                "the logits at positions 0..39 after changing token 40",
                "unchanged (a position may not look at later tokens)",
                f"a change of {worst:.3g}",
            )
            expected = reference(idx).logits
        expect_tensors_close(f"{what}, against transformers' GPT-2", expected, logits, atol=1e-4)


@check("sampling", "GPT.generate(idx, max_new_tokens, top_k=50, generator=None)")
def sampling(tree):
    """`GPT.generate(idx, max_new_tokens, top_k, generator)` keeps the prompts and appends
    max_new_tokens tokens, each drawn at random among the top_k most likely next tokens, reading at
    most block_size tokens back; a seeded `torch.Generator` makes the samples repeatable without
    touching torch's global random state."""
    import torch

    tree.name("train_gpt2", "GPT.generate")
    model = tree.gpt(block_size=16).eval()
    prompt = torch.randint(0, VOCAB, (3, 4), generator=torch.Generator().manual_seed(0))
    call = "GPT.generate(prompt of (3, 4), 8, top_k=5, generator=g)"
    state = torch.get_rng_state()
    out = model.generate(prompt, 8, top_k=5, generator=torch.Generator().manual_seed(42))
    expect(tuple(out.shape) == (3, 12), f"{call}'s shape", (3, 12), tuple(out.shape))
    expect(
        torch.equal(out[:, :4], prompt),
        f"{call}'s first 4 tokens",
        "the prompt, unchanged",
        "other tokens",
    )
    expect(
        torch.equal(torch.get_rng_state(), state),
        f"torch's global random state after {call}",
        "untouched",
        "used",
    )
    among_top(model, out, 4, 5, 16, call)
    again = model.generate(prompt, 8, top_k=5, generator=torch.Generator().manual_seed(42))
    expect(
        torch.equal(again, out),
        f"{call} twice with g seeded alike",
        "the same samples",
        "different ones",
    )
    rows = model.generate(
        prompt[:1].repeat(5, 1), 6, top_k=50, generator=torch.Generator().manual_seed(0)
    )
    distinct = len({tuple(row.tolist()) for row in rows})
    expect(
        distinct > 1,
        "5 continuations of one prompt with top_k=50",
        "different samples",
        "5 identical rows",
    )

    prompt = torch.randint(0, VOCAB, (2, 14), generator=torch.Generator().manual_seed(1))
    call = "GPT.generate(prompt of (2, 14), 6, top_k=5, generator=g) with block_size 16"
    # fed more, a model fails in its own way: say why
    with tree.expecting(call, "it to read the last 16 tokens"):
        out = model.generate(prompt, 6, top_k=5, generator=torch.Generator().manual_seed(42))
    expect(tuple(out.shape) == (2, 20), f"{call}'s shape", (2, 20), tuple(out.shape))
    among_top(model, out, 14, 5, 16, call)


@check("device", "python train_gpt2.py --device cpu --num-samples N --max-length L")
def device(tree):
    """`python train_gpt2.py --device cpu` puts the model on the CPU and, without `--pretrained`,
    samples from a randomly initialised GPT-2 124M (`GPTConfig()`'s sizes: 163,037,184 parameters,
    lm_head untied), offline: `--num-samples 2 --max-length 10` prints two continuations of "Hello,
    I'm a language model,", each 10 tokens long with the 8-token prompt (2 new tokens)."""
    argv = ["--device", "cpu", "--num-samples", "2", "--max-length", "10"]
    shown = f"`{tree.command(argv)}`"
    with watch("GPT") as forwards:  # the script's own GPT class: it runs as __main__
        out = tree.script(argv).stdout
    samples = [line for line in out.splitlines() if PROMPT in line]
    expect(
        len(samples) == 2, f"{shown}'s output", f"2 lines continuing {PROMPT!r}", f"{len(samples)}"
    )
    expect(bool(forwards), shown, "a GPT's forward to run", "no call of a GPT's forward")
    found = sum(p.numel() for p in forwards[0].model.parameters())
    expected = gpt2_parameters(12, 768, VOCAB, 1024, tied=False)
    said = f"GPT-2 124M's {expected:,} (GPTConfig()'s sizes, lm_head untied)"
    expect(found == expected, f"{shown}: the random model's parameters", said, f"{found:,}")
    # the last token of a 10-token sample is drawn from the logits after the 9 before it
    longest = max(forward.idx.shape[-1] for forward in forwards)
    expect(
        longest == 9,
        f"{shown}: the longest input the GPT read",
        "9 tokens (samples of 10 in all, the 8-token prompt included: 2 new tokens)",
        f"{longest} (samples of {longest + 1}: {longest - 7} new tokens)",
    )


@check("first-loss", "input.txt", "GPT.forward(idx, targets) -> (logits, loss)")
def first_loss(tree):
    """`input.txt` holds tiny shakespeare, and `GPT.forward(idx, targets)` returns (logits, loss):
    the mean cross-entropy of the targets, equal to torch's own on the flattened logits. On the
    text's first batch (inputs, and targets shifted by one) a new model's loss is near ln(50257) ≈
    10.82: it guesses roughly uniformly."""
    import tiktoken
    import torch
    import torch.nn.functional as F

    path = tree.path / "input.txt"
    expect(path.is_file(), "input.txt", "tiny shakespeare", "no file")
    text = path.read_text(encoding="utf-8")
    expect(
        len(text) == 1_115_394,
        "input.txt",
        "tiny shakespeare's 1,115,394 characters",
        f"{len(text):,}",
    )
    has_forward(tree.name("train_gpt2", "GPT"))
    B, T = 4, 32
    buf = torch.tensor(tiktoken.get_encoding("gpt2").encode(text[:1000])[: B * T + 1])
    x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
    model = tree.gpt(seed=1337)
    with tree.expecting("GPT.forward(idx, targets)", "it to take the targets"):
        out = model(x, y)
    pair = isinstance(out, (tuple, list)) and len(out) == 2
    expect(pair, "GPT.forward(idx, targets)", "(logits, loss)", type(out).__name__)
    logits, loss = out
    expect(
        tuple(logits.shape) == (B, T, VOCAB),
        "GPT.forward(idx, targets)'s logits",
        (B, T, VOCAB),
        tuple(logits.shape),
    )
    expect(
        torch.is_tensor(loss) and loss.dim() == 0,
        "GPT.forward(idx, targets)'s loss",
        "a 0-d tensor",
        repr(loss)[:60],
    )
    expected = F.cross_entropy(logits.detach().reshape(-1, VOCAB), y.reshape(-1))
    expect_close(
        "GPT.forward(idx, targets)'s loss, against F.cross_entropy of its logits",
        expected,
        loss.detach(),
    )
    expect(
        abs(loss.item() - math.log(VOCAB)) < 0.5,
        "the loss at init on the first batch",
        f"near ln(50257) = {math.log(VOCAB):.4f}",
        f"{loss.item():.4f}",
    )
    loss.backward()
    frozen = [name for name, p in model.named_parameters() if p.grad is None]
    expect(
        not frozen, "loss.backward()", "a gradient for every parameter", f"none for {frozen[:2]}"
    )


@check(
    "overfit",
    "train_gpt2.main(argv)",
    "--n-layer",
    "--n-head",
    "--n-embd",
    "--lr",
    "--max-steps",
    "-B",
    "-T",
)
def overfit(tree):
    """`train_gpt2.main([flags])` trains a model of the size the flags ask for (its parameters
    counted from GPT-2's shapes, lm_head untied) with AdamW at `--lr`, printing the loss at every
    step; without flags, `parse_args` gives the 124M model, batches of 4 × 32 tokens and a learning
    rate of 3e-4. On one small batch of tiny shakespeare, repeated, the loss starts near ln(50257)
    and falls close to zero: the model learns the batch by heart, so the forward pass, the backward
    pass and the optimizer step all work."""
    import torch

    GPT = tree.name("train_gpt2", "GPT")
    folder = tree.scratch() / "overfit"
    folder.mkdir(exist_ok=True)
    # one batch of 1 × 16 (+1) fits, not two
    (folder / "input.txt").write_text(SHAKESPEARE, encoding="utf-8")
    argv = tree.quick(["-B", "1", "-T", "16", "--lr", "2e-2", "--max-steps", "20"])
    shown = f"`{tree.command(argv, folder=folder)}`"
    optimizers = []
    with watch(GPT, step=optimizers.append) as forwards:
        out = tree.main(argv, folder=folder).stdout
    expect(bool(forwards), shown, "a GPT's forward to run", "no call of a GPT's forward")
    expect(bool(optimizers), shown, "an optimizer step every step", "no call of optimizer.step()")
    found = sum(p.numel() for p in forwards[0].model.parameters())
    expected = gpt2_parameters(TINY["n_layer"], TINY["n_embd"], VOCAB, 1024, tied=False)
    said = f"{expected:,} (2 layers of 32 channels, 1,024 positions, lm_head untied)"
    expect(found == expected, f"{shown}: the model's parameters", said, f"{found:,}")
    optimizer = optimizers[0]
    kind = type(optimizer).__name__
    expect(
        isinstance(optimizer, torch.optim.AdamW), f"{shown}'s optimizer", "torch.optim.AdamW", kind
    )
    for group in optimizer.param_groups:
        expect_close(f"{shown}: AdamW's learning rate", 2e-2, float(group["lr"]))
    losses = [printed(lines[0], "loss") for _, lines in sorted(step_lines(out).items())]
    losses = [loss for loss in losses if loss is not None]
    expect(len(losses) >= 20, f"{shown}'s printed losses", "one per step (20)", len(losses))
    expect(
        abs(losses[0] - math.log(VOCAB)) < 1,
        f"{shown}: the loss at step 0",
        "near ln(50257) = 10.82",
        f"{losses[0]:.4f}",
    )
    expect(
        losses[19] < 0.5,
        f"{shown}: the loss at step 19 on the one batch",
        "below 0.5",
        f"{losses[19]:.4f}",
    )

    tree.parse_args([], n_layer=12, n_head=12, n_embd=768)  # the 124M model
    for flag, default in (("-B", 4), ("-T", 32)):  # the narration's 128 tokens of the batch
        found = flag_default(tree, flag)
        expect(found == default, f"parse_args([])'s {flag}", default, found)
    expect_close(
        "parse_args([]).lr (AdamW's default learning rate)",
        3e-4,
        getattr(tree.parse_args([]), "lr", math.nan),
    )


@check(
    "loader",
    "train_gpt2.DataLoaderLite(path, B, T)",
    "DataLoaderLite.next_batch() -> (x, y)",
    "--data FILE",
)
def loader(tree):
    """`DataLoaderLite(path, B, T).next_batch()` returns (x, y): B rows of T consecutive tokens of
    the file, and the same tokens shifted by one, so each target is the token after its input. Batch
    after batch it reads every token once and in order, then starts over; the file is plain text.
    `--data FILE` trains on FILE, a fresh batch every step, and the run first prints FILE's number
    of tokens and of batches per epoch."""
    DataLoaderLite = tree.name("train_gpt2", "DataLoaderLite")
    GPT = tree.name("train_gpt2", "GPT")
    folder = tree.scratch() / "loader"
    folder.mkdir(exist_ok=True)
    # the last B*T tokens lack one target: no batch there
    path, tokens = loader_file(folder, "short.txt", 0)
    read_epoch(tree, DataLoaderLite, path, tokens, 2, 8)
    # the last batch's last target is the file's last token
    path, tokens = loader_file(folder, "exact.txt", 1)
    read_epoch(tree, DataLoaderLite, path, tokens, 2, 8)

    empty = folder / "run"  # no input.txt here: the run must read the file --data names
    empty.mkdir(exist_ok=True)
    argv = tree.quick(["--data", str(path), "-B", "2", "-T", "8", "--max-steps", "2"])
    shown = f"`{tree.command(argv, folder=empty)}`"
    with watch(GPT) as forwards:
        out = tree.main(argv, folder=empty, expected=f"it to train on {path.name}").stdout
    BT = 2 * 8
    trained = [forward.idx.reshape(-1).tolist() for forward in forwards if forward.grad]
    expect(len(trained) == 2, f"{shown}: forwards with gradients", "one per step (2)", len(trained))
    for step, found in enumerate(trained):
        start, at = BT * step, window(tokens, found)
        said = "other tokens" if at is None else f"tokens {at}..{at + BT - 1}"
        expected = f"{path.name}'s tokens {start}..{start + BT - 1} (a fresh batch every step)"
        expect(at == start, f"{shown}: step {step}'s inputs", expected, said)
    # an epoch is (N - 1) // (B*T) batches (each reads B*T + 1 tokens); on this file,
    # N % (B*T) == 1, also N // (B*T)
    counts = re.search(r"(\d[\d,]*)\s+tokens\b.*?(\d[\d,]*)\s+batches", out)
    found = tuple(int(number.replace(",", "")) for number in counts.groups()) if counts else None
    N = len(tokens)
    first = out.strip().splitlines()[0] if out.strip() else ""
    expect(
        found == (N, N // BT),
        f"{shown}'s line 'N tokens, M batches per epoch'",
        f"{N:,} tokens, {N // BT} batches",
        f"{found[0]:,} tokens, {found[1]} batches"
        if found
        else f"no such line (the output begins {first!r})",
    )


@check("tying", "train_gpt2.GPTConfig", "train_gpt2.GPT", "GPT.transformer.wte", "GPT.lm_head")
def tying(tree):
    """The token embedding `wte` and the output layer `lm_head` are one tensor, so the model has
    exactly vocab_size × n_embd fewer parameters than the untied GPT-2: one matrix both reads and
    writes tokens. The tensor kept is lm_head's, with nn.Linear's small initial weights, so a new
    model's loss is still near ln(50257); tied the other way round, it keeps nn.Embedding's N(0, 1)
    weights, and the first loss is several times higher."""
    import torch
    import torch.nn.functional as F

    model = tree.gpt()  # 2 layers, 32 channels, 64 positions, GPT-2's vocabulary
    wte, lm_head = model.transformer.wte.weight, model.lm_head.weight
    expect(
        wte is lm_head,
        "GPT.transformer.wte.weight and GPT.lm_head.weight",
        "the same tensor",
        "two tensors",
    )
    found = sum(p.numel() for p in model.parameters())
    expected = gpt2_parameters(TINY["n_layer"], TINY["n_embd"], VOCAB, block_size=64, tied=True)
    expect(
        found == expected, "parameters of a 2-layer, 32-channel GPT", f"{expected:,}", f"{found:,}"
    )
    idx = torch.randint(0, VOCAB, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        loss = F.cross_entropy(
            logits_of(model, idx).reshape(-1, VOCAB), idx.roll(-1, 1).reshape(-1)
        ).item()
    expect(
        abs(loss - math.log(VOCAB)) < 1,
        "a new tied model's loss "
        "(is the tensor kept lm_head's, nn.Linear's small init, or wte's N(0, 1)?)",
        f"near ln(50257) = {math.log(VOCAB):.2f}",
        f"{loss:.2f}",
    )


@check(
    "init",
    "train_gpt2.GPT(GPTConfig(...))",
    "GPT.transformer.h[i].attn.c_proj",
    "GPT.transformer.h[i].mlp.c_proj",
)
def init(tree):
    """A new `GPT` starts from GPT-2's initialisation: weights and embeddings drawn from a normal of
    std 0.02, except the two layers of each block that add into the residual stream (`attn.c_proj`,
    `mlp.c_proj`), scaled by 1/sqrt(2·n_layer); biases zero, LayerNorms at 1 and 0; so the loss at
    init is within 0.05 of ln(50257)."""
    import torch
    import torch.nn.functional as F

    n_layer = 3  # 1/sqrt(2·3) differs from 1/3, 1/sqrt(3) and 1/2: a wrong N shows
    model = tree.gpt(block_size=256, n_layer=n_layer, n_head=2, n_embd=64)
    residual = 0.02 / math.sqrt(2 * n_layer)

    def normal(name, tensor, std, said, also=None):
        values = tensor.detach().float()
        found, mean = values.std().item(), values.mean().item()
        ok = any(abs(found - s) <= 0.05 * s for s in (std, also) if s)
        expect(ok, f"{name}'s std", said, f"{found:.4g}")
        expect(abs(mean) <= 0.1 * found, f"{name}'s mean", "0", f"{mean:.3g}")

    for i, block in enumerate(model.transformer.h):
        where = f"transformer.h.{i}."
        normal(where + "attn.c_attn.weight", block.attn.c_attn.weight, 0.02, "0.02")
        normal(where + "mlp.c_fc.weight", block.mlp.c_fc.weight, 0.02, "0.02")
        said = f"{residual:.4g} (0.02/sqrt(2·n_layer), n_layer={n_layer}: a residual projection)"
        normal(where + "attn.c_proj.weight", block.attn.c_proj.weight, residual, said)
        normal(where + "mlp.c_proj.weight", block.mlp.c_proj.weight, residual, said)
    normal("transformer.wte.weight (lm_head's too)", model.lm_head.weight, 0.02, "0.02")
    normal(
        "transformer.wpe.weight",
        model.transformer.wpe.weight,
        0.02,
        "0.02 (or GPT-2's own 0.01)",
        also=0.01,
    )
    wte = model.transformer.wte.weight.detach().float()
    tails = (wte.abs() > 2 * wte.std()).float().mean().item()
    expect(
        0.035 < tails < 0.056,
        "transformer.wte.weight beyond 2 std",
        "4.6% (a normal distribution)",
        f"{tails:.1%}",
    )
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module.bias is not None:
            expect(not module.bias.detach().any(), f"{name}.bias", "zeros", "other values")
        if isinstance(module, torch.nn.LayerNorm):
            ones = torch.equal(module.weight.detach(), torch.ones_like(module.weight))
            zeros = module.bias is None or not module.bias.detach().any()
            expect(
                ones and zeros,
                f"{name} (a LayerNorm)",
                "weight 1 and bias 0 (PyTorch's own)",
                "other values",
            )

    idx = torch.randint(0, VOCAB, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        loss = F.cross_entropy(
            logits_of(model, idx).reshape(-1, VOCAB), idx.roll(-1, 1).reshape(-1)
        ).item()
    expect(
        abs(loss - math.log(VOCAB)) < 0.05,
        "the loss at init",
        "within 0.05 of ln(50257) = 10.8249",
        f"{loss:.4f}",
    )
