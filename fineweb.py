"""
Tokenize FineWeb-Edu's sample-10BT with GPT-2's tokenizer into uint16 .npy shards, ready for
train_gpt2.py.

    python fineweb.py            # 10B tokens from the HF Hub: 100 shards of 100M in edu_fineweb10B/
    python fineweb.py --verify   # check every shard in edu_fineweb10B/ against its manifest
    python fineweb.py --files input.txt --out shakespeare_shards --shard-size 100000   # offline

Every document is preceded by <|endoftext|> and the token stream is cut into shards of exactly
--shard-size tokens (the last one shorter), so a document may straddle two shards. The first shard
is validation, the rest are train. A manifest.json beside the shards records the settings and each
shard's size, document count and sha256. A run that was interrupted (Ctrl-C, SIGTERM, kill -9, a
full disk) picks up after its last complete shard and writes the same bytes an uninterrupted run
would have. Ctrl-C or SIGTERM stop it cleanly (the shard being saved is finished), and one run at a
time writes a folder: a second one is refused while the first holds OUT/.lock.
"""

import glob
import itertools
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np
import tiktoken
from datasets import load_dataset
from tqdm import tqdm

from longrun.common import (
    EOT,
    ArgumentParser,
    UserError,
    count,
    lock_folder,
    run_cli,
    sha256_file,
    write_atomically,
)
from longrun.manifest import read_manifest, shard_problems

FINEWEB = "HuggingFaceFW/fineweb-edu"
# FineWeb-Edu documents average ~1,000 tokens, so a task of 256 is ~250k tokens for a worker: long
# enough that the parent's cost per task (one round trip, one copy of the tokens) is noise, short
# enough to keep every core busy
DOCS_PER_TASK = 256

# ---- tokenizer

enc = tiktoken.get_encoding("gpt2")
assert enc.eot_token == EOT, "every document starts with <|endoftext|>"
assert enc.n_vocab <= 2**16, "uint16 shards need every token id below 65536"

# ---- command line


def parse_args(argv):
    parser = ArgumentParser(
        prog="fineweb.py",
        description="Tokenize FineWeb-Edu (or local text files) into uint16 .npy shards.",
    )
    source = parser.add_argument_group(
        "source (default: FineWeb-Edu sample-10BT, train split, from the HF Hub)"
    )
    source.add_argument(
        "--files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="local .txt files (one document each) instead of FineWeb-Edu",
    )
    output = parser.add_argument_group("output")
    output.add_argument(
        "--out",
        type=Path,
        default=Path("edu_fineweb10B"),
        metavar="DIR",
        help="folder for the shards and manifest.json (default: edu_fineweb10B)",
    )
    output.add_argument(
        "--shard-size",
        type=count,
        default=10**8,
        metavar="N",
        help="tokens per shard (default: 1e8, 200 MB)",
    )
    parser.add_argument(
        "--workers",
        type=count,
        default=os.cpu_count() or 1,
        metavar="N",
        help="tokenizer processes (default: one per core)",
    )
    parser.add_argument(
        "--verify", action="store_true", help="check the shards in --out against manifest.json"
    )
    args = parser.parse_args(argv)
    for path in args.files or []:
        # datasets would say "Unable to find", or read an escaped name as no rows at all
        if not path.is_file():
            parser.error(f"argument --files: {path}: no such file")
    return args


# ---- reading the corpus


def describe(args):
    if args.files:
        return str(args.files[0]) + (
            f" (and {len(args.files) - 1} more files)" if len(args.files) > 1 else ""
        )
    return f"{FINEWEB} (sample-10BT, train)"


def load_corpus(args):
    """The corpus as a datasets.Dataset: Arrow files memory-mapped from disk, so a worker can read
    any rows by index (the parent never touches the text) and a resumed run seeks straight to its
    document."""
    if args.files:
        # datasets reads data_files as glob patterns: escaped, a name (a[1].txt, b*.txt) is the one
        # file it names
        source = dict(
            path="text",
            data_files=[glob.escape(str(f)) for f in args.files],
            sample_by="document",
            split="train",
        )
    else:
        source = dict(path=FINEWEB, name="sample-10BT", split="train")
    return load_dataset(**source).select_columns(["text"])


# ---- what the shards are made of


def source_settings(args, documents):
    """Everything that decides the shards' bytes. One folder holds the shards of one set of settings
    only."""
    if args.files:
        # each file with its size: a file that grew or shrank since is refused, not mixed in on a
        # resume
        source = {"files": {str(f.resolve()): f.stat().st_size for f in args.files}}
    else:
        source = {"dataset": FINEWEB, "name": "sample-10BT", "split": "train"}
    return source | {
        "documents_in_source": documents,
        "tokenizer": enc.name,
        "shard_size": args.shard_size,
    }


# ---- tokenizing: each worker encodes whole batches of documents, the parent takes the batches in
# order

corpus_rows = None  # each worker's handle on the corpus, set once by init_worker
folder_lock = None  # the lock on --out that the parent holds while it runs (see prepare)


def drop_folder_lock():
    """In a forked child, at once: a worker shares the parent's lock (the lock belongs to the open
    file, which fork copies), and a parent killed with -9 would leave the folder locked until its
    last worker exits. At fork, not in init_worker: a busy machine can be slow to run a worker."""
    if folder_lock is not None:
        folder_lock.close()


os.register_at_fork(after_in_child=drop_folder_lock)


def init_worker(corpus):
    global corpus_rows
    corpus_rows = corpus
    # Ctrl-C reaches every process of the terminal's job: the parent alone handles it, finishing the
    # shard it is saving and then stopping the workers. SIGTERM gets its default back (a forked
    # worker inherits the parent's handler): it is how the pool stops a worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=exit_with_parent, daemon=True).start()


def exit_with_parent():
    # a parent killed outright (kill -9, the OOM killer) cannot stop its workers, which would wait
    # for work forever
    multiprocessing.parent_process().join()
    os._exit(1)


def tokenize_rows(start, stop):
    """Tokens of documents [start, stop), each preceded by EOT, and where each document's tokens
    end."""
    # the text, the only column load_corpus kept
    texts = corpus_rows[start:stop][corpus_rows.column_names[0]]
    # so that a batch of empty documents concatenates to no tokens
    pieces = [np.empty(0, dtype=np.uint32)]
    lengths = np.zeros(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        # empty (or null) documents are skipped, not even an EOT: they are counted as read, nothing
        # more
        if text:
            # = encode_ordinary (disallowed_special=() makes an "<|endoftext|>" in the text plain
            # text) without building a Python list of ints: less work. Arrow decoded the texts from
            # UTF-8, so encode_ordinary's fix-up for lone surrogates is never needed.
            # encode_ordinary_batch's threads would compete with our processes.
            ids = enc.encode_to_numpy(text, disallowed_special=())
            pieces += [np.array([EOT], dtype=np.uint32), ids]
            lengths[i] = 1 + len(ids)
    return np.concatenate(pieces).astype(np.uint16), np.cumsum(lengths)


def tokenized_batches(pool, first, stop, in_flight):
    """(first document, tokens, document ends) of each batch, in corpus order. At most `in_flight`
    batches are queued: enough that the workers stay busy while the parent copies tokens, few enough
    that memory stays bounded."""
    starts = iter(range(first, stop, DOCS_PER_TASK))
    queued = deque()
    while True:
        while len(queued) < in_flight and (start := next(starts, None)) is not None:
            queued.append(
                (start, pool.submit(tokenize_rows, start, min(start + DOCS_PER_TASK, stop)))
            )
        if not queued:
            return
        start, batch = queued.popleft()
        yield start, *batch.result()


def corpus_position(start, ends, pos):
    """Where token `pos` of a batch (documents from `start`, document i ending at ends[i]) lies in
    the corpus: (document index, how many of that document's tokens come before it)."""
    i = int(np.searchsorted(ends, pos, side="right"))  # the first document that does not end by pos
    return start + i, pos - (int(ends[i - 1]) if i else 0)


# ---- the manifest: what is in the folder, so that a rerun knows where to pick up


def write_manifest(out, manifest):
    write_atomically(
        out / "manifest.json", lambda f: f.write(json.dumps(manifest, indent=1).encode())
    )


# ---- writing shards (on a background thread, so tokenizing never waits for the disk)


def save_shard(out, manifest, tokens, entry):
    """The shard first, then the manifest entry that makes it count: a crash in between only costs a
    rewrite."""
    path = out / entry["file"]
    write_atomically(path, lambda f: np.save(f, tokens))
    # encode_ordinary never emits EOT, so each EOT in a shard is one document starting there
    entry.update(documents=int(np.count_nonzero(tokens == EOT)), sha256=sha256_file(path))
    manifest["shards"].append(entry)
    write_manifest(out, manifest)


class ShardBuffer:
    """The shard being filled. A full one goes to the writer thread, and filling goes on in a fresh
    buffer."""

    def __init__(self, out, manifest, writer):
        self.out, self.manifest, self.writer = out, manifest, writer
        self.settings = manifest["settings"]
        self.index = len(manifest["shards"])
        self.tokens = np.empty(self.settings["shard_size"], dtype=np.uint16)
        self.fill = 0
        self.saving = None  # the previous shard's save, maybe still running

    def take(self, tokens):
        n = min(len(tokens), len(self.tokens) - self.fill)
        self.tokens[self.fill : self.fill + n] = tokens[:n]
        self.fill += n
        return n

    def full(self):
        return self.fill == len(self.tokens)

    def save(self, resume_at):
        """Save the shard; `resume_at` is the corpus position right after its last token, where a
        rerun starts."""
        self.wait()  # one shard saving at a time, so memory holds two shards at most
        split = "val" if self.index == 0 else "train"  # the first shard is validation
        entry = {
            "file": f"edufineweb_{split}_{self.index:06d}.npy",
            "tokens": self.fill,
            "resume_at": {"document": resume_at[0], "token": resume_at[1]},
        }
        if self.index == 0:  # the manifest first: the folder is the run's before any shard is saved
            write_manifest(self.out, self.manifest)
        self.saving = self.writer.submit(
            save_shard, self.out, self.manifest, self.tokens[: self.fill], entry
        )
        self.index += 1
        self.tokens, self.fill = np.empty_like(self.tokens), 0

    def wait(self):
        if self.saving:
            self.saving.result()  # raises here what the save raised there (a full disk, say)


# ---- the run


def open_manifest(out, settings):
    """The manifest to continue: the folder's own if it was made with our settings, or a fresh one
    for an unused folder."""
    manifest = read_manifest(out)
    if manifest is None:
        if any(out.glob("edufineweb_*.npy")):
            raise UserError(
                f"{out} holds shards but no manifest.json (written by another tool?): choose "
                "another --out or empty it"
            )
        return {"settings": settings, "complete": False, "shards": []}
    if manifest["settings"] != settings:
        differ = sorted(
            k
            for k in settings.keys() | manifest["settings"].keys()
            if settings.get(k) != manifest["settings"].get(k)
        )
        raise UserError(
            f"{out} holds shards of other settings ({', '.join(differ)} differ): "
            f"choose another --out, or delete {out} to start over"
        )
    # a deleted shard (one --verify flagged, say) is rebuilt, and every shard after it
    kept = list(
        itertools.takewhile(lambda shard: (out / shard["file"]).exists(), manifest["shards"])
    )
    if len(kept) < len(manifest["shards"]):
        manifest.update(shards=kept, complete=False)
    return manifest


def write_shards(args, corpus, manifest):
    """Tokenize the corpus from where the manifest's last shard ended; return how many documents
    were read."""
    done = manifest["shards"]
    resume = done[-1]["resume_at"] if done else {"document": 0, "token": 0}
    document, skip = resume["document"], resume["token"]
    written = sum(shard["tokens"] for shard in done)
    end = (len(corpus), 0)  # where reading stops
    with (
        ProcessPoolExecutor(args.workers, initializer=init_worker, initargs=(corpus,)) as pool,
        ThreadPoolExecutor(max_workers=1) as writer,
        tqdm(total=end[0], initial=document, unit="doc", desc="documents") as docs_bar,
        tqdm(initial=written, unit="tok", unit_scale=True, desc="tokens") as tokens_bar,
    ):
        shard = ShardBuffer(args.out, manifest, writer)
        for start, tokens, ends in tokenized_batches(
            pool, document, end[0], in_flight=2 * args.workers
        ):
            # a resumed run drops what its first document already put in the last shard
            begin, skip = skip, 0
            pos = begin
            while pos < len(tokens):
                pos += shard.take(tokens[pos:])
                if shard.full():
                    shard.save(resume_at=corpus_position(start, ends, pos))
            docs_bar.update(len(ends))
            tokens_bar.update(pos - begin)
        if shard.fill:
            shard.save(resume_at=end)  # the last shard, shorter than the others
        shard.wait()
    return end[0]


def prepare(args):
    corpus = load_corpus(args)
    args.out.mkdir(parents=True, exist_ok=True)
    # one run per folder: two would append to one manifest, each with its own idea of the next shard
    global folder_lock
    with lock_folder(args.out) as folder_lock:
        manifest = open_manifest(args.out, source_settings(args, len(corpus)))
        return finish(args, corpus, manifest)


def finish(args, corpus, manifest):
    """Write the shards the manifest does not have yet, then mark it complete."""
    shards = manifest["shards"]
    if manifest["complete"]:
        print(
            f"nothing to do: {args.out} already holds all {len(shards)} shards of these settings "
            f"({manifest['tokens']:,} tokens); --verify checks them"
        )
        return 0
    if shards:
        resume = shards[-1]["resume_at"]
        print(
            f"resuming after {shards[-1]['file']}, at token {resume['token']:,} of document "
            f"{resume['document']:,}"
        )
    else:
        print(f"tokenizing {describe(args)} into {args.out} with {args.workers} workers")
    shards_before, tokens_before, started = (
        len(shards),
        sum(s["tokens"] for s in shards),
        time.time(),
    )
    documents_read = write_shards(args, corpus, manifest)
    elapsed = time.time() - started
    tokens, documents = sum(s["tokens"] for s in shards), sum(s["documents"] for s in shards)
    manifest.update(
        complete=True,
        tokens=tokens,
        documents=documents,
        empty_documents=documents_read - documents,
    )
    write_manifest(args.out, manifest)
    print(
        f"{args.out}: {len(shards)} shards, {tokens:,} tokens; documents: {documents:,} tokenized, "
        f"{documents_read - documents:,} empty skipped"
    )
    print(
        f"this run: {len(shards) - shards_before} shards, {tokens - tokens_before:,} tokens in "
        f"{elapsed:.1f} s "
        f"= {(tokens - tokens_before) / elapsed:,.0f} tokens/s with {args.workers} workers"
    )
    return 0


# ---- verifying


def verify(out):
    if not out.is_dir():
        raise UserError(f"{out}: no such folder, nothing to verify")
    manifest = read_manifest(out)
    if manifest is None:
        raise UserError(
            f"{out} holds no manifest.json (not a folder fineweb.py wrote): nothing to verify"
        )
    shards = manifest["shards"]
    bad = 0
    for shard in tqdm(shards, unit="shard", desc="verifying"):
        if problems := shard_problems(out / shard["file"], shard):
            print(f"BAD {out / shard['file']}: {'; '.join(problems)}")
            bad += 1
    if bad:
        print(
            f"{bad} of {len(shards)} shards are bad: delete them and rerun the same command to "
            "rebuild them"
        )
        return 1
    state = (
        "complete" if manifest["complete"] else "unfinished: rerun the same command to finish it"
    )
    print(f"all {len(shards)} shards in {out} match manifest.json; the run is {state}")
    return 0


def terminate(signum, frame):
    raise KeyboardInterrupt  # SIGTERM (kill, a job scheduler) stops a run as Ctrl-C does


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, terminate)
    resume = "rerun the same command to resume"
    try:
        return run_cli(
            "fineweb.py",
            lambda: verify(args.out) if args.verify else prepare(args),
            "a smaller --shard-size",
        )
    except KeyboardInterrupt:
        # the with-blocks on the way out finished the shard being saved and stopped the workers
        print(f"interrupted: {resume}", file=sys.stderr)
        return 130
    except BrokenProcessPool:
        print(
            f"fineweb.py: error: a tokenizer process died (out of memory? killed?): {resume}",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # a must: with spawn (macOS, Windows) every worker imports this file
    sys.exit(main())
