"""
HellaSwag scoring speed on CPU, in one run: the lecture's scorer (one example per forward pass,
logits at every position) against longrun/hellaswag_scoring.py's (many examples per forward pass,
logits only where an ending token is predicted).

    python benchmarks/bench_hellaswag.py     # a small random model, synthetic HellaSwag-shaped data
    python benchmarks/bench_hellaswag.py --data hellaswag_cache/hellaswag_val.jsonl --examples 200

Our scorer also runs one example per forward pass, to show what batching adds on its own (on a CPU:
nothing; a big batch's logits outgrow the caches). All of them must predict the same endings. Each
figure is the best of --repeats runs, the scorers taking turns, so a busy machine slows them alike.
(Offline, point tiktoken at its cache first: export TIKTOKEN_CACHE_DIR=../shared/tiktoken)
"""

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
# the product, and the lecture's scorer (the tests' oracle)
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fixtures import synthetic_examples  # noqa: E402
from longrun import hellaswag_scoring  # noqa: E402
from longrun.common import UserError  # noqa: E402
from reference import lecture_predictions  # noqa: E402
from train_gpt2 import GPT, GPTConfig  # noqa: E402


def shakespeare_examples(n):
    """HellaSwag-shaped examples: a context of 10-70 words, 4 endings of 5-25, words from tiny
    Shakespeare."""
    return synthetic_examples(
        n, words=(ROOT / "input.txt").read_text().split(), context=(10, 70), ending=(5, 25)
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--data", help="a HellaSwag jsonl file (default: synthetic examples)")
    p.add_argument("--examples", type=int, default=64)
    p.add_argument(
        "--batch-size",
        type=int,
        default=16,
        help="examples per forward pass for the batched scorer",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    try:
        if args.data:
            examples = hellaswag_scoring.load_examples(args.data)
        else:
            examples = shakespeare_examples(args.examples)
    except UserError as e:
        p.error(str(e))
    examples = examples[: args.examples]
    torch.manual_seed(0)
    # the size of train_gpt2.py's cpu preset, with GPT-2's (padded) vocabulary
    model = GPT(GPTConfig(n_layer=4, n_head=4, n_embd=128, vocab_size=50304)).eval()
    rows = [pair for example in examples for pair in hellaswag_scoring.render(example)]
    computed = sum(len(ctx) + len(ending) - 1 for ctx, ending in rows)
    needed = sum(len(ending) for _, ending in rows)
    print(
        f"{len(examples)} examples, "
        f"model {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
        f"{torch.get_num_threads()} CPU threads, torch {torch.__version__}"
    )
    print(
        f"{computed} positions (padding aside), of which {needed} ({needed / computed:.0%}) "
        f"predict an ending token: the lecture's scorer runs the lm_head at all of them, "
        f"ours at those"
    )

    def ours(batch_size):
        return lambda: hellaswag_scoring.predict(
            model, examples, device="cpu", batch_size=batch_size
        )

    baseline = "lecture: one example per forward"
    scorers = {
        baseline: lambda: lecture_predictions(model, examples),
        "ours: one example per forward": ours(1),
        f"ours: {args.batch_size} examples per forward": ours(args.batch_size),
    }
    # warm-up: first-call allocations
    hellaswag_scoring.predict(model, examples[:2], device="cpu", batch_size=2)
    best, predictions = {name: float("inf") for name in scorers}, {}
    for _ in range(args.repeats):
        for name, scorer in scorers.items():
            t0 = time.perf_counter()
            predictions[name] = scorer()
            best[name] = min(best[name], time.perf_counter() - t0)
    assert len(set(map(tuple, predictions.values()))) == 1, "the scorers disagree"

    print(f"{'scorer':<36} {'examples/s':>10} {'speedup':>8}")
    for name, seconds in best.items():
        print(f"{name:<36} {len(examples) / seconds:>10.1f} {best[baseline] / seconds:>7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
