"""
HellaSwag, the benchmark the reproduction is judged by: its examples, and completion-style scoring
of a GPT on them.

Each example is a context and 4 endings; the model "answers" with the ending it finds least
surprising. We score completion style, as the GPT-2 lecture does: context + " " + ending, the loss
over the ending's tokens only. train_gpt2.py calls evaluate() during training: it batches many
examples per forward pass, computes logits only where an ending token is predicted, can pad every
batch to one fixed shape (so torch.compile compiles once) and splits the examples across DDP ranks.
`python hellaswag.py` runs it from the command line.
"""

import hashlib
import http.client
import json
import urllib.error
import urllib.request
from pathlib import Path

import tiktoken
import torch
from torch.nn import functional as F
from tqdm import tqdm

from longrun.common import EOT, UserError, sha256_file, write_atomically

# --------------------------------------------------------------------------------------------------
# ---- data

# the validation split, 10,042 examples; size and sha256 as pinned by tensorflow_datasets
# (url_checksums/hellaswag.txt)
VAL_URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
VAL_BYTES = 12246618
VAL_SHA256 = "0aa3b88843990f3f10a97b9575c94d7b71fb2205240ba04ae4884d9e9c992588"
DATA_CACHE_DIR = Path(__file__).resolve().parents[1] / "hellaswag_cache"  # at the project root
# no network, no such host, a refused, reset or timed-out connection, a bad HTTP reply: not the
# disk's doing
NETWORK_ERRORS = (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException)


def download(cache_dir=DATA_CACHE_DIR):
    """The validation jsonl, fetched once: later calls find it in cache_dir (and check it is still
    the same file)."""
    path = Path(cache_dir) / "hellaswag_val.jsonl"
    if path.is_file() and path.stat().st_size == VAL_BYTES and sha256_file(path) == VAL_SHA256:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # written aside and renamed once checked: an interrupted or wrong download never takes the real
    # name
    try:
        write_atomically(path, fetch_checked)
    except OSError as e:  # the disk's (a network's failure is a UserError already)
        raise UserError(f"could not write {path}: {e.strerror or e}") from None
    return path


def fetch_checked(f):
    """Download the validation set into the open file f, checking its size and sha256 on the way."""
    size, digest = 0, hashlib.sha256()
    try:
        with urllib.request.urlopen(VAL_URL, timeout=60) as response:
            with tqdm(
                total=VAL_BYTES, unit="B", unit_scale=True, desc="hellaswag_val.jsonl"
            ) as bar:
                for chunk in iter(lambda: response.read(1 << 16), b""):
                    f.write(chunk)
                    size += len(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
    except NETWORK_ERRORS as e:
        # said here, in the network's words: past this function it would read as a disk's
        raise UserError(f"could not download {VAL_URL}: {getattr(e, 'reason', e)}") from None
    if (size, digest.hexdigest()) != (VAL_BYTES, VAL_SHA256):
        raise UserError(
            f"downloaded {VAL_URL} is not the expected file ({size} bytes, sha256 "
            f"{digest.hexdigest()[:12]}…; expected {VAL_BYTES} bytes, {VAL_SHA256[:12]}…)"
        )


def load_examples(path):
    """The examples of a HellaSwag jsonl file, each checked: a "ctx" string, 4 "endings" strings, a
    "label" 0..3."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    examples = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            example = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{where}: not valid JSON ({e})") from None
        if not isinstance(example, dict):
            raise UserError(f"{where}: expected a JSON object, got {type(example).__name__}")
        missing = [key for key in ("ctx", "endings", "label") if key not in example]
        if missing:
            raise UserError(f"{where}: missing field {', '.join(missing)}")
        ctx, endings, label = example["ctx"], example["endings"], example["label"]
        if not isinstance(ctx, str):
            raise UserError(f"{where}: ctx must be a string")
        if not (
            isinstance(endings, list)
            and len(endings) == 4
            and all(isinstance(e, str) for e in endings)
        ):
            raise UserError(f"{where}: endings must be a list of 4 strings")
        if type(label) is not int or not 0 <= label < 4:  # type(): True is an int to isinstance
            raise UserError(f"{where}: label must be an integer 0..3, got {label!r}")
        examples.append(example)
    if not examples:
        raise UserError(f"{path}: no examples")
    return examples


# --------------------------------------------------------------------------------------------------
# ---- scoring


def render(example):
    """The 4 (context tokens, ending tokens) pairs of an example: each ending follows the context
    after a space."""
    enc = tiktoken.get_encoding("gpt2")
    ctx = enc.encode_ordinary(example["ctx"])
    return [(ctx, enc.encode_ordinary(" " + ending)) for ending in example["endings"]]


def fit(ctx, cont, block_size):
    """The pair cut to the model's context: a row reads len(ctx) + len(cont) - 1 tokens, and past
    block_size the context's oldest tokens go (as lm-eval does). An empty context becomes EOT, what
    GPT-2 saw before every document."""
    ctx = ctx or [EOT]
    excess = len(ctx) + len(cont) - 1 - block_size
    if excess >= len(ctx):
        raise UserError(
            f"an ending of {len(cont)} tokens does not fit the model's context of {block_size} "
            "tokens"
        )
    return ctx[max(excess, 0) :], cont


def batch_shape(pairs):
    """(rows, seq_len, scored) of one forward pass over these (context, continuation) pairs: a row
    per pair, all of a row's tokens but its last read by the model, and logits at the positions that
    predict a continuation token."""
    return (
        len(pairs),
        max(len(ctx) + len(cont) - 1 for ctx, cont in pairs),
        sum(len(cont) for _, cont in pairs),
    )


def continuation_losses(model, pairs, *, device, shape=None):
    """Score many (context, continuation) token pairs in one forward pass.

    Returns two (len(pairs),) tensors: the loss summed over each continuation's tokens, and the
    number of those tokens. The model computes logits only where a continuation token is predicted:
    a quarter of a HellaSwag row, and at GPT-2's vocabulary the lm_head is a small model's costliest
    layer. shape (rows, seq_len, scored), at least batch_shape(pairs), pads the pass: rows on the
    right, dummy rows below them, and dummy positions to score; causal attention means padding never
    changes the real tokens' logits, so a fixed shape costs a little compute and saves a
    torch.compile recompilation per new shape.
    """
    pairs = [fit(ctx, cont, model.config.block_size) for ctx, cont in pairs]
    needed = batch_shape(pairs)
    R, T, N = shape or needed
    if any(n > limit for n, limit in zip(needed, (R, T, N))):
        raise UserError(
            f"a forward pass of shape {needed} (rows, seq_len, scored) does not fit {(R, T, N)}"
        )
    inputs, positions, targets, row_of = [], [], [], []
    for r, (ctx, cont) in enumerate(pairs):
        row = ctx + cont
        inputs.append(row[:-1] + [0] * (T - (len(row) - 1)))
        # position i predicts token i+1: the continuation's tokens are predicted from len(ctx)-1 on
        positions += range(r * T + len(ctx) - 1, r * T + len(row) - 1)
        targets += cont
        row_of += [r] * len(cont)
    inputs += [[0] * T] * (R - len(pairs))  # dummy rows
    M = len(positions)
    positions += [0] * (N - M)  # dummy positions: scored, then dropped
    idx = torch.tensor(inputs, device=device)  # (R, T)
    positions, targets, row_of = (
        torch.tensor(x, device=device) for x in (positions, targets, row_of)
    )  # (N,) (M,) (M,)

    logits, _ = model(idx, positions=positions)  # (N, vocab_size)
    # in float32, over all vocab_size columns (padded vocabulary included, as the lecture does)
    logits = logits[:M].float()  # (M, vocab_size)
    losses = F.cross_entropy(logits, targets, reduction="none")  # (M,)
    sum_loss = torch.zeros(len(pairs), device=device).index_add_(0, row_of, losses)
    count = torch.tensor([len(cont) for _, cont in pairs])
    return sum_loss.cpu(), count


def by_length(lengths, batch_size):
    """Batches of indices, longest items first: a batch holds items of similar length, so little of
    it is padding."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


@torch.no_grad()
def predict(model, examples, *, device, batch_size=16, fixed_shape=False, progress=False):
    """(pred, pred_norm) for each example: the ending with the lowest summed loss, and with the
    lowest mean loss.

    fixed_shape pads every forward pass to one shape, the partial last batch's included:
    torch.compile compiles once.
    """
    was_training = model.training
    model.eval()
    block_size = model.config.block_size
    rendered = [
        [fit(ctx, cont, block_size) for ctx, cont in render(example)] for example in examples
    ]
    batches = by_length([max(len(c) + len(e) for c, e in pairs) for pairs in rendered], batch_size)
    # 4 rows per example
    batches = [(batch, [pair for i in batch for pair in rendered[i]]) for batch in batches]
    shape = None
    if fixed_shape:  # the smallest shape that fits every batch
        shape = tuple(map(max, zip(*(batch_shape(pairs) for _, pairs in batches))))
    predictions = [None] * len(examples)
    with tqdm(total=len(examples), unit="ex", desc="HellaSwag", disable=not progress) as bar:
        for batch, pairs in batches:
            sum_loss, count = continuation_losses(model, pairs, device=device, shape=shape)
            sum_loss, count = sum_loss.view(-1, 4), count.view(-1, 4)  # (examples, 4 endings)
            for i, pred, pred_norm in zip(
                batch, sum_loss.argmin(1).tolist(), (sum_loss / count).argmin(1).tolist()
            ):
                predictions[i] = (pred, pred_norm)
            bar.update(len(batch))
    model.train(was_training)
    return predictions


def evaluate(
    model,
    examples,
    *,
    device,
    batch_size=16,
    rank=0,
    world_size=1,
    fixed_shape=False,
    progress=False,
):
    """(num_correct, num_correct_norm, num_total) over this rank's share of the examples: sum them
    over ranks.

    Rank r takes examples r, r + world_size, ...; fixed_shape gives every forward pass one shape,
    for a compiled model. acc is num_correct / num_total, acc_norm num_correct_norm / num_total.
    """
    mine = examples[rank::world_size]
    predictions = predict(
        model,
        mine,
        device=device,
        batch_size=batch_size,
        fixed_shape=fixed_shape,
        progress=progress,
    )
    labels = [example["label"] for example in mine]
    num_correct = sum(pred == label for (pred, _), label in zip(predictions, labels))
    num_correct_norm = sum(pred_norm == label for (_, pred_norm), label in zip(predictions, labels))
    return num_correct, num_correct_norm, len(mine)
