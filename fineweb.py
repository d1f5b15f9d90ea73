"""
Tokenize a text corpus with GPT-2's tokenizer into uint16 .npy shards, ready for train_gpt2.py.

    python fineweb.py              # FineWeb-Edu sample-10BT: the reproduction's 10B tokens, in edu_fineweb10B/
    python fineweb.py --verify     # check every shard in edu_fineweb10B/ against its manifest
    python fineweb.py --files input.txt --out shakespeare_shards --shard-size 50000    # 1 val + 6 train shards

Every document is preceded by <|endoftext|> (50256) and the token stream is cut into shards of exactly --shard-size
tokens (the last one shorter), so a document may straddle two shards. The first shard is validation
(edufineweb_val_000000.npy), the rest are train (edufineweb_train_000001.npy, ...): token for token the layout of the
GPT-2 reproduction lecture's fineweb.py, so its loader and ours read the same files. Shards of another source are
named after it: input_val_000000.npy from --files input.txt.
A manifest.json beside the shards records the settings, a fingerprint of the source, and each shard's size, document
count and sha256. A run that was interrupted (Ctrl-C, SIGTERM, kill -9, a full disk) picks up after its last complete
shard and writes the same bytes an uninterrupted run would have; a source that changed since is refused, not mixed in.
One run at a time writes a folder: a second one is refused while the first holds OUT/.lock.
"""

import argparse
import itertools
import json
import multiprocessing
import os
import re
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
from tqdm import tqdm

from longrun.common import EOT, ArgumentParser, UserError, count, lock_folder, run_cli, sha256_file, write_atomically
from longrun.corpus import BUILDERS, bad_input, check_source, describe, load_corpus, source_fingerprint
from longrun.manifest import read_manifest, shard_problems

FINEWEB = "HuggingFaceFW/fineweb-edu"


# FineWeb-Edu documents average ~1,000 tokens, so a task of 256 is ~250k tokens for a worker: long enough that the
# parent's cost per task (one round trip, one copy of the tokens) is noise, short enough to keep every core busy
DOCS_PER_TASK = 256
# a shard is filled in memory while the ones before it are saved: 2**31 uint16 tokens is 4 GiB a buffer, 8 GiB for two,
# already more than many machines have. The bound turns a typo (1e12: a MemoryError in np.empty) into a one-line error
MAX_SHARD_SIZE = 2**31
# saving shards (write, fsync, sha256) took 16-17 CPU-s per billion tokens in all on the parent way of
# benchmarks/bench_fineweb.py (a virtual disk; 3.3 in one thread alone, more when threads share cores), the thread
# receiving the workers' batches 1.2-1.4: a saving thread for each 16 workers (12 on a 192-core node) keeps each near
# that, at the price of one more shard in memory for each thread
WORKERS_PER_SAVE = 16


# ---- tokenizer

enc = tiktoken.get_encoding("gpt2")
assert enc.eot_token == EOT, "every document starts with <|endoftext|>"
assert enc.n_vocab <= 2**16, "uint16 shards need every token id below 65536"

# ---- command line


def shard_size(text):
    size = count(text)
    if size > MAX_SHARD_SIZE:
        raise argparse.ArgumentTypeError(f"at most {MAX_SHARD_SIZE:,} tokens (4 GiB in memory per shard), got {text!r}")
    return size


def parse_args(argv):
    parser = ArgumentParser(
        prog="fineweb.py", description="Tokenize a corpus with GPT-2's tokenizer into uint16 .npy shards."
    )
    source = parser.add_argument_group("source (default: FineWeb-Edu sample-10BT, train split, from the HF Hub)")
    source.add_argument("--dataset", default=FINEWEB, metavar="ID", help=f"a Hugging Face dataset (default: {FINEWEB})")
    source.add_argument("--name", metavar="CONFIG", help="its config (default: sample-10BT for FineWeb-Edu)")
    source.add_argument("--split", default="train", help="its split (default: train)")
    source.add_argument(
        "--files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help=f"local files instead of --dataset ({', '.join(BUILDERS)})",
    )
    source.add_argument("--text-field", default="text", metavar="NAME", help="the column with the text (default: text)")
    source.add_argument(
        "--sample-by",
        choices=["document", "paragraph", "line"],
        default="document",
        help=".txt files: one document per file (default), per blank-line paragraph, or per line",
    )
    source.add_argument("--limit-docs", type=count, metavar="N", help="read only the first N documents (a sample)")
    source.add_argument("--limit-tokens", type=count, metavar="N", help="stop after N tokens (a sample)")
    output = parser.add_argument_group("output")
    output.add_argument(
        "--out",
        type=Path,
        default=Path("edu_fineweb10B"),
        metavar="DIR",
        help="folder for the shards and manifest.json (default: edu_fineweb10B)",
    )
    output.add_argument(
        "--prefix",
        help="shard names: PREFIX_val_000000.npy, PREFIX_train_000001.npy, ... (default: edufineweb for FineWeb-Edu, "
        "else the first file's or the dataset's name)",
    )
    output.add_argument(
        "--shard-size",
        type=shard_size,
        default=10**8,
        metavar="N",
        help=f"tokens per shard, at most {MAX_SHARD_SIZE:,} (default: 1e8, 200 MB)",
    )
    output.add_argument(
        "--val-shards",
        type=count,
        default=1,
        metavar="N",
        help="how many of the first shards are validation (default: 1)",
    )
    parser.add_argument(
        "--workers",
        type=count,
        default=os.cpu_count() or 1,
        metavar="N",
        help="tokenizer processes (default: one per core)",
    )
    parser.add_argument("--verify", action="store_true", help="check the shards in --out against manifest.json")
    args = parser.parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"argument --out: {args.out} is a file, not a folder")
    args.prefix = args.prefix or source_name(args)
    if "/" in args.prefix or os.sep in args.prefix:
        parser.error(f"argument --prefix: {args.prefix!r} is a file name's start, not a path")
    if args.name is None and args.dataset == FINEWEB:
        args.name = "sample-10BT"  # 10B GPT-2 tokens: the reproduction's budget
    return args


def source_name(args):
    """The shards' prefix: FineWeb-Edu's keep the lecture's name; others say where they came from, in lower-case
    letters, digits and dashes: a name any shell and file system take as it is."""
    if args.dataset == FINEWEB and not args.files:
        return "edufineweb"
    name = args.files[0].stem if args.files else Path(args.dataset).name  # HuggingFaceFW/fineweb: fineweb
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "shards"


# ---- what the shards are made of: the settings that decide their bytes


def source_settings(args, documents):
    """Everything that decides the shards' bytes. One folder holds the shards of one set of settings only."""
    if args.files:
        source = {"files": [str(f.resolve()) for f in args.files], "sample_by": args.sample_by}
    else:
        source = {"dataset": args.dataset, "name": args.name, "split": args.split}
    return source | {
        "documents_in_source": documents,
        "text_field": args.text_field,
        "tokenizer": enc.name,
        "prefix": args.prefix,
        "shard_size": args.shard_size,
        "val_shards": args.val_shards,
        "limit_docs": args.limit_docs,
        "limit_tokens": args.limit_tokens,
    }


# ---- tokenizing: each worker encodes whole batches of documents, the parent takes the batches in order

corpus_rows = None  # each worker's handle on the corpus, set once by init_worker
folder_lock = None  # the lock on --out the parent holds while it runs (see prepare)


class BadDocument(Exception):
    """A document a worker cannot tokenize; args: its index in the corpus, and what is wrong with it."""


def init_worker(corpus):
    global corpus_rows
    corpus_rows = corpus
    # Ctrl-C reaches every process, and so does a SIGTERM sent to the whole job: the parent handles both (finishing
    # the shard it is saving) and stops the workers. A forked worker would otherwise inherit the parent's handler.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=exit_with_parent, daemon=True).start()
    if folder_lock is not None:
        # a forked worker shares the parent's lock (flock's lock goes with the open file, and fork copies that): let
        # go of it, or the lock outlives a parent killed with -9 until the last worker has exited
        folder_lock.close()


def exit_with_parent():
    # a parent killed outright (kill -9, the OOM killer) cannot stop its workers, which would wait for work forever
    multiprocessing.parent_process().join()
    os._exit(1)


def read_texts(start, stop):
    """The texts of documents [start, stop): str, or None where a row has none."""
    column = corpus_rows.column_names[0]  # the text, the only column load_corpus kept
    try:
        texts = corpus_rows[start:stop][column]
    except UnicodeDecodeError:  # Arrow kept a JSON file's bytes as they were: find the document that is not UTF-8
        for i in range(start, stop):
            try:
                corpus_rows[i]
            except UnicodeDecodeError as e:
                raise BadDocument(i, f"not UTF-8 ({e.reason})") from None
        raise
    for i, text in enumerate(texts, start):
        if not isinstance(text, str | None):  # load_corpus refuses columns that are not text; this is the backstop
            raise BadDocument(i, f"{column!r} is a {type(text).__name__}, not text")
    return texts


def tokenize_rows(start, stop):
    """Tokens of documents [start, stop), each preceded by EOT, and where each document's tokens end."""
    texts = read_texts(start, stop)
    pieces = [np.empty(0, dtype=np.uint32)]  # so that a batch of empty documents concatenates to no tokens
    lengths = np.zeros(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        if text:  # empty (or null) documents are skipped, not even an EOT: they are counted as read, nothing more
            # = encode_ordinary (disallowed_special=() makes an "<|endoftext|>" in the text plain text) without building
            # a Python list of ints: less work. read_texts decoded the texts from UTF-8, so encode_ordinary's fix-up
            # for lone surrogates is never needed. encode_ordinary_batch's threads would compete with our processes.
            ids = enc.encode_to_numpy(text, disallowed_special=())
            pieces += [np.array([EOT], dtype=np.uint32), ids]
            lengths[i] = 1 + len(ids)
    return np.concatenate(pieces).astype(np.uint16), np.cumsum(lengths)


def tokenized_batches(pool, first, stop, in_flight):
    """(first document, tokens, document ends) of each batch, in corpus order. At most `in_flight` batches are queued:
    enough that the workers stay busy while the parent copies tokens, few enough that memory stays bounded."""
    starts = iter(range(first, stop, DOCS_PER_TASK))
    queued = deque()
    while True:
        while len(queued) < in_flight and (start := next(starts, None)) is not None:
            queued.append((start, pool.submit(tokenize_rows, start, min(start + DOCS_PER_TASK, stop))))
        if not queued:
            return
        start, batch = queued.popleft()
        yield start, *batch.result()


def corpus_position(start, ends, pos):
    """Where token `pos` of a batch (documents from `start`, document i ending at ends[i]) lies in the corpus:
    (document index, how many of that document's tokens come before it)."""
    i = int(np.searchsorted(ends, pos, side="right"))  # the first document that does not end by pos
    return start + i, pos - (int(ends[i - 1]) if i else 0)


# ---- the manifest: what is in the folder, so that a rerun knows where to pick up


def write_manifest(out, manifest):
    save_file(out / "manifest.json", lambda f: f.write(json.dumps(manifest, indent=1).encode()))


# ---- writing shards (on a background thread, so tokenizing never waits for the disk)


def save_file(path, write):
    """write_atomically, with the file named in its error: a write that fails on a full disk names no file at all."""
    try:
        write_atomically(path, write)
    except OSError as e:
        e.filename = str(path)  # the file the user knows, not its temporary name
        raise


def save_shard(out, manifest, tokens, entry, previous):
    """The shard first, then the manifest entry that makes it count: a crash in between only costs a rewrite. Shards
    are saved side by side, but entries are added in order: after `previous`, the save of the shard before."""
    path = out / entry["file"]
    save_file(path, lambda f: np.save(f, tokens))
    # encode_ordinary never emits EOT, so each EOT in a shard is one document starting there
    entry.update(documents=int(np.count_nonzero(tokens == EOT)), sha256=sha256_file(path))
    if previous:
        previous.result()  # raises what that save raised (a full disk, say): no entry may follow a missing one
    manifest["shards"].append(entry)
    write_manifest(out, manifest)


class ShardBuffer:
    """The shard being filled. A full one goes to a writer thread, and filling goes on in the buffer of a shard
    already saved (a fresh one while there are fewer than saves + 1)."""

    def __init__(self, out, manifest, writer, saves):
        self.out, self.manifest, self.writer, self.saves = out, manifest, writer, saves
        self.settings = manifest["settings"]
        self.index = len(manifest["shards"])
        self.tokens = np.empty(self.settings["shard_size"], dtype=np.uint16)
        self.fill = 0
        self.saving = deque()  # (save, buffer) of the shards before, oldest first, some saves maybe still running
        self.spare = []  # buffers whose shard is saved, to fill again

    def take(self, tokens):
        n = min(len(tokens), len(self.tokens) - self.fill)
        self.tokens[self.fill : self.fill + n] = tokens[:n]
        self.fill += n
        return n

    def full(self):
        return self.fill == len(self.tokens)

    def save(self, resume_at):
        """Save the shard; `resume_at` is the corpus position right after its last token, where a rerun starts."""
        while len(self.saving) >= self.saves:  # memory holds `saves` shards saving and this one at most
            self.spare.append(self.saved_oldest())
        split = "val" if self.index < self.settings["val_shards"] else "train"
        entry = {
            "file": f"{self.settings['prefix']}_{split}_{self.index:06d}.npy",
            "tokens": self.fill,
            "resume_at": {"document": resume_at[0], "token": resume_at[1]},
        }
        if self.index == 0:  # the manifest first, before any shard lands (side by side, a later one can be first)
            write_manifest(self.out, self.manifest)
        previous = self.saving[-1][0] if self.saving else None  # none left: every shard before is in the manifest
        save = self.writer.submit(save_shard, self.out, self.manifest, self.tokens[: self.fill], entry, previous)
        self.saving.append((save, self.tokens))
        self.index += 1
        # a buffer used before, not a fresh one: the first write to each page of a fresh buffer is a page fault, and
        # with a fresh one for each shard the parent's main thread spent ~3 CPU-s per billion tokens instead of ~1.1
        self.tokens, self.fill = self.spare.pop() if self.spare else np.empty_like(self.tokens), 0

    def saved_oldest(self):
        """Wait for the oldest save; its buffer is free."""
        save, buffer = self.saving.popleft()
        save.result()  # raises here what the save raised there (a full disk, say)
        return buffer

    def wait(self):
        while self.saving:
            self.saved_oldest()


# ---- the run


def open_manifest(out, settings, source):
    """The manifest to continue: the folder's own if it was made with our settings from our source, or a fresh one for
    an unused folder."""
    manifest = read_manifest(out)
    if manifest is None:
        if any(out.glob("*.npy")):  # whatever their names: train_gpt2.py would read them all as one corpus
            raise UserError(
                f"{out} holds shards but no manifest.json (written by another tool?): choose another --out or empty it"
            )
        return {"settings": settings, "source": source, "complete": False, "shards": []}
    if manifest["settings"] != settings:
        differ = sorted(
            k for k in settings.keys() | manifest["settings"].keys() if settings.get(k) != manifest["settings"].get(k)
        )
        # only the prefix differs: name the one that continues the folder
        keep = f"--prefix {manifest['settings'].get('prefix')} to continue it, " if differ == ["prefix"] else ""
        raise UserError(
            f"{out} holds shards of other settings ({', '.join(differ)} differ): "
            f"{keep}choose another --out, or delete {out} to start over"
        )
    check_source(out, manifest.get("source"), source)
    # a deleted shard (one --verify flagged, say) is rebuilt, and every shard after it
    kept = list(itertools.takewhile(lambda shard: (out / shard["file"]).exists(), manifest["shards"]))
    if len(kept) < len(manifest["shards"]):
        manifest.update(shards=kept, complete=False)
    return manifest


def shards_saving(workers):
    """How many shards may be saving at once: one writer thread for each WORKERS_PER_SAVE workers."""
    return -(-workers // WORKERS_PER_SAVE)


def write_shards(args, corpus, manifest):
    """Tokenize the corpus from where the manifest's last shard ended; return how many documents were read."""
    done = manifest["shards"]
    document, skip = (done[-1]["resume_at"]["document"], done[-1]["resume_at"]["token"]) if done else (0, 0)
    written = sum(shard["tokens"] for shard in done)
    tokens_left = (args.limit_tokens or sys.maxsize) - written
    end = (min(len(corpus), args.limit_docs or len(corpus)), 0)  # where reading stops, unless --limit-tokens is first
    saves = shards_saving(args.workers)
    with (
        ProcessPoolExecutor(args.workers, initializer=init_worker, initargs=(corpus,)) as pool,
        ThreadPoolExecutor(max_workers=saves) as writer,
        tqdm(total=end[0], initial=document, unit="doc", desc="documents") as docs_bar,
        tqdm(total=args.limit_tokens, initial=written, unit="tok", unit_scale=True, desc="tokens") as tokens_bar,
    ):
        shard = ShardBuffer(args.out, manifest, writer, saves)
        for start, tokens, ends in tokenized_batches(pool, document, end[0], in_flight=2 * args.workers):
            begin, skip = skip, 0  # a resumed run drops what its first document already put in the last shard
            pos = begin
            while pos < len(tokens) and tokens_left:
                n = shard.take(tokens[pos : pos + tokens_left])
                pos, tokens_left = pos + n, tokens_left - n
                if shard.full():
                    shard.save(resume_at=corpus_position(start, ends, pos))
            docs_bar.update(len(ends))
            tokens_bar.update(pos - begin)
            if not tokens_left:  # --limit-tokens reached, maybe halfway through a document
                end = corpus_position(start, ends, pos)
                break
        if shard.fill:
            shard.save(resume_at=end)  # the last shard, shorter than the others
        shard.wait()
    return end[0] + (end[1] > 0)  # a document cut short by --limit-tokens was read too


def prepare(args):
    corpus = load_corpus(args)
    args.out.mkdir(parents=True, exist_ok=True)
    # one run per folder: two would append to one manifest, each with its own idea of the next shard
    global folder_lock
    with lock_folder(args.out) as folder_lock:
        manifest = open_manifest(args.out, source_settings(args, len(corpus)), source_fingerprint(args, corpus))
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
        print(f"resuming after {shards[-1]['file']}, at token {resume['token']:,} of document {resume['document']:,}")
    else:
        print(f"tokenizing {describe(args)} into {args.out} with {args.workers} workers")
    shards_before, tokens_before, started = len(shards), sum(s["tokens"] for s in shards), time.time()
    try:
        documents_read = write_shards(args, corpus, manifest)
    except BadDocument as e:
        index, problem = e.args
        raise bad_input(args, f"document {index:,} of {describe(args)} (counting from 0): {problem}") from None
    elapsed = time.time() - started
    tokens, documents = sum(s["tokens"] for s in shards), sum(s["documents"] for s in shards)
    if tokens == 0:
        raise UserError(f"empty corpus: all {documents_read:,} documents of {describe(args)} are empty")
    manifest.update(complete=True, tokens=tokens, documents=documents, empty_documents=documents_read - documents)
    write_manifest(args.out, manifest)
    print(
        f"{args.out}: {len(shards)} shards, {tokens:,} tokens; documents: {documents:,} tokenized, "
        f"{documents_read - documents:,} empty skipped"
    )
    print(
        f"this run: {len(shards) - shards_before} shards, {tokens - tokens_before:,} tokens in {elapsed:.1f} s "
        f"= {(tokens - tokens_before) / elapsed:,.0f} tokens/s with {args.workers} workers"
    )
    if len(shards) <= args.val_shards:
        print("note: every token went to validation; a smaller --shard-size leaves some for training", file=sys.stderr)
    return 0


# ---- verifying


def verify(out):
    if not out.is_dir():
        raise UserError(f"{out}: no such folder, nothing to verify")
    manifest = read_manifest(out)
    if manifest is None:
        raise UserError(f"{out} holds no manifest.json (not a folder fineweb.py wrote): nothing to verify")
    shards = manifest["shards"]
    bad = 0
    for shard in tqdm(shards, unit="shard", desc="verifying"):
        if problems := shard_problems(out / shard["file"], shard):
            print(f"BAD {out / shard['file']}: {'; '.join(problems)}")
            bad += 1
    if bad:
        print(f"{bad} of {len(shards)} shards are bad: delete them and rerun the same command to rebuild them")
        return 1
    state = "complete" if manifest["complete"] else "unfinished: rerun the same command to finish it"
    print(f"all {len(shards)} shards in {out} match manifest.json; the run is {state}")
    return 0


# ---- the command line's exits: one line for each way a run can stop early


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, a job scheduler, a container stopping): stopped as Ctrl-C stops a run."""


def terminate(signum, frame):
    raise Terminated


def main(argv=None):
    args = parse_args(argv)
    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        too_big = f"a smaller --shard-size: {shards_saving(args.workers) + 1} shards are held in memory at once"
        return run_cli("fineweb.py", lambda: verify(args.out) if args.verify else prepare(args), too_big)
    except BrokenProcessPool:
        print(
            "fineweb.py: error: a tokenizer process died (out of memory? killed?); rerun the same command to resume",
            file=sys.stderr,
        )
    except KeyboardInterrupt as e:  # the with-blocks on the way out saved the shard in hand and stopped the workers
        print("interrupted: rerun the same command to resume", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 1


if __name__ == "__main__":  # a must: with spawn (macOS, Windows) every worker imports this file
    sys.exit(main())
