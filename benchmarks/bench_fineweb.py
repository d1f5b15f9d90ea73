"""
Tokenizing throughput and peak memory, side by side on the same cores and corpus:

  fineweb.py   batches of documents per task, read by the workers themselves, shards saved on a background thread
  lecture      the GPT-2 reproduction lecture's loop: a process pool encoding one document per task (imap,
               chunksize 16), each turned into a numpy array, shards saved in the loop
  limit        what the cores could do at best: cores x tiktoken's single-process encode_ordinary throughput

    python benchmarks/bench_fineweb.py                  # 200 MB corpus, all cores, best of 3 rounds
    python benchmarks/bench_fineweb.py --megabytes 50 --rounds 1

Each way runs in its own process; tokens/s comes from that process's clock (from loading the corpus to the last shard
on disk, interpreter start-up excluded), tokens per CPU-second from the CPU time of the process and its workers (less
sensitive to other load on the machine than tokens/s), peak memory is the largest sum of anonymous PSS over the process
and its workers (what they allocate, not the page cache of the memory-mapped corpus; sampled every 50 ms; Linux only).
The best of several rounds is shown: other load on the machine can only slow a round down.
"""

import argparse
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from datasets import load_dataset

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the product, and the lecture's loop (the tests' oracle)
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT.parent / "shared" / "tiktoken"))  # offline machines
import fineweb  # noqa: E402  (after the path and the tokenizer cache are set)
from reference import lecture_shards  # noqa: E402

enc = fineweb.enc

# ---- the corpus: English-like web pages made from tiny Shakespeare's words


def make_corpus(path: Path, megabytes: float, seed: int = 0) -> None:
    """Sentences of Shakespeare's words, with names, numbers and punctuation mixed in as web text has them, grouped in
    paragraphs; page lengths log-normal (median ~2,400 characters, from a line to 60,000) like web documents."""
    rng = random.Random(seed)
    words = [w.lower() for w in re.findall(r"[A-Za-z']+", (ROOT / "input.txt").read_text())]
    syllables = "an ber co di el fra gen hy io jun ka lor mi neo ox pra qui ros ste tri ul vec wan xy zo".split()

    def word() -> str:
        r = rng.random()
        if r < 0.06:  # a name or a term the tokenizer has never seen whole
            return "".join(rng.choices(syllables, k=rng.randint(2, 5))).capitalize()
        if r < 0.08:
            return str(rng.choice([rng.randint(1, 100), rng.randint(1800, 2030), round(rng.uniform(0, 1000), 2)]))
        return rng.choice(words)

    def sentence() -> str:
        ws = [word() for _ in range(rng.randint(4, 28))]
        for i in range(1, len(ws) - 1):
            ws[i] = rng.choices([ws[i], ws[i] + ",", f"({ws[i]})", f'"{ws[i]}"'], weights=[92, 6, 1, 1])[0]
        return ws[0].capitalize() + " " + " ".join(ws[1:]) + rng.choice(".....?!:")

    sentences = [sentence() for _ in range(50_000)]  # a pool to draw from: generating every sentence is slow
    with open(path, "w", encoding="utf-8") as f:
        written = 0
        while written < megabytes * 1e6:
            length, paragraphs = min(60_000, rng.lognormvariate(7.8, 1.0)), []
            while sum(map(len, paragraphs)) < length:
                paragraphs.append(" ".join(rng.choices(sentences, k=rng.randint(2, 8))))
            written += f.write(json.dumps({"text": "\n\n".join(paragraphs)}) + "\n")


# ---- the three ways, each run in a child process: `bench_fineweb.py --way NAME ...` prints its figures


def cpu_seconds() -> float:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime  # children: the workers, once joined


class Clock:
    def __enter__(self):
        self.seconds, self.cpu_seconds = -time.perf_counter(), -cpu_seconds()
        return self

    def __exit__(self, *exc):
        self.seconds += time.perf_counter()
        self.cpu_seconds += cpu_seconds()


def ours(corpus: Path, out: Path, workers: int, shard_size: int) -> tuple[int, Clock]:
    argv = ["--files", str(corpus), "--out", str(out), "--shard-size", str(shard_size), "--workers", str(workers)]
    with Clock() as clock:
        assert fineweb.main(argv) == 0
    return json.loads((out / "manifest.json").read_text())["tokens"], clock


def lecture(corpus: Path, out: Path, workers: int, shard_size: int) -> tuple[int, Clock]:
    """The lecture's fineweb.py loop, with its dataset and folder swapped for ours."""
    with Clock() as clock:
        total = lecture_shards(corpus, out, workers, shard_size)
    return total, clock


def limit(corpus: Path, out: Path, workers: int, shard_size: int) -> tuple[int, Clock]:
    """encode_ordinary over every document in one process, texts already in memory; an EOT each, as the others."""
    texts = load_dataset("json", data_files=[str(corpus)], split="train")["text"]
    with Clock() as clock:
        tokens = sum(len(enc.encode_ordinary(text)) + 1 for text in texts)
    clock.seconds /= workers  # the limit: every core as fast as one alone
    return tokens, clock


def run_way(args: argparse.Namespace) -> None:
    tokens, clock = {"ours": ours, "lecture": lecture, "limit": limit}[args.way](
        args.corpus, args.out, args.workers, args.shard_size
    )
    print(json.dumps({"tokens": tokens, "seconds": clock.seconds, "cpu_seconds": clock.cpu_seconds}))


# ---- measuring


def process_tree(pid: int) -> list[int]:
    pids, i = [pid], 0
    while i < len(pids):
        for task in Path(f"/proc/{pids[i]}/task").glob("*"):
            pids += [int(child) for child in (task / "children").read_text().split()]
        i += 1
    return pids


def tree_pss_mb(pid: int) -> float:
    """Anonymous proportional set size of a process and its descendants: pages shared after fork counted once."""
    total_kb = 0
    try:
        for p in process_tree(pid):
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
            total_kb += int(re.search(r"^Pss_Anon:\s+(\d+) kB", rollup, re.M).group(1))
    except (OSError, AttributeError):  # a process ended while we looked: this sample is partial, the next is not
        pass
    return total_kb / 1024


def measure(way: str, corpus: Path, out: Path, workers: int, shard_size: int, env: dict) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--way",
        way,
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--workers",
        str(workers),
        "--shard-size",
        str(shard_size),
    ]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    peak = 0.0
    while child.poll() is None:
        if Path("/proc").is_dir():
            peak = max(peak, tree_pss_mb(child.pid))
        time.sleep(0.05)
    assert child.returncode == 0, f"{way} failed"
    result = json.loads(child.stdout.read().splitlines()[-1])
    return {
        "tokens/s": result["tokens"] / result["seconds"],
        "tokens/CPU-s": result["tokens"] / result["cpu_seconds"],
        "peak MB": peak or None,
        "tokens": result["tokens"],
    }


def same_shards(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.glob("*.npy"))
    return names == sorted(p.name for p in b.glob("*.npy")) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names
    )


def compare(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = tmp / "corpus.jsonl"
        make_corpus(corpus, args.megabytes)
        # datasets' Arrow copy of the corpus goes in our temporary folder, made once here, untimed, for all ways
        env = os.environ | {"HF_DATASETS_CACHE": str(tmp / "hf_cache")}
        load_dataset("json", data_files=[str(corpus)], split="train", cache_dir=str(tmp / "hf_cache"))
        best: dict[str, dict] = {}
        for round_ in range(args.rounds):
            for way in ["limit", "ours", "lecture"]:
                out = tmp / f"{way}_{round_}"
                result = measure(way, corpus, out, args.workers, args.shard_size, env)
                if way not in best or result["tokens/s"] > best[way]["tokens/s"]:
                    best[way] = result
        identical = same_shards(tmp / "ours_0", tmp / "lecture_0")
        tokens = best["ours"]["tokens"]
        print(
            f"corpus: {corpus.stat().st_size / 1e6:.0f} MB of JSON lines, {tokens:,} tokens; {args.workers} workers "
            f"on {os.cpu_count()} cores; shards of {args.shard_size:,} tokens; best of {args.rounds} rounds "
            f"(1-minute load average at the end: {os.getloadavg()[0]:.1f})"
        )

    ceiling = best["limit"]["tokens/s"]
    print(f"{'':42s}{'tokens/s':>12s}{'of limit':>10s}{'tokens/CPU-s':>14s}{'peak memory':>14s}")
    rows = [
        ("limit: cores x 1-process encode_ordinary", "limit"),
        ("fineweb.py", "ours"),
        ("lecture: pool.imap, one document a task", "lecture"),
    ]
    for label, way in rows:
        figures, peak = best[way], best[way]["peak MB"]
        memory = "-" if way == "limit" else (f"{peak:,.0f} MB" if peak else "n/a")
        print(
            f"{label:42s}{figures['tokens/s'] / 1e6:>10.2f} M{figures['tokens/s'] / ceiling:>10.0%}"
            f"{figures['tokens/CPU-s'] / 1e6:>12.2f} M{memory:>14s}"
        )
    print(
        f"fineweb.py / lecture: {best['ours']['tokens/s'] / best['lecture']['tokens/s']:.2f}x; "
        f"per core: {best['ours']['tokens/s'] / args.workers / 1e6:.2f} M tokens/s; "
        f"shards byte-identical to the lecture's: {'yes' if identical else 'NO'}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=200, help="size of the generated corpus")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--shard-size", type=int, default=10**7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--way", choices=["ours", "lecture", "limit"], help=argparse.SUPPRESS)  # one child's run
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    cli = parser.parse_args()
    run_way(cli) if cli.way else compare(cli)
