"""
Evaluate a GPT-2 on HellaSwag from the command line: OpenAI's weights or one of our checkpoints,
scored by longrun/hellaswag_scoring.py or by lm-eval's own harness (our model registered as an
lm-eval model).

    python hellaswag.py                                   # OpenAI's gpt2 on the validation set
    python hellaswag.py --checkpoint log/model_19073.pt   # one of our checkpoints
    python hellaswag.py --checkpoint log/model_19073.pt --harness    # through lm-eval's own task
    python hellaswag.py --data hellaswag_cache/hellaswag_val.jsonl --harness   # lm-eval on our file

With this scorer OpenAI's gpt2 (124M) gets acc_norm 0.2955 (the GPT-2 lecture's figure); GPT-3 124M
reached 0.337 (the GPT-3 paper's zero-shot figure).
"""

import glob
import os
import sys

import tiktoken
import torch
import torch.nn.functional as F
from tqdm import tqdm

from longrun.common import EOT, ArgumentParser, UserError, count, run_cli
from longrun.flags import device_name
from longrun.hellaswag_scoring import (
    DATA_CACHE_DIR,
    by_length,
    continuation_losses,
    download,
    evaluate,
    load_examples,
    render,
)
from train_gpt2 import load_model, pick_device

try:  # lm-eval is optional (pip install -e ".[eval]"): only --harness needs it
    # lm-eval lists its own models only in an empty registry: before ours
    import lm_eval.models  # noqa: F401
    from lm_eval.api.model import LM
    from lm_eval.api.registry import model_registry
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
except ImportError:
    LM, model_registry = object, None


# --------------------------------------------------------------------------------------------------
# ---- one example, ending by ending (--show)


@torch.no_grad()
def show(model, example, device):
    """One example scored ending by ending: acc picks the lowest sum, acc_norm the lowest mean per
    token."""
    model.eval()
    sum_loss, n_tokens = continuation_losses(model, render(example), device=device)
    print(f"context: {example['ctx']!r}")
    for i, (ending, total, n) in enumerate(
        zip(example["endings"], sum_loss.tolist(), n_tokens.tolist())
    ):
        label = "  <- label" if i == example["label"] else ""
        print(
            f"  ending {i}: loss sum {total:7.3f} over {n:2d} tokens, mean {total / n:.4f}  "
            f"{ending[:40]!r}{label}"
        )
    print(
        f"  acc picks {sum_loss.argmin().item()}, acc_norm picks "
        f"{(sum_loss / n_tokens).argmin().item()}"
    )


# --------------------------------------------------------------------------------------------------
# ---- lm-eval: our model as a harness model, to run the harness's own tasks on it


class HarnessLM(LM):
    """Our GPT as an lm-eval model, with tiktoken's gpt2 BPE. Its log-likelihoods come from the
    model's plain logits, not from hellaswag_scoring's continuation_losses: a cross-check that
    shared the scorer would share its mistakes.

    lm-eval builds it by name from arguments: pretrained=gpt2 (or a transformers folder), or
    checkpoint=PATH.
    """

    def __init__(self, pretrained="gpt2", checkpoint=None, device="cpu", batch_size=64):
        super().__init__()
        self.model = load_model(pretrained, checkpoint).to(device).eval()
        self._device = device
        self.batch_size = int(batch_size)  # (context, continuation) rows per forward pass
        self.enc = tiktoken.get_encoding("gpt2")

    @torch.no_grad()
    def _loglikelihoods(self, pairs):
        """(log-likelihood, is_greedy) of each (context tokens, continuation tokens) pair,
        batch_size at a time."""
        out = [None] * len(pairs)
        # a row longer than the model's context loses tokens from the left, as lm-eval's own models
        # do
        rows = [(ctx + cont)[-(self.model.config.block_size + 1) :] for ctx, cont in pairs]
        batches = by_length([len(row) for row in rows], self.batch_size)
        for batch in tqdm(batches, desc="lm-eval requests", unit="batch"):
            T = max(len(rows[i]) for i in batch) - 1
            idx = torch.tensor(
                [rows[i][:-1] + [0] * (T + 1 - len(rows[i])) for i in batch], device=self.device
            )
            logprobs = F.log_softmax(self.model(idx)[0].float(), dim=-1)  # (B, T, vocab_size)
            for b, i in enumerate(batch):
                # the row's last n tokens, each predicted from the position before it
                n = len(pairs[i][1])
                targets = torch.tensor(rows[i][-n:], device=self.device)
                predicted = logprobs[b, len(rows[i]) - 1 - n : len(rows[i]) - 1]  # (n, vocab_size)
                loglikelihood = predicted.gather(1, targets[:, None]).sum().item()
                out[i] = (loglikelihood, bool((predicted.argmax(dim=1) == targets).all()))
        return out

    def loglikelihood(self, requests):
        # context and continuation tokenized apart, as render() does: " ending" keeps its leading
        # space token
        pairs = [
            (self.enc.encode_ordinary(ctx), self.enc.encode_ordinary(cont))
            for ctx, cont in (request.args for request in requests)
        ]
        return self._loglikelihoods(pairs)

    def loglikelihood_rolling(self, requests):
        """A whole text's log-likelihood, in block_size windows that predict each token exactly
        once."""
        totals = []
        for (text,) in (request.args for request in requests):
            windows = [
                make_disjoint_window(window)
                for window in get_rolling_token_windows(
                    self.enc.encode_ordinary(text),
                    prefix_token=EOT,
                    max_seq_len=self.model.config.block_size,
                    context_len=1,
                )
            ]
            totals.append(sum(ll for ll, _ in self._loglikelihoods(windows)))
        return totals

    def generate_until(self, requests):
        raise NotImplementedError(
            "HarnessLM scores; it does not generate (HellaSwag needs only log-likelihoods)"
        )


if model_registry is not None:
    # registered by "module:class" name: run as a script this file is loaded twice (as __main__,
    # then as hellaswag), and lm-eval refuses a second, different class object under the same name
    model_registry.register("build-gpt2", target="hellaswag:HarnessLM")


def file_task(path):
    """An lm-eval task over one of our HellaSwag files: its examples as they are, scored by
    lm-eval's own multiple-choice code (context, then " " and each ending, as render() joins
    them)."""
    return {
        "task": "hellaswag_file",
        "dataset_path": "json",
        # datasets reads data_files as patterns: escaped, the path names this one file, whatever its
        # characters
        "dataset_kwargs": {"data_files": {"validation": glob.escape(os.path.abspath(path))}},
        "validation_split": "validation",
        "output_type": "multiple_choice",
        "doc_to_text": "ctx",
        "doc_to_choice": "endings",
        "doc_to_target": "label",
        "metric_list": [
            {"metric": name, "aggregation": "mean", "higher_is_better": True}
            for name in ("acc", "acc_norm")
        ],
    }


def run_harness(
    task="hellaswag", *, pretrained="gpt2", checkpoint=None, device="cpu", batch_size=64, limit=None
):
    """lm-eval's results dict for one task (samples included), our model built through lm-eval's
    registry. The task is the name of one of lm-eval's tasks, or a task's config (file_task)."""
    if model_registry is None:
        raise UserError("--harness needs lm-eval: pip install -e '.[eval]'")
    from lm_eval import simple_evaluate
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import TaskManager

    # the model first: a bad checkpoint fails in a second, before lm-eval spends seconds indexing
    # its tasks
    model_args = {"checkpoint": checkpoint} if checkpoint else {"pretrained": pretrained}
    lm = get_model("build-gpt2").create_from_arg_obj(
        model_args, {"device": device, "batch_size": batch_size}
    )
    task_manager = TaskManager()
    if isinstance(task, str) and task not in task_manager.all_tasks:
        raise UserError(f"lm-eval has no task {task!r}")
    try:
        return simple_evaluate(model=lm, tasks=[task], limit=limit, task_manager=task_manager)
    except ConnectionError as e:  # the task's dataset comes from the Hugging Face hub
        raise UserError(
            f"lm-eval could not fetch the {task!r} dataset: {str(e).splitlines()[0]}"
        ) from None


# --------------------------------------------------------------------------------------------------
# ---- the run


def parse_args(argv=None):
    p = ArgumentParser(
        description="Evaluate a GPT-2 on HellaSwag (validation set, completion style)."
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--model",
        help="gpt2 (the default), gpt2-medium, gpt2-large, gpt2-xl or a transformers folder",
    )
    which.add_argument("--checkpoint", help="one of our checkpoints, e.g. log/model_19073.pt")
    p.add_argument(
        "--data",
        help="a HellaSwag jsonl file (default: the validation set, downloaded into --cache-dir)",
    )
    p.add_argument(
        "--cache-dir", default=DATA_CACHE_DIR, help="where the downloaded validation set is kept"
    )
    p.add_argument("--limit", type=count, help="only the first N examples")
    p.add_argument(
        "--show",
        type=count,
        default=0,
        help="first print the first N examples scored ending by ending",
    )
    p.add_argument(
        "--batch-size",
        type=count,
        help="examples per forward pass, 4 rows each (default: 1 on a CPU, whose caches a big "
        "batch's logits outgrow; 16 elsewhere)",
    )
    p.add_argument(
        "--device", type=device_name, default="auto", help="auto, cpu, cuda, cuda:N or mps"
    )
    p.add_argument(
        "--compile", action="store_true", help="torch.compile the model; every batch gets one shape"
    )
    p.add_argument(
        "--harness",
        nargs="?",
        const="hellaswag",
        metavar="TASK",
        help="score with lm-eval instead: its own task (default hellaswag, its dataset from the "
        "Hugging Face hub), or with --data, lm-eval's scoring of that file",
    )
    args = p.parse_args(argv)
    # a default here, not in the group: argparse lets a default pass the exclusion
    args.model = args.model or "gpt2"
    if args.harness and args.compile:
        p.error("--harness runs the model uncompiled: drop --compile")
    if args.harness not in (None, "hellaswag") and args.data:
        p.error(
            f"--harness {args.harness} reads its own data: drop --data, "
            "or the task's name to score the file"
        )
    return args


def main(argv=None):
    args = parse_args(argv)
    return run_cli(
        "hellaswag.py", lambda: run(args), interrupted="nothing is written but a whole download"
    )


def run(args):
    device = pick_device(args.device)
    # 1 on a CPU, whose caches a big batch's logits outgrow; 16 on a GPU, which one example leaves
    # mostly idle
    args.batch_size = args.batch_size or (1 if device == "cpu" else 16)
    (report_harness if args.harness else report)(args, device)


def report(args, device):
    examples = load_examples(args.data or download(args.cache_dir))[: args.limit]
    model = load_model(args.model, args.checkpoint).to(device)
    for example in examples[: args.show]:
        show(model, example, device)
    if args.compile:
        model = torch.compile(model)
    print(f"{len(examples)} examples, {args.checkpoint or args.model} on {device}")
    num_correct, num_correct_norm, total = evaluate(
        model,
        examples,
        device=device,
        batch_size=args.batch_size,
        fixed_shape=args.compile,
        progress=True,
    )
    print(f"acc {num_correct / total:.4f}")
    print(f"acc_norm {num_correct_norm / total:.4f}")


def report_harness(args, device):
    from lm_eval.utils import make_table

    if args.data:
        # a bad line is our one-line error, not a traceback from inside lm-eval
        load_examples(args.data)
    task = file_task(args.data) if args.data else args.harness
    results = run_harness(
        task,
        pretrained=args.model,
        checkpoint=args.checkpoint,
        device=device,
        batch_size=4 * args.batch_size,
        limit=args.limit,
    )
    print(make_table(results))
    metrics = results["results"][task["task"] if args.data else task]
    if "acc_norm,none" in metrics:
        print(
            "lm-eval's acc_norm divides each ending's log-likelihood by its length in characters; "
            "ours, by tokens"
        )
    for name in ("acc", "acc_norm"):
        # a multiple-choice task's metrics, "none" the filter they went through
        if f"{name},none" in metrics:
            print(f"{name} {metrics[f'{name},none']:.4f}")


if __name__ == "__main__":
    sys.exit(main())
