"""Checks for the data steps: token shards written by fineweb.py, the trainer reading them, the real
run's defaults, one-line errors for bad data, and the validation loss."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from .core import VOCAB, check, expect, expect_close, expect_settings, flags, unit, watch

EOT = 50256  # GPT-2's <|endoftext|>

# --------------------------------------------------------------------------------------------------
# helpers


def _documents() -> list[str]:
    """A small corpus of documents of different lengths, some with non-ASCII text, built
    without the network."""
    import random

    phrases = [
        "First Citizen: Before we proceed any further, hear me speak.",
        "The model reads tokens, not characters;",
        "a naïve café serves crème brûlée — “twice” a day.",
        "日本語のテキストも一つの文書です。",
        "Numbers like 3.14159 and 1,000,000 split into pieces.",
        "   indented lines\n\tand tabs\n",
        "emoji 🙂 take several bytes",
        "End.",
    ]
    rng = random.Random(22)
    return [" ".join(rng.choice(phrases) for _ in range(rng.randint(1, 12))) for _ in range(24)]


def _save_shards(folder: Path, shards: dict[str, object]) -> Path:
    """np.save each array as folder/name; returns the folder."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    for name, tokens in shards.items():
        np.save(folder / name, tokens)
    return folder


def _first_difference(expected, found) -> str:
    """Where two token sequences first differ, as 'at token i: expected ..., found ...' with
    a little context."""
    n = min(len(expected), len(found))
    i = next((k for k in range(n) if int(expected[k]) != int(found[k])), n)
    if i == n:
        return f"{len(expected)} tokens vs {len(found)} (equal up to the shorter)"
    show = slice(max(0, i - 2), i + 3)
    return (
        f"at token {i}: expected ...{[int(t) for t in expected[show]]}..., "
        f"found ...{[int(t) for t in found[show]]}..."
    )


def _one_line(what: str, done, names: str | None, status: int | None = 1) -> None:
    """A user's mistake (a finished run): exit status `status` (any non-zero when None), no
    traceback, and stderr's last line naming `names`; with status 1, stderr is that one line."""
    code, err = done.returncode, done.stderr
    lines = err.strip().splitlines()
    tail = lines[-1] if lines else "nothing"
    expect(
        "Traceback" not in err,
        what,
        "one line on stderr, no traceback",
        f"a traceback ending {tail!r}",
    )
    if status is None:
        expect(code != 0, f"{what}: exit status", "non-zero", code)
    else:
        expect(code == status, f"{what}: exit status", status, f"{code} (stderr: {tail!r})")
        expect(
            len(lines) == 1,
            f"{what}: stderr",
            "one line",
            f"{len(lines)} lines: {' / '.join(lines)[:300]!r}",
        )
    if names is not None:
        expect(names in tail, f"{what}: the error", f"a line naming {names!r}", repr(tail))


def _evaluations(calls):
    """The runs of consecutive forwards in eval mode (the evaluations between training steps)."""
    runs, current = [], []
    for call in calls:
        if call.training:  # a training step
            if current:
                runs.append(current)
            current = []
        else:
            current.append(call)
    return runs + ([current] if current else [])


# --------------------------------------------------------------------------------------------------
# fineweb.py


@check("fineweb", "python fineweb.py --files A.txt B.txt ... --out DIR --shard-size N")
def fineweb(tree):
    """fineweb.py turns documents into shards of uint16 tokens: exactly GPT-2's tokens of each
    document in order, each preceded by <|endoftext|> (50256), cut into shards of exactly
    --shard-size tokens (the last one shorter); the first shard is the validation shard, the rest
    are training shards."""
    import numpy as np
    import tiktoken

    expect(
        (tree.path / "fineweb.py").is_file(), "fineweb.py", "the file", f"none in {tree.path.name}/"
    )
    documents = _documents()
    folder = tree.scratch() / "fineweb-docs"
    folder.mkdir(exist_ok=True)
    files = []
    for i, text in enumerate(documents):
        path = folder / f"doc{i:02d}.txt"
        path.write_text(text, encoding="utf-8")
        files.append(str(path))
    out, shard_size = tree.scratch() / "fineweb-shards", 300  # 2,200 tokens: 7 shards and 100 more
    command = ["fineweb.py", "--files", *files, "--out", str(out), "--shard-size", str(shard_size)]
    shown = f"`{shlex.join(['python', *command])}`"
    tree.run(*command, shown=shown, env={"HF_DATASETS_CACHE": str(tree.scratch() / "hf-datasets")})

    enc = tiktoken.get_encoding("gpt2")
    stream = []
    for text in documents:
        stream += [EOT, *enc.encode_ordinary(text)]
    val = sorted(out.glob("*_val_*.npy"))
    train = sorted(out.glob("*_train_*.npy"))
    expect(
        len(val) == 1, f"{shown}: validation shards (*_val_*.npy)", "1 (the first shard)", len(val)
    )
    n_shards = -(-len(stream) // shard_size)
    expect(
        len(train) == n_shards - 1,
        f"{shown}: training shards (*_train_*.npy) for {len(stream):,} tokens",
        n_shards - 1,
        len(train),
    )
    shards = []
    for path in val + train:
        tokens = np.load(path)
        expect(
            tokens.dtype == np.uint16 and tokens.ndim == 1,
            f"{path.name}'s array",
            "1-D uint16 tokens",
            f"{tokens.dtype} of shape {tokens.shape}",
        )
        shards.append(tokens)
    for i, (path, tokens) in enumerate(zip(val + train, shards)):
        last_one = i == len(shards) - 1
        wanted = len(stream) - shard_size * (len(shards) - 1) if last_one else shard_size
        expect(
            len(tokens) == wanted,
            f"{path.name}'s length (--shard-size {shard_size})",
            wanted,
            len(tokens),
        )
    found = np.concatenate(shards)
    ok = len(found) == len(stream) and bool((found == np.array(stream, dtype=np.uint16)).all())
    expect(
        ok,
        "the shards' tokens, validation shard first",
        "<|endoftext|> then GPT-2's tokens of each document, in order",
        _first_difference(stream, found),
    )


# --------------------------------------------------------------------------------------------------
# reading shards


@check(
    "shards",
    "train_gpt2.load_split(data, split)",
    "train_gpt2.DataLoaderLite(shards, B, T, rank, world_size)",
    "DataLoaderLite.next_batch",
    "python train_gpt2.py --data FOLDER",
)
def shards(tree):
    """load_split reads a split's shard files, in order, as memory maps of uint16 (or a text file's
    tokens, the last 10% for validation), and DataLoaderLite reads the shards as one stream: a batch
    runs on from one shard into the next and, after the last, into the first again, so no token is
    skipped; each rank takes its own slice. A run with --data FOLDER trains on the folder's train
    shards, from their start, and never on its validation shard."""
    import numpy as np
    import tiktoken
    import torch

    load_split = tree.name("train_gpt2", "load_split")
    DataLoaderLite = tree.name("train_gpt2", "DataLoaderLite")
    lengths = [37, 50, 23]
    stream = np.arange(1000, 1000 + sum(lengths), dtype=np.uint16)
    cuts = np.cumsum(lengths)[:-1]
    val = np.arange(5000, 5040, dtype=np.uint16)
    names = {"edufineweb_val_000000.npy": val}
    names.update(
        {f"edufineweb_train_{i + 1:06d}.npy": part for i, part in enumerate(np.split(stream, cuts))}
    )
    folder = _save_shards(tree.scratch() / "shards", names)
    (folder / "notes.txt").write_text("not a shard\n")

    for split, expected in (("train", np.split(stream, cuts)), ("val", [val])):
        found = load_split(str(folder), split)
        what = f"load_split(folder, {split!r})"
        expect(len(found) == len(expected), f"{what}: shards", len(expected), len(found))
        for i, (want, got) in enumerate(zip(expected, found)):
            expect(
                isinstance(got, np.memmap) and got.dtype == np.uint16,
                f"{what}[{i}]",
                "a memory map of uint16 (np.load(..., mmap_mode='r'))",
                f"{type(got).__name__} of {getattr(got, 'dtype', '?')}",
            )
            ok = len(got) == len(want) and bool((np.asarray(got) == want).all())
            expect(
                ok,
                f"{what}[{i}]'s tokens, shards in file order",
                "the file's tokens",
                _first_difference(want, got),
            )

    text = (
        "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n"
        * 6
    )
    text_file = tree.scratch() / "small.txt"
    text_file.write_text(text, encoding="utf-8")
    tokens = tiktoken.get_encoding("gpt2").encode_ordinary(text)
    train_part = np.concatenate(load_split(str(text_file), "train"))
    val_part = np.concatenate(load_split(str(text_file), "val"))
    expect(
        abs(len(train_part) - 0.9 * len(tokens)) <= 1,
        f"load_split(text file of {len(tokens)} tokens, 'train')",
        f"the first 90% ({int(0.9 * len(tokens))} tokens)",
        f"{len(train_part)} tokens",
    )
    both = np.concatenate([train_part, val_part])
    expect(
        len(both) == len(tokens) and bool((both == np.array(tokens)).all()),
        "load_split(text file, 'train') then load_split(text file, 'val')",
        "the file's GPT-2 tokens, split in two",
        _first_difference(tokens, both),
    )

    B, T = 2, 8
    shards_ = load_split(str(folder), "train")
    for rank, world_size, batches in ((0, 1, 10), (1, 2, 5)):
        loader = DataLoaderLite(shards_, B, T, rank, world_size)
        for k in range(batches):
            x, y = loader.next_batch()
            start = B * T * (world_size * k + rank)
            buf = torch.from_numpy(
                np.take(stream, range(start, start + B * T + 1), mode="wrap").astype(np.int64)
            )
            where = f"DataLoaderLite(rank {rank} of {world_size}, B={B}, T={T}) batch {k}"
            expect(x.dtype == torch.int64, f"{where}: inputs' dtype", "torch.int64", x.dtype)
            expect(tuple(x.shape) == (B, T), f"{where}: inputs' shape", (B, T), tuple(x.shape))
            span = f"stream tokens {start}..{start + B * T} of {len(stream)}, shards of {lengths}"
            expect(
                bool((x == buf[:-1].view(B, T)).all()),
                f"{where}: inputs",
                span,
                x.flatten().tolist(),
            )
            expect(
                bool((y == buf[1:].view(B, T)).all()),
                f"{where}: targets",
                f"{span}, one on",
                y.flatten().tolist(),
            )

    # the run: its training inputs are the train shards' stream from its start (tokens 1000.., the
    # validation shard's are 5000..)
    GPT = tree.name("train_gpt2", "GPT")
    argv = tree.quick(["--data", str(folder), *flags(batch_size=B, seq_len=T, max_steps=2)])
    shown = f"`{tree.command(argv)}`"
    with watch(GPT) as calls:
        tree.main(argv)
    inputs = [call.idx for call in calls if call.training and call.grad]
    expect(len(inputs) == 2, f"{shown}: training forwards", "2 (one batch a step)", len(inputs))
    for k, x in enumerate(inputs):
        start = B * T * k
        wanted = torch.from_numpy(
            np.take(stream, range(start, start + B * T), mode="wrap").astype(np.int64)
        )
        ok = tuple(x.shape) == (B, T) and bool((x.flatten() == wanted).all())
        tokens = x.flatten().tolist()
        found = (
            "the validation shard's tokens" if any(t >= 5000 for t in tokens) else "other tokens"
        )
        expect(
            ok,
            f"{shown}: step {k}'s inputs",
            f"the train shards' tokens {start}..{start + B * T}",
            f"{found}: {tokens}",
        )


# --------------------------------------------------------------------------------------------------
# the real run's defaults


# What the step's Try-it shows parse_args holding, for the real run and for the CPU preset (the
# choices left to the device, --compile, --dtype and --device, are left out: None and "auto" are two
# spellings of them).
REAL_RUN = dict(
    data="edu_fineweb10B",
    n_layer=12,
    n_head=12,
    n_embd=768,
    vocab_size=50304,
    batch_size=64,
    seq_len=1024,
    total_batch=524288,
    max_lr=6e-4,
    min_lr_ratio=0.1,
    warmup_steps=715,
    max_steps=19073,
    weight_decay=0.1,
    seed=1337,
)
CPU_PRESET = dict(
    REAL_RUN,
    data="input.txt",
    n_layer=4,
    n_head=4,
    n_embd=128,
    batch_size=8,
    seq_len=64,
    total_batch=512,
    max_lr=3e-3,
    warmup_steps=5,
    max_steps=20,
)


@check("real-run", "train_gpt2.parse_args(argv)", "--preset cpu", "--data")
def real_run(tree):
    """With no flags the trainer is the real run: FineWeb-Edu's shard folder edu_fineweb10B, 19,073
    steps (10B tokens at 2^19 a step) after 715 warmup steps, GPT-2 small's model and GPT-3 small's
    batch and learning rate; `--preset cpu` still trains on input.txt (a 4-layer model, 512 tokens a
    step, 20 steps), and flags override it."""
    expect_settings(tree, [], **REAL_RUN)
    expect_settings(tree, ["--preset", "cpu"], **CPU_PRESET)
    tree.parse_args(["--preset", "cpu", "--data", "shards"], data="shards")


# --------------------------------------------------------------------------------------------------
# one-line errors


@check(
    "data-errors",
    "python train_gpt2.py --data MISSING",
    "train_gpt2.main(argv)",
    "--data",
    "--total-batch",
    "--seq-len",
)
def data_errors(tree):
    """A mistake the user can fix ends the run with one line on stderr that names what is wrong, and
    exit status 1, never a traceback: --data that does not exist, a folder without training shards,
    a shard that is not readable, not 1-D uint16 or empty, a --total-batch that B*T does not divide;
    a --seq-len over 1024 is refused too."""
    import numpy as np

    scratch = tree.scratch()
    tiny = flags(n_layer=1, n_head=1, n_embd=8, batch_size=1, seq_len=8, max_steps=1)

    argv = tree.quick(["--data", str(scratch / "no_such_folder"), *tiny])
    _one_line(
        f"`{tree.command(argv)}`", tree.run("train_gpt2.py", *argv, check=False), "no_such_folder"
    )

    rng = np.random.default_rng(25)
    good = rng.integers(0, VOCAB, 400).astype(np.uint16)
    val = {"edufineweb_val_000000.npy": good[:200]}
    folders = {
        "only_val": val,
        "not_npy": {**val, "edufineweb_train_000001.npy": None},
        "int32": {**val, "edufineweb_train_000001.npy": good.astype(np.int32)},
        "two_d": {**val, "edufineweb_train_000001.npy": good.reshape(20, 20)},
        "empty": {
            **val,
            "edufineweb_train_000001.npy": good[:0],
            "edufineweb_train_000002.npy": good,
        },
        "good": {**val, "edufineweb_train_000001.npy": good},
    }
    for name, files in folders.items():
        folder = scratch / f"data-{name}"
        _save_shards(folder, {k: v for k, v in files.items() if v is not None})
        for k, v in files.items():
            if v is None:
                (folder / k).write_bytes(b"these bytes are not a .npy file\n")
    cases = [
        ("only_val", [], "data-only_val", "a folder without training shards"),
        ("not_npy", [], "edufineweb_train_000001.npy", "a file that is not .npy"),
        ("int32", [], "edufineweb_train_000001.npy", "a shard of int32"),
        ("two_d", [], "edufineweb_train_000001.npy", "a 2-D shard"),
        ("empty", [], "edufineweb_train_000001.npy", "an empty shard"),
        ("good", ["--total-batch", "12"], None, "--total-batch 12 with B*T = 8"),
    ]
    for name, extra, names, what in cases:
        argv = tree.quick(["--data", str(scratch / f"data-{name}"), *tiny, *extra])
        shown = f"`{tree.command(argv)}` ({what})"
        _one_line(shown, tree.main(argv, shown, expected="one line on stderr", check=False), names)

    argv = tree.quick(
        ["--data", str(scratch / "data-good"), *tiny, "-T", "2048", "--total-batch", "2048"]
    )
    shown = f"`{tree.command(argv)}` (over the block size, 1024)"
    _one_line(
        shown,
        tree.main(argv, shown, expected="one line on stderr", check=False),
        "2048",
        status=None,
    )


# --------------------------------------------------------------------------------------------------
# the validation loss


@check("validation", "train_gpt2.main(argv)", "GPT.forward", "--val-every", "--val-steps")
def validation(tree):
    """The run measures a validation loss at step 0, every --val-every steps and after the last step
    (none with --val-every 0): the mean loss of the first --val-steps batches of the validation
    split, the same batches every time, in eval mode without autograd, printed as
    `validation loss: X`."""
    import numpy as np
    import torch

    GPT = tree.name("train_gpt2", "GPT")
    DataLoaderLite = tree.name("train_gpt2", "DataLoaderLite")
    rng = np.random.default_rng(26)
    val_tokens, train_tokens = (rng.integers(0, VOCAB, 300).astype(np.uint16) for _ in range(2))
    names = {"edufineweb_val_000000.npy": val_tokens, "edufineweb_train_000001.npy": train_tokens}
    folder = _save_shards(tree.scratch() / "validation-data", names)
    B, T, val_steps = 2, 16, 2
    base = [
        "--data",
        str(folder),
        *flags(batch_size=B, seq_len=T, warmup_steps=1, val_steps=val_steps),
    ]

    argv = tree.quick([*base, "--max-steps", "3", "--val-every", "2"])
    shown = f"`{tree.command(argv)}`"
    with watch(GPT) as calls:
        out = tree.main(argv).stdout
    events, printed = [], []
    for line in out.splitlines():
        if m := re.match(
            r"\s*val(?:idation)?[ _]loss\W*?(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", line, re.IGNORECASE
        ):
            events.append("val")
            printed.append(m.group(1))
        elif m := re.match(r"\s*step\s+(\d+)", line):
            events.append(f"step {int(m.group(1))}")
    wanted = ["val", "step 0", "step 1", "val", "step 2", "val"]
    expect(
        events == wanted, f"{shown}: printed lines", ", ".join(wanted), ", ".join(events) or "none"
    )

    reference = DataLoaderLite([val_tokens], B, T)
    batches = [reference.next_batch()[0] for _ in range(val_steps)]
    evaluations = _evaluations(calls)
    expect(
        bool(evaluations),
        f"{shown}: the model's mode while validating",
        "eval",
        "train (no forward in eval mode)",
    )
    expect(
        len(evaluations) == 3,
        f"{shown}: evaluations (model calls in eval mode between training steps)",
        "3: before steps 0 and 2, and after step 2 (the last)",
        len(evaluations),
    )
    for k, (evaluation, value) in enumerate(zip(evaluations, printed)):
        what = f"{shown}: evaluation {k + 1}"
        expect(len(evaluation) == val_steps, f"{what}: model calls", val_steps, len(evaluation))
        for i, call in enumerate(evaluation):
            x = call.idx
            expect(
                not call.grad, f"{what}, batch {i}: autograd", "off (torch.no_grad)", "recording"
            )
            expect(
                torch.equal(x, batches[i]),
                f"{what}, batch {i}",
                f"the validation split's batch {i} (from its start, every time)",
                "another batch"
                if x.shape == batches[i].shape
                else f"inputs of shape {tuple(x.shape)}",
            )
        losses = [call.loss for call in evaluation if call.loss is not None]
        expect(len(losses) == val_steps, f"{what}: losses computed", val_steps, len(losses))
        mean = sum(losses) / len(losses)
        what = f"{what}: the printed validation loss (the mean of its {val_steps} batches' losses)"
        # equal to the printed precision
        expect_close(what, mean, float(value), rel=0, abs_=0.5 * unit(value) + 1e-5)

    argv = tree.quick([*base, "--max-steps", "1", "--val-every", "0"])
    shown = f"`{tree.command(argv)}`"
    out = tree.main(argv).stdout
    lines = [
        line
        for line in out.splitlines()
        if re.match(r"\s*val(idation)?[ _]loss", line, re.IGNORECASE)
    ]
    expect(not lines, f"{shown}: validation lines", "none", repr(lines[0]) if lines else "")

    tree.parse_args([], val_every=250, val_steps=20)
