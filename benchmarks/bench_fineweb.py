"""
Tokenizing throughput and peak memory, side by side on the same cores and corpus:

  fineweb.py   batches of documents per task, read by the workers themselves, shards saved on a
               background thread (the corpus's JSON lines read as its documents)
  lecture      the GPT-2 reproduction lecture's loop: a process pool encoding one document per
               task (imap, chunksize 16), each turned into a numpy array, shards saved in the loop
  limit        what the cores could do at best: cores x tiktoken's single-process
               encode_ordinary throughput
  parent       fineweb.py's parent alone: its workers hand back batches tokenized before the clock
               started, so tokens/s is the most the parent can take in (receive, copy into shards,
               save, hash) however many cores tokenize for it

    python benchmarks/bench_fineweb.py                  # 200 MB corpus, all cores, best of 3 rounds
    python benchmarks/bench_fineweb.py --megabytes 50 --rounds 1

Each way runs in its own process; tokens/s comes from that process's clock (from loading the corpus
to the last shard on disk, interpreter start-up excluded), tokens per CPU-second from the CPU time
of the process and its workers (less sensitive to other load on the machine than tokens/s), peak
memory is the largest sum of anonymous PSS over the process and its workers (what they allocate, not
the page cache of the memory-mapped corpus; sampled every 50 ms; Linux only). "Per core" is
fineweb.py's tokens per CPU-second of its workers alone: what each core of a bigger machine adds, as
long as the parent keeps up. The best of several rounds is shown: other load on the machine can only
slow a round down.
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
import threading
import time
from pathlib import Path

from datasets import load_dataset

ROOT = Path(__file__).resolve().parents[1]
# the product, and the lecture's loop (the tests' oracle)
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
# tiktoken's files from the shared cache: the machines may be offline
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT.parent / "shared" / "tiktoken"))
import fineweb  # noqa: E402  (after the path and the tokenizer cache are set)
from reference import lecture_shards  # noqa: E402

enc = fineweb.enc

# ---- the corpus: English-like web pages made from tiny Shakespeare's words


def make_corpus(path: Path, megabytes: float, seed: int = 0) -> None:
    """Sentences of Shakespeare's words, with names, numbers and punctuation mixed in as web text
    has them, grouped in paragraphs; page lengths log-normal (median ~2,400 characters, from a line
    to 60,000) like web documents."""
    rng = random.Random(seed)
    words = [w.lower() for w in re.findall(r"[A-Za-z']+", (ROOT / "input.txt").read_text())]
    syllables = (
        "an ber co di el fra gen hy io jun ka lor mi neo ox pra qui ros ste tri ul vec wan xy zo"
    ).split()

    def word() -> str:
        r = rng.random()
        if r < 0.06:  # a name or a term the tokenizer has never seen whole
            return "".join(rng.choices(syllables, k=rng.randint(2, 5))).capitalize()
        if r < 0.08:
            return str(
                rng.choice(
                    [rng.randint(1, 100), rng.randint(1800, 2030), round(rng.uniform(0, 1000), 2)]
                )
            )
        return rng.choice(words)

    def sentence() -> str:
        ws = [word() for _ in range(rng.randint(4, 28))]
        for i in range(1, len(ws) - 1):
            ws[i] = rng.choices(
                [ws[i], ws[i] + ",", f"({ws[i]})", f'"{ws[i]}"'], weights=[92, 6, 1, 1]
            )[0]
        return ws[0].capitalize() + " " + " ".join(ws[1:]) + rng.choice(".....?!:")

    # a pool to draw from: generating every sentence is slow
    sentences = [sentence() for _ in range(50_000)]
    with open(path, "w", encoding="utf-8") as f:
        written = 0
        while written < megabytes * 1e6:
            length, paragraphs = min(60_000, rng.lognormvariate(7.8, 1.0)), []
            while sum(map(len, paragraphs)) < length:
                paragraphs.append(" ".join(rng.choices(sentences, k=rng.randint(2, 8))))
            written += f.write(json.dumps({"text": "\n\n".join(paragraphs)}) + "\n")


# ---- the ways, each run in a child process: `bench_fineweb.py --way NAME ...` prints its figures


def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def thread_cpu_seconds() -> dict[int, float]:
    """The CPU time of each thread of this process so far, by thread id (Linux; elsewhere none)."""
    seconds = {}
    for task in Path("/proc/self/task").glob("*"):
        try:
            # the fields after the command's name
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended while we looked
            continue
        # utime + stime
        seconds[int(task.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return seconds


class Clock:
    """Wall time, the CPU time of this process (every thread) and of its children (the workers, once
    joined), and that of this process's busiest thread, and of its shard-saving threads taken
    together: sampled every 20 ms, since a thread's own figure goes when it ends."""

    def __enter__(self):
        self.seconds = -time.perf_counter()
        self.parent_cpu = -cpu_seconds(resource.RUSAGE_SELF)
        self.workers_cpu = -cpu_seconds(resource.RUSAGE_CHILDREN)
        self._before, self._threads, self._names = thread_cpu_seconds(), {}, {}
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample)
        self._sampler.start()
        return self

    def _sample(self):
        while not self._done.wait(0.02):
            self._threads |= thread_cpu_seconds()
            self._names |= {thread.native_id: thread.name for thread in threading.enumerate()}

    def __exit__(self, *exc):
        self.seconds += time.perf_counter()
        self.parent_cpu += cpu_seconds(resource.RUSAGE_SELF)
        self.workers_cpu += cpu_seconds(resource.RUSAGE_CHILDREN)
        self._done.set()
        self._sampler.join()
        used = {tid: cpu - self._before.get(tid, 0.0) for tid, cpu in self._threads.items()}
        used.pop(self._sampler.native_id, None)
        # fineweb's writer
        saving = [tid for tid in used if self._names.get(tid, "").startswith("ThreadPoolExecutor")]
        self.saving_cpu = sum(used.pop(tid) for tid in saving)
        # of the others: main, receiving the batches, ...
        self.busiest_thread_cpu = max(used.values(), default=None)


def read_jsonl(corpus: Path):
    return load_dataset("json", data_files=[str(corpus)], split="train").select_columns(["text"])


def ours(corpus: Path, out: Path, workers: int, shard_size: int) -> tuple[int, Clock]:
    # fineweb.py reads a .txt file as one document: the many documents of the corpus come from its
    # JSON lines
    fineweb.load_corpus = lambda args: read_jsonl(corpus)
    argv = [
        "--files",
        str(corpus),
        "--out",
        str(out),
        "--shard-size",
        str(shard_size),
        "--workers",
        str(workers),
    ]
    with Clock() as clock:
        assert fineweb.main(argv) == 0
    return json.loads((out / "manifest.json").read_text())["tokens"], clock


def lecture(corpus: Path, out: Path, workers: int, shard_size: int) -> tuple[int, Clock]:
    """The lecture's fineweb.py loop, with its dataset and folder swapped for ours."""
    with Clock() as clock:
        total = lecture_shards(corpus, out, workers, shard_size)
    return total, clock


def limit(corpus: Path, out: Path, workers: int, shard_size: int) -> tuple[int, Clock]:
    """encode_ordinary over every document in one process, texts already in memory; an EOT each, as
    the others."""
    texts = read_jsonl(corpus)["text"]
    with Clock() as clock:
        tokens = sum(len(enc.encode_ordinary(text)) + 1 for text in texts)
    clock.seconds /= workers  # the limit: every core as fast as one alone
    return tokens, clock


BATCHES = []  # the parent way's batches, (tokens, document ends), tokenized before its clock starts


def pretokenized(start: int, stop: int) -> tuple:
    """fineweb.tokenize_rows for the parent way: batch after batch of the corpus, over and over."""
    return BATCHES[start // fineweb.DOCS_PER_TASK % len(BATCHES)]


def parent(corpus: Path, out: Path, workers: int, shard_size: int) -> tuple[int, Clock]:
    """fineweb.py on a corpus of empty documents (enough for --parent-tokens), its forked workers
    answering each task with one of the real corpus's batches: as if tokenizing took no time at
    all."""
    fineweb.corpus_rows = read_jsonl(corpus)
    # whole batches only
    n = len(fineweb.corpus_rows) // fineweb.DOCS_PER_TASK * fineweb.DOCS_PER_TASK
    BATCHES.extend(
        fineweb.tokenize_rows(start, start + fineweb.DOCS_PER_TASK)
        for start in range(0, n, fineweb.DOCS_PER_TASK)
    )
    # write_shards submits this to the workers, which inherit BATCHES
    fineweb.tokenize_rows = pretokenized
    return ours(empty_corpus(corpus), out, workers, shard_size)


def empty_corpus(corpus: Path) -> Path:
    return corpus.with_name("empty.jsonl")


def run_way(args: argparse.Namespace) -> None:
    tokens, clock = {"ours": ours, "lecture": lecture, "limit": limit, "parent": parent}[args.way](
        args.corpus, args.out, args.workers, args.shard_size
    )
    figures = ["seconds", "parent_cpu", "workers_cpu", "busiest_thread_cpu", "saving_cpu"]
    print(json.dumps({"tokens": tokens} | {name: getattr(clock, name) for name in figures}))


# ---- measuring


def process_tree(pid: int) -> list[int]:
    pids, i = [pid], 0
    while i < len(pids):
        for task in Path(f"/proc/{pids[i]}/task").glob("*"):
            pids += [int(child) for child in (task / "children").read_text().split()]
        i += 1
    return pids


def tree_pss_mb(pid: int) -> float:
    """Anonymous proportional set size of a process and its descendants: pages shared after fork
    counted once."""
    total_kb = 0
    try:
        for p in process_tree(pid):
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
            total_kb += int(re.search(r"^Pss_Anon:\s+(\d+) kB", rollup, re.M).group(1))
    except (OSError, AttributeError):
        pass  # a process ended while we looked: this sample is partial, the next is not
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
    child = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    peak = 0.0
    while child.poll() is None:
        if Path("/proc").is_dir():
            peak = max(peak, tree_pss_mb(child.pid))
        time.sleep(0.05)
    assert child.returncode == 0, f"{way} failed"
    result = json.loads(child.stdout.read().splitlines()[-1])
    return {
        "tokens/s": result["tokens"] / result["seconds"],
        "tokens/CPU-s": result["tokens"] / (result["parent_cpu"] + result["workers_cpu"]),
        "tokens/worker-CPU-s": (
            result["tokens"] / result["workers_cpu"] if result["workers_cpu"] else None
        ),
        "parent CPU-s": result["parent_cpu"],
        "busiest thread CPU-s": result["busiest_thread_cpu"],
        "saving CPU-s": result["saving_cpu"],
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
        # datasets' Arrow copy of the corpus goes in our temporary folder, made once here, untimed,
        # for all ways
        env = os.environ | {"HF_DATASETS_CACHE": str(tmp / "hf_cache")}
        load_dataset(
            "json", data_files=[str(corpus)], split="train", cache_dir=str(tmp / "hf_cache")
        )
        best: dict[str, dict] = {}
        for round_ in range(args.rounds):
            for way in ["limit", "ours", "lecture", "parent"]:
                # as many empty documents as make --parent-tokens
                if way == "parent" and round_ == 0:
                    documents = (
                        int(args.parent_tokens)
                        * len(corpus.read_text().splitlines())
                        // best["limit"]["tokens"]
                    )
                    empty_corpus(corpus).write_text('{"text": ""}\n' * max(documents, 1))
                    load_dataset(
                        "json",
                        data_files=[str(empty_corpus(corpus))],
                        cache_dir=str(tmp / "hf_cache"),
                    )
                out = tmp / f"{way}_{round_}"
                result = measure(way, corpus, out, args.workers, args.shard_size, env)
                if way not in best or result["tokens/s"] > best[way]["tokens/s"]:
                    best[way] = result
        identical = same_shards(tmp / "ours_0", tmp / "lecture_0")
        tokens = best["ours"]["tokens"]
        print(
            f"corpus: {corpus.stat().st_size / 1e6:.0f} MB of JSON lines, {tokens:,} tokens; "
            f"{args.workers} workers on {os.cpu_count()} cores; "
            f"shards of {args.shard_size:,} tokens; best of {args.rounds} rounds "
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
        f"shards byte-identical to the lecture's: {'yes' if identical else 'NO'}"
    )
    ours_, parent_ = best["ours"], best["parent"]
    per_core = ours_["tokens/worker-CPU-s"]
    print(
        f"per core: {per_core / 1e6:.2f} M tokens per worker CPU-second; the parent spent "
        f"{ours_['parent CPU-s'] / ours_['tokens'] * 1e9:.1f} CPU-s per billion tokens"
    )
    per_billion = 1e9 / parent_["tokens"]
    # one thread saves the shards
    slowest = max(parent_["busiest thread CPU-s"], parent_["saving CPU-s"])
    cap = parent_["tokens"] / slowest
    busiest = parent_["busiest thread CPU-s"] * per_billion
    saving = parent_["saving CPU-s"] * per_billion
    print(
        f"parent alone (workers answering at once, {parent_['tokens']:,} tokens): "
        f"{parent_['tokens/s'] / 1e6:.0f} M tokens/s here; CPU-s per billion tokens: "
        f"its busiest thread {busiest:.2f}, its saving thread {saving:.2f}"
    )
    print(
        f"parent's cap, with a core for each of its threads: {cap / 1e6:.0f} M tokens/s "
        f"= the output of {cap / per_core:.0f} cores at the rate per core"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--megabytes", type=float, default=200, help="size of the generated corpus")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--shard-size", type=int, default=10**7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--parent-tokens", type=float, default=2e9, help="tokens the parent way takes in"
    )
    parser.add_argument(
        "--way", choices=["ours", "lecture", "limit", "parent"], help=argparse.SUPPRESS
    )  # one child's run
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    cli = parser.parse_args()
    run_way(cli) if cli.way else compare(cli)
