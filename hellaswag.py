"""
HellaSwag: how the reproduction is judged against OpenAI's GPT-2 124M (acc_norm 0.2955 with this scorer) and
GPT-3 124M (0.337, from the GPT-3 paper).

Each example is a context and 4 endings; the model "answers" with the ending it finds least surprising. We score
completion style, as the GPT-2 lecture does: context + " " + ending, the loss over the ending's tokens only.

    python hellaswag.py                                    # OpenAI's gpt2 on the validation set (downloaded once)
    python hellaswag.py --checkpoint log/model_19072.pt    # one of our checkpoints
    python hellaswag.py --checkpoint log/model_19072.pt --harness   # the same model through lm-eval's own task

train_gpt2.py calls evaluate() during training; it batches many examples per forward pass, computes logits only
where an ending token is predicted, can pad every batch to one fixed shape (so torch.compile compiles once) and
splits the examples across DDP ranks.
"""

import argparse
import contextlib
import hashlib
import json
import os
import sys
import tempfile
import urllib.request
from pathlib import Path

import tiktoken
import torch
from torch.nn import functional as F
from tqdm import tqdm

try:  # lm-eval is optional (pip install -e ".[eval]"): only --harness needs it
    import lm_eval.models  # noqa: F401  lm-eval lists its own models only in an empty registry: before ours
    from lm_eval.api.model import LM
    from lm_eval.api.registry import model_registry
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
except ImportError:
    LM, model_registry = object, None

EOT = 50256  # <|endoftext|>: what GPT-2 saw before every document, so the one thing to condition on when nothing is


class HellaSwagError(ValueError):
    """Something the user can fix (bad data, a missing or mismatched checkpoint, a failed download): one line."""


# ------------------------------------------------------------------------------------------------------------------
# ---- data

# the validation split, 10,042 examples; size and sha256 as pinned by tensorflow_datasets (url_checksums/hellaswag.txt)
VAL_URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
VAL_BYTES = 12246618
VAL_SHA256 = "0aa3b88843990f3f10a97b9575c94d7b71fb2205240ba04ae4884d9e9c992588"
DATA_CACHE_DIR = Path(__file__).resolve().parent / "hellaswag_cache"


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download(cache_dir=DATA_CACHE_DIR):
    """The validation jsonl, fetched once: later calls find it in cache_dir (and check it is still the same file)."""
    path = Path(cache_dir) / "hellaswag_val.jsonl"
    if path.is_file() and path.stat().st_size == VAL_BYTES and sha256_of(path) == VAL_SHA256:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # download beside the target, then rename: an interrupted download never leaves a half file under the real name
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f, urllib.request.urlopen(VAL_URL, timeout=60) as response:
            with tqdm(total=VAL_BYTES, unit="B", unit_scale=True, desc=path.name) as bar:
                for chunk in iter(lambda: response.read(1 << 16), b""):
                    f.write(chunk)
                    bar.update(len(chunk))
        size, digest = os.path.getsize(tmp), sha256_of(tmp)
        if (size, digest) != (VAL_BYTES, VAL_SHA256):
            raise HellaSwagError(f"downloaded {VAL_URL} is not the expected file ({size} bytes, sha256 "
                                 f"{digest[:12]}…; expected {VAL_BYTES} bytes, {VAL_SHA256[:12]}…)")
        os.replace(tmp, path)
    except OSError as e:  # urllib's URLError included
        raise HellaSwagError(f"could not download {VAL_URL}: {e} (or pass --data FILE)") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def load_examples(path):
    """The examples of a HellaSwag jsonl file, each checked: a "ctx" string, 4 "endings" strings, a "label" 0..3."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise HellaSwagError(f"cannot read {path}: {e}") from None
    examples = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            example = json.loads(line)
        except json.JSONDecodeError as e:
            raise HellaSwagError(f"{where}: not valid JSON ({e})") from None
        if not isinstance(example, dict):
            raise HellaSwagError(f"{where}: expected a JSON object, got {type(example).__name__}")
        missing = [key for key in ("ctx", "endings", "label") if key not in example]
        if missing:
            raise HellaSwagError(f"{where}: missing field {', '.join(missing)}")
        ctx, endings, label = example["ctx"], example["endings"], example["label"]
        if not isinstance(ctx, str):
            raise HellaSwagError(f"{where}: ctx must be a string")
        if not (isinstance(endings, list) and len(endings) == 4 and all(isinstance(e, str) for e in endings)):
            raise HellaSwagError(f"{where}: endings must be a list of 4 strings")
        if type(label) is not int or not 0 <= label < 4:  # type(): True is an int to isinstance
            raise HellaSwagError(f"{where}: label must be an integer 0..3, got {label!r}")
        examples.append(example)
    if not examples:
        raise HellaSwagError(f"{path}: no examples")
    return examples


# ------------------------------------------------------------------------------------------------------------------
# ---- scoring


def render(example):
    """The 4 (context tokens, ending tokens) pairs of an example: each ending follows the context after a space."""
    enc = tiktoken.get_encoding("gpt2")
    ctx = enc.encode_ordinary(example["ctx"])
    return [(ctx, enc.encode_ordinary(" " + ending)) for ending in example["endings"]]


def batch_shape(pairs):
    """(rows, seq_len, scored) of one forward pass over these (context, continuation) pairs: a row per pair, all of a
    row's tokens but its last read by the model, and logits at the positions that predict a continuation token."""
    return len(pairs), max(len(ctx) + len(cont) - 1 for ctx, cont in pairs), sum(len(cont) for _, cont in pairs)


def continuation_losses(model, pairs, *, device, shape=None, autocast_dtype=None):
    """Score many (context, continuation) token pairs in one forward pass.

    Returns three (len(pairs),) tensors: the loss summed over each continuation's tokens, the number of those tokens,
    and whether every one of them was the model's top choice. The model computes logits only where a continuation
    token is predicted: a quarter of a HellaSwag row, and at GPT-2's vocabulary the lm_head is a small model's
    costliest layer. shape (rows, seq_len, scored), at least batch_shape(pairs), pads the pass: rows on the right,
    dummy rows below them, and dummy positions to score; causal attention means padding never changes the real
    tokens' logits, so a fixed shape costs a little compute and saves a torch.compile recompilation per new shape.
    """
    pairs = [(ctx or [EOT], cont) for ctx, cont in pairs]
    needed = batch_shape(pairs)
    R, T, N = shape or needed
    if any(n > limit for n, limit in zip(needed, (R, T, N))):
        raise HellaSwagError(f"a forward pass of shape {needed} (rows, seq_len, scored) does not fit {(R, T, N)}")
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
    positions, targets, row_of = (torch.tensor(x, device=device) for x in (positions, targets, row_of))  # (N,) (M,) (M,)

    autocast = contextlib.nullcontext()  # not autocast(enabled=False): that would switch off a caller's autocast
    if autocast_dtype is not None:
        autocast = torch.autocast(device_type=torch.device(device).type, dtype=autocast_dtype)
    with autocast:
        logits, _ = model(idx, positions=positions)  # (N, vocab_size)
    # in float32, over all vocab_size columns (padded vocabulary included, as the lecture does)
    logits = logits[:M].float()  # (M, vocab_size)
    losses = F.cross_entropy(logits, targets, reduction="none")  # (M,)
    # top choice: no logit above the target's (amax is several times faster than argmax on a CPU)
    missed = logits.gather(1, targets.unsqueeze(1)).squeeze(1) < logits.amax(dim=1)  # (M,)
    sum_loss = torch.zeros(len(pairs), device=device).index_add_(0, row_of, losses)
    misses = torch.zeros(len(pairs), dtype=torch.long, device=device).index_add_(0, row_of, missed.long())
    count = torch.tensor([len(cont) for _, cont in pairs])
    return sum_loss.cpu(), count, (misses == 0).cpu()


def by_length(lengths, batch_size):
    """Batches of indices, longest items first: a batch holds items of similar length, so little of it is padding."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


@torch.no_grad()
def predict(model, examples, *, device, batch_size=16, fixed_shape=False, autocast_dtype=None, progress=False):
    """(pred, pred_norm) for each example: the ending with the lowest summed loss, and with the lowest mean loss.

    fixed_shape pads every forward pass to one shape, the partial last batch's included: torch.compile compiles once.
    """
    was_training = model.training
    model.eval()
    rendered = [render(example) for example in examples]
    batches = by_length([max(len(c) + len(e) for c, e in pairs) for pairs in rendered], batch_size)
    batches = [(batch, [pair for i in batch for pair in rendered[i]]) for batch in batches]
    shape = None
    if fixed_shape:  # the smallest shape that fits every batch
        shape = tuple(map(max, zip(*(batch_shape(pairs) for _, pairs in batches))))
    predictions = [None] * len(examples)
    with tqdm(total=len(examples), unit="ex", desc="HellaSwag", disable=not progress) as bar:
        for batch, pairs in batches:
            sum_loss, count, _ = continuation_losses(model, pairs, device=device, shape=shape,
                                                     autocast_dtype=autocast_dtype)
            sum_loss, count = sum_loss.view(-1, 4), count.view(-1, 4)  # (examples, 4 endings)
            for i, pred, pred_norm in zip(batch, sum_loss.argmin(1).tolist(), (sum_loss / count).argmin(1).tolist()):
                predictions[i] = (pred, pred_norm)
            bar.update(len(batch))
    model.train(was_training)
    return predictions


def evaluate(model, examples, *, device, batch_size=16, rank=0, world_size=1, autocast_dtype=None,
             fixed_shape=False, progress=False):
    """(num_correct, num_correct_norm, num_total) over this rank's share of the examples: sum them over ranks.

    Rank r takes examples r, r + world_size, ...; fixed_shape gives every forward pass one shape, for a compiled
    model. acc is num_correct / num_total, acc_norm num_correct_norm / num_total.
    """
    mine = examples[rank::world_size]
    predictions = predict(model, mine, device=device, batch_size=batch_size, fixed_shape=fixed_shape,
                          autocast_dtype=autocast_dtype, progress=progress)
    labels = [example["label"] for example in mine]
    num_correct = sum(pred == label for (pred, _), label in zip(predictions, labels))
    num_correct_norm = sum(pred_norm == label for (_, pred_norm), label in zip(predictions, labels))
    return num_correct, num_correct_norm, len(mine)


# ------------------------------------------------------------------------------------------------------------------
# ---- models: OpenAI's through transformers, or ours from a checkpoint


def load_pretrained(name_or_dir):
    from train_gpt2 import GPT  # here, not at the top: train_gpt2 imports this file

    try:
        return GPT.from_pretrained(name_or_dir)
    except OSError as e:  # transformers: no such model, no such folder, or no network to fetch it
        raise HellaSwagError(f"cannot load model {name_or_dir!r}: {str(e).splitlines()[0]}") from None


def load_checkpoint(path):
    """Our GPT from a train_gpt2.py checkpoint (log/model_NNNNN.pt)."""
    from train_gpt2 import GPT, GPTConfig, RunError, load_checkpoint as read_checkpoint

    try:
        checkpoint = read_checkpoint(path)
    except RunError as e:
        raise HellaSwagError(str(e)) from None
    try:
        model = GPT(GPTConfig(**checkpoint["config"]))
    except TypeError as e:
        raise HellaSwagError(f"{path}: its config does not fit GPTConfig ({e})") from None
    expected, found = model.state_dict(), checkpoint["model"]
    problems = [f"missing {k}" for k in expected.keys() - found.keys()]
    problems += [f"unexpected {k}" for k in found.keys() - expected.keys()]
    problems += [f"{k} is {tuple(found[k].shape)}, the model wants {tuple(v.shape)}"
                 for k, v in expected.items() if k in found and found[k].shape != v.shape]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise HellaSwagError(f"{path} does not match the model of its config: {'; '.join(sorted(problems)[:3])}{more}")
    model.load_state_dict(found)
    return model


def load_model(pretrained="gpt2", checkpoint=None):
    return load_checkpoint(checkpoint) if checkpoint else load_pretrained(pretrained)


# ------------------------------------------------------------------------------------------------------------------
# ---- lm-eval: our model as a harness model, to run the harness's own tasks on it


class HarnessLM(LM):
    """Our GPT as an lm-eval model: log-likelihoods from the same scorer as evaluate(), with tiktoken's gpt2 BPE.

    lm-eval builds it by name from arguments: pretrained=gpt2 (or a transformers folder), or checkpoint=PATH.
    """

    def __init__(self, pretrained="gpt2", checkpoint=None, device="cpu", batch_size=64):
        super().__init__()
        self.model = load_model(pretrained, checkpoint).to(device).eval()
        self._device = device
        self.batch_size = int(batch_size)  # (context, continuation) rows per forward pass
        self.enc = tiktoken.get_encoding("gpt2")

    @torch.no_grad()
    def _loglikelihoods(self, pairs):
        """(log-likelihood, is_greedy) of each (context tokens, continuation tokens) pair, batch_size at a time."""
        out = [None] * len(pairs)
        batches = by_length([len(ctx) + len(cont) for ctx, cont in pairs], self.batch_size)
        for batch in tqdm(batches, desc="lm-eval requests", unit="batch"):
            sum_loss, _, greedy = continuation_losses(self.model, [pairs[i] for i in batch], device=self.device)
            for i, loglikelihood, is_greedy in zip(batch, (-sum_loss).tolist(), greedy.tolist()):
                out[i] = (loglikelihood, is_greedy)
        return out

    def loglikelihood(self, requests):
        # context and continuation tokenized apart, as render() does: " ending" keeps its leading space token
        pairs = [(self.enc.encode_ordinary(ctx), self.enc.encode_ordinary(cont)) for ctx, cont in
                 (request.args for request in requests)]
        return self._loglikelihoods(pairs)

    def loglikelihood_rolling(self, requests):
        """A whole text's log-likelihood, in block_size windows that predict each token exactly once."""
        totals = []
        for (text,) in (request.args for request in requests):
            windows = [make_disjoint_window(window) for window in get_rolling_token_windows(
                self.enc.encode_ordinary(text), prefix_token=EOT, max_seq_len=self.model.config.block_size,
                context_len=1)]
            totals.append(sum(ll for ll, _ in self._loglikelihoods(windows)))
        return totals

    def generate_until(self, requests):
        raise NotImplementedError("HarnessLM scores; it does not generate (HellaSwag needs only log-likelihoods)")


if model_registry is not None:
    # registered by "module:class" name: run as a script this file is loaded twice (as __main__, then as hellaswag),
    # and lm-eval refuses a second, different class object under the same name
    model_registry.register("build-gpt2", target="hellaswag:HarnessLM")


def run_harness(task="hellaswag", *, pretrained="gpt2", checkpoint=None, device="cpu", batch_size=64,
                include_path=None, limit=None):
    """lm-eval's results dict for one task (samples included), our model built through lm-eval's registry."""
    if model_registry is None:
        raise HellaSwagError("--harness needs lm-eval: pip install -e '.[eval]'")
    from lm_eval import simple_evaluate
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import TaskManager

    # the model first: a bad checkpoint fails in a second, before lm-eval spends seconds indexing its tasks
    model_args = {"checkpoint": checkpoint} if checkpoint else {"pretrained": pretrained}
    lm = get_model("build-gpt2").create_from_arg_obj(model_args, {"device": device, "batch_size": batch_size})
    task_manager = TaskManager(include_path=include_path)
    if task not in task_manager.all_tasks:
        where = f" (nor in {include_path})" if include_path else ""
        raise HellaSwagError(f"lm-eval has no task {task!r}{where}")
    try:
        return simple_evaluate(model=lm, tasks=[task], limit=limit, task_manager=task_manager)
    except ConnectionError as e:  # the task's dataset comes from the Hugging Face hub
        raise HellaSwagError(f"lm-eval could not fetch the {task!r} dataset: {str(e).splitlines()[0]}") from None


# ------------------------------------------------------------------------------------------------------------------
# ---- the run


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Evaluate a GPT-2 on HellaSwag (validation set, completion style).")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--model", help="gpt2 (the default), gpt2-medium, gpt2-large, gpt2-xl or a transformers folder")
    which.add_argument("--checkpoint", help="one of our checkpoints, e.g. log/model_19072.pt")
    p.add_argument("--data", help="a HellaSwag jsonl file (default: the validation set, downloaded into --cache-dir)")
    p.add_argument("--cache-dir", default=DATA_CACHE_DIR, help="where the downloaded validation set is kept")
    p.add_argument("--limit", type=positive_int, help="only the first N examples")
    p.add_argument("--batch-size", type=positive_int,
                   help="examples per forward pass, 4 rows each (default: 1 on a CPU, whose caches a big batch's "
                        "logits outgrow; 16 elsewhere)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--compile", action="store_true", help="torch.compile the model; every batch gets one shape")
    p.add_argument("--harness", nargs="?", const="hellaswag", metavar="TASK",
                   help="run lm-eval's own task (default hellaswag, its dataset from the Hugging Face hub) instead")
    p.add_argument("--include-path", help="a folder of extra lm-eval task YAMLs, for --harness")
    args = p.parse_args(argv)
    args.model = args.model or "gpt2"  # a default here, not in the group: argparse lets a default pass the exclusion
    if args.harness and (args.data or args.compile):
        p.error("--harness reads its task's own data, uncompiled: drop --data and --compile")
    if args.include_path and not args.harness:
        p.error("--include-path is for --harness")
    return args


def main(argv=None):
    args = parse_args(argv)
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    args.batch_size = args.batch_size or (1 if device == "cpu" else 16)
    try:
        if args.harness:
            report_harness(args, device)
        else:
            report(args, device)
    except HellaSwagError as e:
        print(f"hellaswag.py: error: {e}", file=sys.stderr)
        return 1
    return 0


def report(args, device):
    examples = load_examples(args.data or download(args.cache_dir))[: args.limit]
    model = load_model(args.model, args.checkpoint).to(device)
    if args.compile:
        model = torch.compile(model)
    print(f"{len(examples)} examples, {args.checkpoint or args.model} on {device}")
    num_correct, num_correct_norm, total = evaluate(model, examples, device=device, batch_size=args.batch_size,
                                                    fixed_shape=args.compile, progress=True)
    print(f"acc {num_correct / total:.4f}")
    print(f"acc_norm {num_correct_norm / total:.4f}")


def report_harness(args, device):
    from lm_eval.utils import make_table

    results = run_harness(args.harness, pretrained=args.model, checkpoint=args.checkpoint, device=device,
                          batch_size=4 * args.batch_size, include_path=args.include_path, limit=args.limit)
    print(make_table(results))
    metrics = results["results"][args.harness]
    if "acc_norm,none" in metrics:
        print("lm-eval's acc_norm divides each ending's log-likelihood by its length in characters; ours, by tokens")
    for name in ("acc", "acc_norm"):
        if f"{name},none" in metrics:  # a multiple-choice task's metrics, "none" the filter they went through
            print(f"{name} {metrics[f'{name},none']:.4f}")


if __name__ == "__main__":
    # run as the module `hellaswag`, not as this second copy named __main__: train_gpt2 and lm-eval's registry import
    # `hellaswag`, and the errors its code raises must be the HellaSwagError that main() catches
    import hellaswag

    sys.exit(hellaswag.main())
