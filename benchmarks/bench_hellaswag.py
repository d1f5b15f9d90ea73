"""
HellaSwag scoring speed on CPU, in one run: one example per forward pass (the lecture's way) against batches of many.

    python benchmarks/bench_hellaswag.py                  # a small random model, synthetic HellaSwag-shaped data
    python benchmarks/bench_hellaswag.py --data hellaswag_cache/hellaswag_val.jsonl --examples 200

Both runs use hellaswag.py's scorer and must predict the same endings; only examples per forward pass differ.
Each figure is the best of --repeats runs, the two scorers taking turns, so a busy machine slows both alike.
(Offline, point tiktoken at its cache first: export TIKTOKEN_CACHE_DIR=../shared/tiktoken)
"""

import argparse
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hellaswag  # noqa: E402
from train_gpt2 import GPT, GPTConfig  # noqa: E402


def synthetic_examples(n, seed=0):
    """HellaSwag-shaped examples: a context of 10-70 words, 4 endings of 5-25, words from tiny shakespeare."""
    rng = random.Random(seed)
    words = (ROOT / "input.txt").read_text().split()

    def text(lo, hi):
        return " ".join(rng.choice(words) for _ in range(rng.randint(lo, hi)))

    return [{"ctx": text(10, 70), "endings": [text(5, 25) for _ in range(4)], "label": rng.randrange(4)}
            for _ in range(n)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--data", help="a HellaSwag jsonl file (default: synthetic examples)")
    p.add_argument("--examples", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16, help="examples per forward pass for the batched scorer")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    try:
        examples = hellaswag.load_examples(args.data) if args.data else synthetic_examples(args.examples)
    except hellaswag.HellaSwagError as e:
        p.error(str(e))
    examples = examples[: args.examples]
    torch.manual_seed(0)
    # the size of train_gpt2.py's cpu preset, with GPT-2's (padded) vocabulary
    model = GPT(GPTConfig(n_layer=4, n_head=4, n_embd=128, vocab_size=50304)).eval()
    rows = [pair for example in examples for pair in hellaswag.render(example)]
    computed = sum(len(ctx) + len(ending) - 1 for ctx, ending in rows)
    needed = sum(len(ending) for _, ending in rows)
    print(f"{len(examples)} examples, model {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
          f"{torch.get_num_threads()} CPU threads, torch {torch.__version__}")
    print(f"logits at {computed} positions (padding aside), of which {needed} ({needed / computed:.0%}) predict an "
          f"ending token: both scorers pay for the lm_head at all of them")

    scorers = {"one example per forward": 1, f"batched, {args.batch_size} per forward": args.batch_size}
    hellaswag.predict(model, examples[:2], device="cpu", batch_size=2)  # warm-up: first-call allocations
    best, predictions = {name: float("inf") for name in scorers}, {}
    for _ in range(args.repeats):
        for name, batch_size in scorers.items():
            t0 = time.perf_counter()
            predictions[name] = hellaswag.predict(model, examples, device="cpu", batch_size=batch_size)
            best[name] = min(best[name], time.perf_counter() - t0)
    assert len(set(map(tuple, predictions.values()))) == 1, "the scorers disagree"

    baseline = len(examples) / best["one example per forward"]
    print(f"{'scorer':<28} {'examples/s':>10} {'speedup':>8}")
    for name, seconds in best.items():
        print(f"{name:<28} {len(examples) / seconds:>10.1f} {len(examples) / seconds / baseline:>7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
