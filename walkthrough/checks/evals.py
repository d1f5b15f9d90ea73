"""Checks for the evals steps: samples during training, HellaSwag scoring (one example, then in
batches, then inside training), checkpoints, and the plotted results.

The runs are tiny (2 layers, 32 channels, 16-token sequences, a few steps on a small text of common
words) and go through the step's own `main(argv)` in this process, as `python train_gpt2.py ...`
would run them; the HellaSwag checks score a handful of worked examples written here, against losses
computed by hand with torch's cross_entropy.
"""

from __future__ import annotations

import ast
import contextlib
import json
import math
import re

from .core import (
    PROMPT,
    CheckFailed,
    check,
    expect,
    expect_close,
    expect_settings,
    expect_tensors_close,
    flags,
    last_line,
    unit,
)

# --------------------------------------------------------------------------------------------------
# ---- tiny runs of the step's own scripts

# the tiny model on one micro-batch of 2 × 16 a step
RUN = flags(batch_size=2, seq_len=16, max_steps=4, warmup_steps=2)


def tiny_argv(tree, log_dir=None, **own: object) -> list[str]:
    """train_gpt2.py's arguments for a tiny run (RUN on the word corpus, Tree.quick) into `log_dir`
    if given, then the check's `own` flags as keyword arguments (max_steps=4 is --max-steps 4),
    passed whether the step knows them or not: that is the check."""
    log = ["--log-dir", str(log_dir)] if log_dir else []
    return tree.quick([*RUN, "--data", str(tree.corpus()), *log, *flags(**own)])


def train(tree, log_dir=None, **own: object):
    """A tiny run of `python train_gpt2.py` (tiny_argv) that must end with exit status 0: its
    arguments (.args) and what it printed (.stdout)."""
    return tree.main(tiny_argv(tree, log_dir, **own))


def unquoted(text: str) -> str:
    """A printed sample's text, with repr()'s quotes and escapes undone where it was printed that
    way (the prompt's "I'm" comes out as 'I\\'m' in a sample that holds a double quote)."""
    with contextlib.suppress(ValueError, SyntaxError, MemoryError, RecursionError):
        value = ast.literal_eval(text)
        if isinstance(value, str):
            return value
    return text


def unloadable(error: Exception) -> str:
    """Why torch.load(weights_only=True) refused a file, in a few words."""
    text = str(error)
    if match := re.search(r"Unsupported global: GLOBAL ([\w.]+)", text):
        return f"it holds a {match[1]}, which is neither a tensor nor plain data"
    return f"{type(error).__name__}: {(text.splitlines() or [''])[0][:160]}"


def log_lines(path) -> list[tuple[int, str, float]]:
    """(step, kind, value) of each `step kind value` line of a log.txt (other lines, such as
    a header, skipped)."""
    expect(path.is_file(), f"{path.parent.name}/log.txt", "the run's log", "no such file")
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0].isdigit():
            try:
                found.append((int(fields[0]), fields[1], float(fields[2])))
            except ValueError:
                pass
    return found


# --------------------------------------------------------------------------------------------------
# ---- HellaSwag: worked examples, and their scores by hand

# Our own examples in HellaSwag's format: endings of very different lengths, so that the lowest
# summed loss (acc) and the lowest mean loss (acc_norm) often pick different endings. Labels are set
# by each check.
EXAMPLES = [
    (
        "A man carries a ladder across the yard and leans it against the house. He",
        [
            "climbs up.",
            "climbs to the gutter and starts pulling out handfuls of wet leaves.",
            "sets down a bucket of paint next to the ladder and opens it.",
            "sits.",
        ],
    ),
    (
        "The cook cracks three eggs into a bowl. She",
        [
            "whisks them with a fork until the yolks and whites are mixed.",
            "adds salt.",
            "pours the eggs into a hot pan and stirs them slowly with a wooden spoon.",
            "smiles at the camera.",
        ],
    ),
    (
        "A girl in a red helmet rides her bike down a steep hill. She",
        [
            "brakes hard at the bottom.",
            "falls.",
            "waves at her father, who is filming her from the side of the road.",
            "turns onto a dirt path and disappears between the trees.",
        ],
    ),
    (
        "Two dogs chase a ball on the beach. The smaller dog",
        [
            "reaches it first and runs back to its owner with the ball in its mouth.",
            "barks.",
            "stops to sniff a pile of seaweed.",
            "jumps into the waves.",
        ],
    ),
    (
        "A man in a suit stands at a podium and taps the microphone. He",
        [
            "clears his throat and begins to read from a stack of papers.",
            "leaves.",
            "thanks everyone for coming.",
            "adjusts his tie, looks up at the crowd, and tells a joke about the weather.",
        ],
    ),
    (
        "A woman kneels in her garden with a trowel. She",
        [
            "digs a small hole and drops a bulb into it.",
            "stands up.",
            "pulls weeds from between the rows of carrots and tosses them into a bucket.",
            "wipes her forehead.",
        ],
    ),
]


def examples() -> list[dict]:
    """EXAMPLES as HellaSwag dicts ("ctx", 4 "endings", "label"), labelled 0 until a
    check says otherwise."""
    return [
        {"ind": i, "ctx": ctx, "endings": list(endings), "label": 0}
        for i, (ctx, endings) in enumerate(EXAMPLES)
    ]


def write_jsonl(tree, name: str, rows: list[dict]) -> str:
    path = tree.scratch() / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def tokens(example) -> list[tuple[list[int], list[int]]]:
    """The 4 (context, ending) token lists: the ending after a space, as GPT-2 would read it
    following the context."""
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    return [
        (enc.encode_ordinary(example["ctx"]), enc.encode_ordinary(" " + e))
        for e in example["endings"]
    ]


def scoring_model(tree):
    """The step's own GPT, 2 layers and 32 channels, seeded; its output layer scaled up so that
    tokens' losses differ by whole nats (a fresh model's are all ~ln 50257), which makes a loss read
    at the wrong position show."""
    import torch

    model = tree.gpt()
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    return model.eval()


def by_hand(model, pairs) -> list[float]:
    """Each ending's summed loss, one unpadded row at a time: the logits at the positions that
    predict the ending's tokens (position i predicts token i + 1) against those tokens, by
    torch's cross_entropy."""
    import torch
    from torch.nn import functional as F

    sums = []
    with torch.no_grad():
        for ctx, ending in pairs:
            row = ctx + ending
            logits, _ = model(torch.tensor([row[:-1]]))
            predicting = logits[0, len(ctx) - 1 :].float()  # (len(ending), vocab)
            sums.append(F.cross_entropy(predicting, torch.tensor(ending), reduction="sum").item())
    return sums


def lowest(values, tolerance=1e-4) -> set[int]:
    """The indices of the smallest value (more than one where values tie within tolerance)."""
    best = min(values)
    return {i for i, v in enumerate(values) if v <= best + tolerance}


def hand_answers(model, examples_) -> list[tuple[set[int], set[int]]]:
    """(acc's pick, acc_norm's pick) per example, as sets (ties): the lowest summed loss, the
    lowest mean loss."""
    answers = []
    for example in examples_:
        pairs = tokens(example)
        sums = by_hand(model, pairs)
        means = [s / len(ending) for s, (_, ending) in zip(sums, pairs)]
        answers.append((lowest(sums), lowest(means)))
    return answers


def as_list(values) -> list[float]:
    return [float(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]


def scored(continuation_losses, model, pairs) -> tuple[list[float], list[float]]:
    """continuation_losses(model, pairs, device="cpu") as two lists: each pair's summed loss and
    its token count."""
    found = continuation_losses(model, pairs, device="cpu")
    shape = (
        [len(part) if hasattr(part, "__len__") else "?" for part in found]
        if isinstance(found, tuple)
        else None
    )
    expect(
        shape == [len(pairs), len(pairs)],
        f"continuation_losses(model, {len(pairs)} pairs, device='cpu')",
        f"(summed losses, token counts), {len(pairs)} of each",
        shape or type(found).__name__,
    )
    return as_list(found[0]), as_list(found[1])


def expect_answers(what: str, found, answers) -> None:
    found = list(found)
    expect(
        len(found) == len(answers),
        f"{what}'s answers",
        f"{len(answers)} (one per example)",
        len(found),
    )
    for i, (pick, (acc, acc_norm)) in enumerate(zip(found, answers)):
        pick = tuple(int(p) for p in pick)
        expect(
            len(pick) == 2 and pick[0] in acc and pick[1] in acc_norm,
            f"{what}, example {i} (pred, pred_norm)",
            f"({'/'.join(map(str, sorted(acc)))}, {'/'.join(map(str, sorted(acc_norm)))}): "
            "the lowest summed loss and the lowest mean loss per token",
            pick,
        )


def one_answer(answers) -> list[tuple[int, int]]:
    """The hand answers as (pred, pred_norm), where neither ties (a tie's examples are left out)."""
    return [(min(a), min(n)) if len(a) == 1 and len(n) == 1 else None for a, n in answers]


def expect_samples_at_the_end(tree) -> None:
    """The CPU preset samples once, after its last step: its --sample-every is on (not 0), and no
    multiple of it comes before its last step."""
    args = tree.parse_args(["--preset", "cpu"])
    every, steps = getattr(args, "sample_every", None), getattr(args, "max_steps", None)
    what = (
        "parse_args(['--preset', 'cpu']).sample_every "
        f"(samples once, after the last of its {steps} steps)"
    )
    expect(
        isinstance(every, int) and steps and every >= steps, what, f"at least {steps}", repr(every)
    )


def shows(number: str, value: float) -> bool:
    """Whether a printed number is `value` to its own precision (within half a unit of its last
    digit, or 1e-3 of the value): '10.819' or '10.8190' for 10.819; a whole number only for itself,
    so that a step stands for no loss."""
    if not re.search(r"[.eE]", number):
        return float(number) == value
    return abs(float(number) - value) <= max(0.5 * unit(number), 1e-3 * abs(value)) + 1e-12


# --------------------------------------------------------------------------------------------------
# ---- the checks


@check("samples", "train_gpt2.main", "--sample-every", "GPT.generate")
def samples(tree):
    """Every --sample-every steps (250 by default; the CPU preset: once, after its 20th and last
    step) the run prints 4 samples that start with "Hello, I'm a language model,". They come from a
    generator of their own, seeded the same each time: a model that has not changed samples the same
    text, and sampling leaves torch's random state exactly as training left it."""
    import torch

    expect_settings(tree, [], sample_every=250)
    expect_samples_at_the_end(tree)

    # --max-lr 1e-30: the weights do not move (every update is far below float32's resolution), so
    # the samples after step 1 and after step 2 come from the same model
    own = dict(max_steps=2, max_lr="1e-30", sample_every=1)
    done = train(tree, **own)
    with_samples = torch.get_rng_state()
    lines = [
        (n, unquoted(text)) for n, text in re.findall(r"^sample (\d+): (.*)$", done.stdout, re.M)
    ]
    expect(
        len(lines) == 8,
        f"lines 'sample N: ...' printed by `{tree.command(done.args)}`",
        "8 (4 samples after step 1, 4 after step 2)",
        len(lines),
    )
    expect(
        [int(n) for n, _ in lines] == [0, 1, 2, 3] * 2,
        "the samples' numbers",
        "0 1 2 3, twice",
        " ".join(n for n, _ in lines),
    )
    for n, text in lines:
        expect(
            PROMPT in text, f"sample {n}", f"the prompt {PROMPT!r} then its continuation", text[:60]
        )
    first, second = [text for _, text in lines[:4]], [text for _, text in lines[4:]]
    expect(
        first == second,
        "the samples after step 1 and after step 2 of a run whose weights do not move",
        "the same 4 texts (a generator of their own, seeded the same each time)",
        f"{first[0][:40]}... then {second[0][:40]}...",
    )
    expect(
        len(set(first)) > 1,
        "the 4 samples",
        "different continuations of one prompt",
        "4 identical texts",
    )

    own["sample_every"] = 0
    done = train(tree, **own)
    expect(
        "sample 0:" not in done.stdout,
        f"`{tree.command(done.args)}`",
        "no samples",
        "samples printed",
    )
    expect(
        torch.equal(with_samples, torch.get_rng_state()),
        "torch's random state after a run that samples",
        "the same as after the same run with --sample-every 0 "
        "(sampling draws from its own generator)",
        "a different state: sampling drew from torch's global generator",
    )


@check(
    "hellaswag",
    "hellaswag_scoring.render",
    "hellaswag_scoring.continuation_losses",
    "hellaswag_scoring.predict",
    "train_gpt2.GPT",
)
def hellaswag(tree):
    """An example is scored completion style: render() gives its 4 (context, " " + ending) token
    pairs, continuation_losses() sums the loss over each ending's own tokens only (exactly what
    cross_entropy gives by hand at the positions that predict them), and the answer is the ending
    with the lowest sum (acc) or mean (acc_norm)."""
    render = tree.name("longrun.hellaswag_scoring", "render")
    continuation_losses = tree.name("longrun.hellaswag_scoring", "continuation_losses")
    predict = tree.name("longrun.hellaswag_scoring", "predict")
    model = scoring_model(tree)
    worked = examples()

    for i, example in enumerate(worked):
        expected, found = (
            tokens(example),
            [(list(map(int, c)), list(map(int, e))) for c, e in render(example)],
        )
        expect(
            len(found) == 4,
            f"render(example {i})",
            "4 (context, ending) pairs",
            f"{len(found)} items",
        )
        for j, ((ctx, ending), (found_ctx, found_ending)) in enumerate(zip(expected, found)):
            expect(
                found_ctx == ctx, f"render(example {i}), pair {j}'s context tokens", ctx, found_ctx
            )
            expect(
                found_ending == ending,
                f"render(example {i}), ending {j}'s tokens (after a space)",
                ending,
                found_ending,
            )

    for i, example in enumerate(worked):
        pairs = tokens(example)
        sums, counts = scored(continuation_losses, model, pairs)
        for j, (hand, (_, ending)) in enumerate(zip(by_hand(model, pairs), pairs)):
            expect_close(
                f"continuation_losses(), example {i}, "
                f"ending {j}'s summed loss over its {len(ending)} tokens",
                hand,
                sums[j],
                rel=1e-4,
                abs_=1e-3,
            )
            expect(
                counts[j] == len(ending),
                f"continuation_losses(), example {i}, ending {j}'s token count",
                len(ending),
                counts[j],
            )

    expect_answers(
        "predict(model, examples, device='cpu')",
        predict(model, worked, device="cpu"),
        hand_answers(model, worked),
    )


@check(
    "hellaswag-batch",
    "hellaswag_scoring.predict",
    "hellaswag_scoring.continuation_losses",
    "train_gpt2.GPT",
)
def hellaswag_batch(tree):
    """Scoring many examples in one forward pass gives each one exactly the answers it gets alone:
    rows padded to the longest never change a real token's loss, `predict(..., batch_size=b)`
    makes ceil(n / b) forward passes of at most 4b rows, and the answers come back in the
    examples' own order."""
    continuation_losses = tree.name("longrun.hellaswag_scoring", "continuation_losses")
    predict = tree.name("longrun.hellaswag_scoring", "predict")
    model = scoring_model(tree)
    worked = examples()

    # 24 rows of 6 examples, of many lengths
    rows = [pair for example in worked for pair in tokens(example)]
    sums, _ = scored(continuation_losses, model, rows)
    for r, hand in enumerate(by_hand(model, rows)):
        expect_close(
            "continuation_losses() of all 24 rows of 6 examples in one pass, "
            f"row {r}'s summed loss",
            hand,
            sums[r],
            rel=1e-4,
            abs_=1e-3,
        )

    answers = hand_answers(model, worked)
    passes = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: passes.append(len(args[0] if args else kwargs["idx"])),
        with_kwargs=True,
    )
    try:
        for batch_size in (1, 4, 6):
            passes.clear()
            what = f"predict(model, 6 examples, device='cpu', batch_size={batch_size})"
            with tree.expecting(what, "it to take batch_size"):
                found = predict(model, worked, device="cpu", batch_size=batch_size)
            expect_answers(what, found, answers)
            expected = math.ceil(len(worked) / batch_size)
            expect(
                len(passes) == expected and max(passes) <= 4 * batch_size,
                f"{what}'s forward passes",
                f"{expected} of at most {4 * batch_size} rows",
                f"{len(passes)} of {', '.join(map(str, passes))} rows",
            )
    finally:
        hook.remove()


@check(
    "hellaswag-train",
    "hellaswag_scoring.evaluate",
    "train_gpt2.hellaswag_accuracy",
    "train_gpt2.main",
    "--hellaswag-every",
    "--hellaswag-data",
    "--log-dir",
)
def hellaswag_train(tree):
    """HellaSwag during training: evaluate(..., rank=, world_size=) gives each rank its share of the
    examples, and the shares' counts add up to one process's; hellaswag_accuracy() counts acc_norm's
    right answers; the run scores at step 0, every --hellaswag-every steps (250 by default, never in
    the CPU preset) and at the end, and --log-dir's log.txt (log/, the CPU preset's log/cpu/) gets
    `step train|val|hella value` lines (a second run into the same --log-dir is refused)."""
    expect_settings(tree, [], hellaswag_every=250, log_dir="log")
    expect_settings(tree, ["--preset", "cpu"], hellaswag_every=0, log_dir="log/cpu")
    evaluate = tree.name("longrun.hellaswag_scoring", "evaluate")
    model = scoring_model(tree)
    # the examples with a single answer by hand (ties left out)
    kept = [(e, a) for e, a in zip(examples(), one_answer(hand_answers(model, examples()))) if a]
    # each answer a (pred, pred_norm) pair, by hand
    worked, answers = [e for e, _ in kept], [a for _, a in kept]
    # the even examples labelled with acc_norm's answer, the odd ones with an ending that neither
    # acc nor acc_norm picks
    for i, (example, (pred, pred_norm)) in enumerate(zip(worked, answers)):
        example["label"] = pred_norm if i % 2 == 0 else min({0, 1, 2, 3} - {pred, pred_norm})
    right = sum(e["label"] == pred for e, (pred, _) in zip(worked, answers))
    right_norm = sum(e["label"] == pred_norm for e, (_, pred_norm) in zip(worked, answers))

    world_size, n = 4, len(worked)
    what = f"evaluate(model, {n} examples, device='cpu', rank=r, world_size={world_size})"
    shares = []
    for rank in range(world_size):
        with tree.expecting(
            what.replace("rank=r", f"rank={rank}"), "it to take rank and world_size"
        ):
            counts = evaluate(model, worked, device="cpu", rank=rank, world_size=world_size)
        shares.append(tuple(int(c) for c in counts))
    totals = [share[2] for share in shares]
    expect(
        sum(totals) == n and max(totals) - min(totals) <= 1,
        f"{what}'s num_total for r = 0..{world_size - 1}",
        f"{n} examples shared out, no rank more than one ahead of another",
        totals,
    )
    summed = (sum(share[0] for share in shares), sum(share[1] for share in shares))
    expect(
        summed == (right, right_norm),
        f"{what}'s (num_correct, num_correct_norm), summed over the ranks",
        f"{(right, right_norm)}, one process's counts",
        summed,
    )

    hellaswag_accuracy = tree.name("train_gpt2", "hellaswag_accuracy")
    found = tuple(
        int(c) for c in hellaswag_accuracy(model, worked, 8, "cpu", contextlib.nullcontext, False)
    )
    expect(
        found == (right_norm, n),
        f"hellaswag_accuracy(model, {n} examples, B=8, ...) (right by acc_norm, total)",
        f"{(right_norm, n)} (acc would be {right})",
        found,
    )

    # a run on 2 examples written 4 times, once with each label: exactly 1 in 4 is right,
    # whatever the model
    data = write_jsonl(
        tree, "hellaswag-4x.jsonl", [dict(e, label=k) for e in examples()[:2] for k in range(4)]
    )
    log_dir = tree.scratch() / "hella-log"
    own = dict(max_steps=4, val_every=2, val_steps=1, hellaswag_every=2, hellaswag_data=data)
    out = train(tree, log_dir, **own).stdout
    printed = [line for line in out.splitlines() if "HellaSwag" in line]
    expect(
        len(printed) == 3,
        "printed HellaSwag lines of a 4-step run, every 2",
        "3 (steps 0, 2, 4)",
        len(printed),
    )
    logged = log_lines(log_dir / "log.txt")
    hella = [(step, value) for step, kind, value in logged if kind == "hella"]
    expect(
        hella == [(0, 0.25), (2, 0.25), (4, 0.25)],
        "log.txt's hella lines (8 examples, each ending once the label)",
        "0 hella 0.25, 2 hella 0.25, 4 hella 0.25",
        ", ".join(f"{s} hella {v:g}" for s, v in hella) or "none",
    )
    for kind, steps in (("train", [0, 1, 2, 3]), ("val", [0, 2, 4])):
        logged_steps = [step for step, k, _ in logged if k == kind]
        expect(logged_steps == steps, f"log.txt's steps of {kind} lines", steps, logged_steps)

    before = (log_dir / "log.txt").read_bytes()
    argv = tiny_argv(tree, log_dir, **own)
    what, wanted = (
        f"a second run into the same --log-dir, `{tree.command(argv)}`",
        "refused (exit status not 0)",
    )
    done = tree.main(argv, what, expected=wanted, check=False)
    expect(done.returncode != 0, what, wanted, "exit status 0")
    expect(
        (log_dir / "log.txt").read_bytes() == before,
        "log.txt after the refused run",
        "unchanged",
        "changed",
    )


@check(
    "checkpoints",
    "train_gpt2.main",
    "--checkpoint-every",
    "GPT.from_checkpoint",
    "hellaswag.main",
    "hellaswag.py --checkpoint",
)
def checkpoints(tree):
    """Every --checkpoint-every steps (5,000 by default; the CPU preset: 0, the last step only) and
    after the last, the run writes log_dir/model_NNNNN.pt (NNNNN: steps done): it loads with
    torch.load(weights_only=True) and holds the weights after exactly that many steps, AdamW's state
    (two moments of each parameter's shape), the step and the config; GPT.from_checkpoint rebuilds
    the model from the file alone, and hellaswag.py scores it."""
    import torch

    expect_settings(tree, [], checkpoint_every=5000)
    expect_settings(tree, ["--preset", "cpu"], checkpoint_every=0)

    GPT, GPTConfig = tree.name("train_gpt2", "GPT"), tree.name("train_gpt2", "GPTConfig")
    every = tree.scratch() / "ckpt-every-2"
    done = train(tree, every, max_steps=4, warmup_steps=4, max_lr="1e-3", checkpoint_every=2)
    files = sorted(p.name for p in every.glob("*.pt"))
    expect(
        files == ["model_00002.pt", "model_00004.pt"],
        f"checkpoints written by `{tree.command(done.args)}`",
        "model_00002.pt, model_00004.pt",
        ", ".join(files) or "none",
    )

    saved = {}
    for steps in (2, 4):
        name = f"model_{steps:05d}.pt"
        try:
            saved[steps] = torch.load(every / name, map_location="cpu", weights_only=True)
        except Exception as e:
            raise CheckFailed(
                f"torch.load({name}, weights_only=True): "
                f"expected it to load (tensors and plain data only), found {unloadable(e)}"
            ) from None
        ckpt = saved[steps]
        expect(isinstance(ckpt, dict), f"{name}", "a dict", type(ckpt).__name__)
        missing = [key for key in ("model", "optimizer", "step", "config") if key not in ckpt]
        expect(
            not missing,
            f"{name}'s entries",
            "model, optimizer, step, config",
            f"no {', '.join(missing)}",
        )
        expect(ckpt["step"] == steps, f"{name}'s step", steps, ckpt["step"])
        expect(
            isinstance(ckpt["config"], dict),
            f"{name}'s config",
            "a dict (GPTConfig's fields)",
            ckpt["config"],
        )
        sizes = {k: ckpt["config"].get(k) for k in ("n_layer", "n_head", "n_embd", "vocab_size")}
        wanted = {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 50304}
        expect(sizes == wanted, f"{name}'s config", wanted, sizes)
        fresh = GPT(GPTConfig(**ckpt["config"]))
        expect(
            set(ckpt["model"]) == set(fresh.state_dict()),
            f"{name}'s model keys",
            "the plain GPT's state_dict keys",
            sorted(set(ckpt["model"]) ^ set(fresh.state_dict()))[:3],
        )
        moments = list(ckpt["optimizer"].get("state", {}).values())
        n_params = len(list(fresh.parameters()))
        expect(
            len(moments) == n_params and all("exp_avg" in s and "exp_avg_sq" in s for s in moments),
            f"{name}'s optimizer state",
            f"AdamW's two moments for each of the {n_params} parameters",
            f"{len(moments)} entries",
        )
        shapes = sorted(tuple(p.shape) for p in fresh.parameters())
        for moment in ("exp_avg", "exp_avg_sq"):
            found = sorted(tuple(getattr(s[moment], "shape", ())) for s in moments)
            odd = [shape for shape in found if shape not in shapes]
            expect(
                found == shapes,
                f"{name}'s AdamW {moment} tensors",
                "one of each parameter's shape",
                f"shapes {odd[:2] or found[:4]} among them",
            )
    changed = any(
        not torch.equal(saved[2]["model"][k], saved[4]["model"][k]) for k in saved[2]["model"]
    )
    expect(
        changed,
        "the weights in model_00004.pt",
        "those of 2 more steps than model_00002.pt",
        "the same weights",
    )

    # the same run stopped after 2 steps (its schedule is the same: both are still warming up) ends
    # where the first one's model_00002.pt is
    short = tree.scratch() / "ckpt-short"
    done = train(tree, short, max_steps=2, warmup_steps=4, max_lr="1e-3")
    files = sorted(p.name for p in short.glob("*.pt"))
    expect(
        files == ["model_00002.pt"],
        f"checkpoints written by `{tree.command(done.args)}`",
        "model_00002.pt only (the last step's)",
        ", ".join(files) or "none",
    )
    last = torch.load(short / "model_00002.pt", map_location="cpu", weights_only=True)["model"]
    for key, value in saved[2]["model"].items():
        expect_tensors_close(
            f"model_00002.pt's {key}, "
            "saved after step 2 of a 4-step run and at the end of a 2-step run",
            last[key],
            value,
            atol=0,
            rtol=0,
        )

    path = every / "model_00004.pt"
    model = GPT.from_checkpoint(str(path)).eval()
    reference = GPT(GPTConfig(**saved[4]["config"]))
    reference.load_state_dict(saved[4]["model"])
    idx = torch.tensor([[15496, 11, 314, 1101, 257, 3303, 2746, 11]])
    with torch.no_grad():
        expect_tensors_close(
            "GPT.from_checkpoint(model_00004.pt)'s logits", reference.eval()(idx)[0], model(idx)[0]
        )

    # hellaswag.py scores this checkpoint: each example labelled with the ending this model finds
    # least surprising per token (acc_norm's answer), so acc_norm is exactly 1
    answers = one_answer(hand_answers(model, examples()))
    rows = [dict(e, label=a[1]) for e, a in zip(examples(), answers) if a]
    expected_acc = sum(a[0] == a[1] for a in answers if a) / len(rows)
    data = write_jsonl(tree, "hellaswag-ckpt.jsonl", rows)
    argv = ["--checkpoint", str(path), "--data", data, "--device", "cpu"]
    shown = f"`{tree.command(argv, 'hellaswag')}`"
    out = tree.main(argv, module="hellaswag").stdout
    for name, expected in (("acc", expected_acc), ("acc_norm", 1.0)):
        match = re.search(rf"^{name}\s*[:=]?\s*([0-9.]+)\s*$", out, re.M)
        expect(
            match is not None,
            f"{shown}'s output",
            f"a line '{name} <value>'",
            last_line(out, "no output"),
        )
        expect_close(f"{shown}: the printed {name}", expected, float(match[1]), abs_=1e-4)


@check("results", "plot_log.main", "tools/plot_log.py LOG -o PNG --fineweb")
def results(tree):
    """tools/plot_log.py reads a run's log.txt, draws the losses and HellaSwag side by side into
    a PNG, and prints where each series starts and ends, the validation loss beside OpenAI GPT-2
    124M's 3.2924 (with --fineweb: a loss on FineWeb-Edu's validation split, which the log
    cannot tell apart from another). The CPU demo whose log it plots is `--preset cpu` alone: a
    4-layer 128-wide model, 20 steps of 512 tokens, validation every 5 steps, samples at the
    end, no HellaSwag, its log in log/cpu (the real run scores HellaSwag every 250 steps, and
    logs in log/)."""
    cpu = dict(
        n_layer=4,
        n_embd=128,
        max_steps=20,
        total_batch=512,
        val_every=5,
        hellaswag_every=0,
        log_dir="log/cpu",
    )
    expect_settings(tree, ["--preset", "cpu"], data="input.txt", **cpu)
    expect_samples_at_the_end(tree)
    expect_settings(tree, [], hellaswag_every=250, log_dir="log")
    tree.name("tools.plot_log", "main")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CheckFailed(
            "this check needs matplotlib: expected it installed (pip install -e '.[plot]')"
        ) from None
    log = tree.scratch() / "log.txt"
    lines = ["0 val 10.9", "0 hella 0.25", "0 train 10.95", "1 train 10.5", "2 train 9.875"]
    lines += ["2 val 9.75", "3 train 9.625", "4 val 9.5", "4 hella 0.375"]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    png = tree.scratch() / "curves.png"
    argv = [str(log), "-o", str(png), "--fineweb"]
    shown = f"`{tree.command(argv, 'tools.plot_log')}`"
    out = tree.main(argv, module="tools.plot_log").stdout

    expect(png.is_file(), "curves.png", "the PNG written", "no file")
    data = png.read_bytes()
    expect(
        data[:8] == b"\x89PNG\r\n\x1a\n",
        "curves.png",
        "a PNG file",
        f"{len(data)} bytes of something else",
    )
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    expect(
        width > height,
        "curves.png's size",
        "wider than tall (two panels side by side)",
        f"{width}x{height}",
    )

    for kind, numbers in (
        ("val", (10.9, 0, 9.5, 4, 3.2924)),
        ("train", (10.95, 0, 9.625, 3)),
        ("hella", (0.25, 0, 0.375, 4)),
    ):
        said = [line for line in out.splitlines() if line.lstrip().startswith(kind)]
        expect(
            said,
            f"{shown}'s output",
            f"a line on {kind} (where it starts and ends)",
            last_line(out, "no output"),
        )
        found = re.findall(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", said[0])
        missing = [n for n in numbers if not any(shows(number, n) for number in found)]
        expect(
            not missing,
            f"{shown}: its {kind} line",
            f"the numbers {', '.join(map(str, numbers))}",
            said[0],
        )
