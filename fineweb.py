"""
Tokenize a text corpus with GPT-2's tokenizer into uint16 .npy shards, ready for train_gpt2.py.

    python fineweb.py              # FineWeb-Edu sample-10BT: the reproduction's 10B tokens, in edu_fineweb10B/
    python fineweb.py --verify     # check every shard in edu_fineweb10B/ against its manifest
    python fineweb.py --files input.txt --out shakespeare_shards --shard-size 50000    # 1 val + 6 train shards

Every document is preceded by <|endoftext|> (50256) and the token stream is cut into shards of exactly --shard-size
tokens (the last one shorter), so a document may straddle two shards. The first shard is validation
(edufineweb_val_000000.npy), the rest are train (edufineweb_train_000001.npy, ...): token for token the layout of the
GPT-2 reproduction lecture's fineweb.py, so its loader and ours read the same files.
A manifest.json beside the shards records the source and each shard's size, document count and sha256. A run that was
interrupted picks up after its last complete shard and writes the same bytes an uninterrupted run would have.
"""

import argparse
import hashlib
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
from datasets.exceptions import DatasetGenerationError
from tqdm import tqdm

FINEWEB = "HuggingFaceFW/fineweb-edu"
# local files go through datasets' own builders, chosen by extension
BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".txt": "text"}
# FineWeb-Edu documents average ~1,000 tokens, so a task of 256 is ~50 ms of work for a worker: long enough that the
# parent's cost per task (one round trip, one copy of the tokens) is noise, short enough to keep every core busy
DOCS_PER_TASK = 256

# ---- tokenizer

enc = tiktoken.get_encoding("gpt2")
EOT = enc.eot_token  # <|endoftext|> = 50256, the last id: every document starts with it
assert enc.n_vocab <= 2**16, "uint16 shards need every token id below 65536"


class UserError(Exception):
    """Bad input or a folder we must not touch: reported as one line, without a traceback."""


# ---- command line


def count(text: str) -> int:
    value = float(text)  # so that 1e8 works as well as 100000000 and 100_000_000
    if not 1 <= value <= sys.maxsize or value != int(value):
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(value)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Tokenize a corpus with GPT-2's tokenizer into uint16 .npy shards.")
    source = parser.add_argument_group("source (default: FineWeb-Edu sample-10BT, train split, from the HF Hub)")
    source.add_argument("--dataset", default=FINEWEB, metavar="ID", help=f"a Hugging Face dataset (default: {FINEWEB})")
    source.add_argument("--name", metavar="CONFIG", help="its config (default: sample-10BT for FineWeb-Edu)")
    source.add_argument("--split", default="train", help="its split (default: train)")
    source.add_argument("--files", nargs="+", type=Path, metavar="FILE",
                        help=f"local files instead of --dataset ({', '.join(BUILDERS)})")
    source.add_argument("--text-field", default="text", metavar="NAME", help="the column with the text (default: text)")
    source.add_argument("--sample-by", choices=["document", "paragraph", "line"], default="document",
                        help=".txt files: one document per file (default), per blank-line paragraph, or per line")
    source.add_argument("--limit-docs", type=count, metavar="N", help="read only the first N documents (a sample)")
    source.add_argument("--limit-tokens", type=count, metavar="N", help="stop after N tokens (a sample)")
    output = parser.add_argument_group("output")
    output.add_argument("--out", type=Path, default=Path("edu_fineweb10B"), metavar="DIR",
                        help="folder for the shards and manifest.json (default: edu_fineweb10B)")
    output.add_argument("--prefix", default="edufineweb",
                        help="shard names: PREFIX_val_000000.npy, PREFIX_train_000001.npy, ... (default: edufineweb)")
    output.add_argument("--shard-size", type=count, default=10**8, metavar="N",
                        help="tokens per shard (default: 1e8, 200 MB)")
    output.add_argument("--val-shards", type=count, default=1, metavar="N",
                        help="how many of the first shards are validation (default: 1)")
    parser.add_argument("--workers", type=count, default=os.cpu_count() or 1, metavar="N",
                        help="tokenizer processes (default: one per core)")
    parser.add_argument("--verify", action="store_true", help="check the shards in --out against manifest.json")
    args = parser.parse_args(argv)
    if args.name is None and args.dataset == FINEWEB:
        args.name = "sample-10BT"  # 10B GPT-2 tokens: the reproduction's budget
    return args


# ---- reading the corpus


def describe(args: argparse.Namespace) -> str:
    if args.files:
        return str(args.files[0]) + (f" (and {len(args.files) - 1} more files)" if len(args.files) > 1 else "")
    return f"{args.dataset} ({args.name or 'default'}, {args.split})"


def builder_for(files: list[Path]) -> str:
    unknown = [f for f in files if f.suffix not in BUILDERS]
    if unknown:
        raise UserError(f"{unknown[0]}: unknown file type (expected {', '.join(BUILDERS)})")
    builders = {BUILDERS[f.suffix] for f in files}
    if len(builders) > 1:
        raise UserError(f"--files mixes {' and '.join(sorted(builders))} files: prepare them separately")
    if all(f.is_file() and f.stat().st_size == 0 for f in files):
        raise UserError(f"empty corpus: {', '.join(map(str, files))} holds nothing")
    return builders.pop()


def reason(error: BaseException) -> str:
    # DatasetGenerationError only says "an error occurred"; its cause says which
    while isinstance(error, DatasetGenerationError) and error.__cause__ is not None:
        error = error.__cause__
    return (str(error).splitlines() or [type(error).__name__])[0]


def load_corpus(args: argparse.Namespace):
    """The corpus as a datasets.Dataset: Arrow files memory-mapped from disk, so a worker can read any rows by index
    (the parent never touches the text) and a resumed run seeks straight to its document."""
    if args.files:
        builder = builder_for(args.files)
        options = {"sample_by": args.sample_by} if builder == "text" else {}
        source = dict(path=builder, data_files=[str(f) for f in args.files], split="train", **options)
    else:
        source = dict(path=args.dataset, name=args.name, split=args.split)
    try:
        corpus = load_dataset(**source)
    except Exception as e:  # datasets reports bad input with many exception types; the user needs the reason
        raise UserError(f"cannot read {describe(args)}: {reason(e)}") from None
    if len(corpus) == 0:
        raise UserError(f"empty corpus: {describe(args)} has no documents")
    if args.text_field not in corpus.column_names:
        raise UserError(f"{describe(args)} has no field {args.text_field!r}; its fields are "
                        f"{', '.join(corpus.column_names)} (choose one with --text-field)")
    return corpus.select_columns([args.text_field])


def source_settings(args: argparse.Namespace, documents: int) -> dict:
    """Everything that decides the shards' bytes. One folder holds the shards of one set of settings only."""
    if args.files:
        source = {"files": [str(f.resolve()) for f in args.files], "sample_by": args.sample_by}
    else:
        source = {"dataset": args.dataset, "name": args.name, "split": args.split}
    # the document count is a cheap fingerprint: a corpus that changed between runs rarely keeps its length
    return source | {"documents_in_source": documents, "text_field": args.text_field, "tokenizer": enc.name,
                     "prefix": args.prefix, "shard_size": args.shard_size, "val_shards": args.val_shards,
                     "limit_docs": args.limit_docs, "limit_tokens": args.limit_tokens}


# ---- tokenizing: each worker encodes whole batches of documents, the parent takes the batches in order

corpus_rows = None  # each worker's handle on the corpus, set once by init_worker


def init_worker(corpus) -> None:
    global corpus_rows
    corpus_rows = corpus
    # Ctrl-C reaches every process: the parent handles it (finishing the shard it is saving) and stops the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=exit_with_parent, daemon=True).start()


def exit_with_parent() -> None:
    # a parent killed outright (kill -9, the OOM killer) cannot stop its workers, which would wait for work forever
    multiprocessing.parent_process().join()
    os._exit(1)


def tokenize_rows(start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of documents [start, stop), each preceded by EOT, and where each document's tokens end."""
    texts = corpus_rows[start:stop][corpus_rows.column_names[0]]  # the text, the only column load_corpus kept
    pieces = [np.empty(0, dtype=np.uint32)]  # so that a batch of empty documents concatenates to no tokens
    lengths = np.zeros(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        if text:  # empty (or null) documents are skipped, not even an EOT: they are counted as read, nothing more
            # = encode_ordinary (disallowed_special=() makes an "<|endoftext|>" in the text plain text) without building
            # a Python list of ints: ~7% faster. Arrow strings are valid UTF-8, so encode_ordinary's fix-up for lone
            # surrogates is never needed. encode_ordinary_batch's threads would only compete with our processes.
            ids = enc.encode_to_numpy(text, disallowed_special=())
            pieces += [np.array([EOT], dtype=np.uint32), ids]
            lengths[i] = 1 + len(ids)
    return np.concatenate(pieces).astype(np.uint16), np.cumsum(lengths)


def tokenized_batches(pool: ProcessPoolExecutor, first: int, stop: int, in_flight: int):
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


def corpus_position(start: int, ends: np.ndarray, pos: int) -> tuple[int, int]:
    """Where token `pos` of a batch (documents from `start`, document i ending at ends[i]) lies in the corpus:
    (document index, how many of that document's tokens come before it)."""
    i = int(np.searchsorted(ends, pos, side="right"))  # the first document that does not end by pos
    return start + i, pos - (int(ends[i - 1]) if i else 0)


# ---- writing shards (on a background thread, so tokenizing never waits for the disk)


def write_atomically(path: Path, write) -> None:
    """Write through a temporary name, then rename: a crash leaves the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename makes it count
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(out: Path) -> dict | None:
    path = out / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else None


def write_manifest(out: Path, manifest: dict) -> None:
    write_atomically(out / "manifest.json", lambda f: f.write(json.dumps(manifest, indent=1).encode()))


def save_shard(out: Path, manifest: dict, tokens: np.ndarray, entry: dict) -> None:
    """The shard first, then the manifest entry that makes it count: a crash in between only costs a rewrite."""
    path = out / entry["file"]
    write_atomically(path, lambda f: np.save(f, tokens))
    # encode_ordinary never emits EOT, so each EOT in a shard is one document starting there
    entry.update(documents=int(np.count_nonzero(tokens == EOT)), sha256=sha256_file(path))
    manifest["shards"].append(entry)
    write_manifest(out, manifest)


class ShardBuffer:
    """The shard being filled. A full one goes to the writer thread, and filling goes on in a fresh buffer."""

    def __init__(self, out: Path, manifest: dict, writer: ThreadPoolExecutor):
        self.out, self.manifest, self.writer = out, manifest, writer
        self.settings = manifest["settings"]
        self.index = len(manifest["shards"])
        self.tokens = np.empty(self.settings["shard_size"], dtype=np.uint16)
        self.fill = 0
        self.saving = None  # the previous shard's save, maybe still running

    def take(self, tokens: np.ndarray) -> int:
        n = min(len(tokens), len(self.tokens) - self.fill)
        self.tokens[self.fill:self.fill + n] = tokens[:n]
        self.fill += n
        return n

    def full(self) -> bool:
        return self.fill == len(self.tokens)

    def save(self, resume_at: tuple[int, int]) -> None:
        """Save the shard; `resume_at` is the corpus position right after its last token, where a rerun starts."""
        self.wait()  # one shard saving at a time, so memory holds two shards at most
        split = "val" if self.index < self.settings["val_shards"] else "train"
        entry = {"file": f"{self.settings['prefix']}_{split}_{self.index:06d}.npy", "tokens": self.fill,
                 "resume_at": {"document": resume_at[0], "token": resume_at[1]}}
        self.saving = self.writer.submit(save_shard, self.out, self.manifest, self.tokens[:self.fill], entry)
        self.index += 1
        self.tokens, self.fill = np.empty_like(self.tokens), 0

    def wait(self) -> None:
        if self.saving:
            self.saving.result()  # raises here what the save raised there (a full disk, say)


# ---- the run


def open_manifest(out: Path, settings: dict) -> dict:
    """The manifest to continue: the folder's own if its settings are ours, or a fresh one for an unused folder."""
    manifest = read_manifest(out)
    if manifest is None:
        if any(out.glob(f"{settings['prefix']}_*.npy")):
            raise UserError(f"{out} holds shards but no manifest.json (written by another tool?): "
                            "choose another --out or empty it")
        return {"settings": settings, "complete": False, "shards": []}
    if manifest["settings"] != settings:
        differ = sorted(k for k in settings.keys() | manifest["settings"].keys()
                        if settings.get(k) != manifest["settings"].get(k))
        raise UserError(f"{out} holds shards of other settings ({', '.join(differ)} differ): "
                        f"choose another --out, or delete {out} to start over")
    # a deleted shard (one --verify flagged, say) is rebuilt, and every shard after it
    kept = list(itertools.takewhile(lambda shard: (out / shard["file"]).exists(), manifest["shards"]))
    if len(kept) < len(manifest["shards"]):
        manifest.update(shards=kept, complete=False)
    return manifest


def write_shards(args: argparse.Namespace, corpus, manifest: dict) -> int:
    """Tokenize the corpus from where the manifest's last shard ended; return how many documents were read."""
    done = manifest["shards"]
    document, skip = (done[-1]["resume_at"]["document"], done[-1]["resume_at"]["token"]) if done else (0, 0)
    written = sum(shard["tokens"] for shard in done)
    tokens_left = (args.limit_tokens or sys.maxsize) - written
    end = (min(len(corpus), args.limit_docs or len(corpus)), 0)  # where reading stops, unless --limit-tokens is first
    args.out.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(args.workers, initializer=init_worker, initargs=(corpus,)) as pool, \
            ThreadPoolExecutor(max_workers=1) as writer, \
            tqdm(total=end[0], initial=document, unit="doc", desc="documents") as docs_bar, \
            tqdm(total=args.limit_tokens, initial=written, unit="tok", unit_scale=True, desc="tokens") as tokens_bar:
        shard = ShardBuffer(args.out, manifest, writer)
        for start, tokens, ends in tokenized_batches(pool, document, end[0], in_flight=2 * args.workers):
            begin, skip = skip, 0  # a resumed run drops what its first document already put in the last shard
            pos = begin
            while pos < len(tokens) and tokens_left:
                n = shard.take(tokens[pos:pos + tokens_left])
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


def prepare(args: argparse.Namespace) -> int:
    corpus = load_corpus(args)
    manifest = open_manifest(args.out, source_settings(args, len(corpus)))
    shards = manifest["shards"]
    if manifest["complete"]:
        print(f"nothing to do: {args.out} already holds all {len(shards)} shards of these settings "
              f"({manifest['tokens']:,} tokens); --verify checks them")
        return 0
    if shards:
        resume = shards[-1]["resume_at"]
        print(f"resuming after {shards[-1]['file']}, at token {resume['token']:,} of document {resume['document']:,}")
    else:
        print(f"tokenizing {describe(args)} into {args.out} with {args.workers} workers")
    shards_before, tokens_before, started = len(shards), sum(s["tokens"] for s in shards), time.time()
    documents_read = write_shards(args, corpus, manifest)
    elapsed = time.time() - started
    tokens, documents = sum(s["tokens"] for s in shards), sum(s["documents"] for s in shards)
    if tokens == 0:
        raise UserError(f"empty corpus: all {documents_read:,} documents of {describe(args)} are empty")
    manifest.update(complete=True, tokens=tokens, documents=documents, empty_documents=documents_read - documents)
    write_manifest(args.out, manifest)
    print(f"{args.out}: {len(shards)} shards, {tokens:,} tokens; documents: {documents:,} tokenized, "
          f"{documents_read - documents:,} empty skipped")
    print(f"this run: {len(shards) - shards_before} shards, {tokens - tokens_before:,} tokens in {elapsed:.1f} s "
          f"= {(tokens - tokens_before) / elapsed:,.0f} tokens/s with {args.workers} workers")
    if len(shards) <= args.val_shards:
        print("note: every token went to validation; a smaller --shard-size leaves some for training", file=sys.stderr)
    return 0


# ---- verifying


def shard_problems(path: Path, expected: dict) -> list[str]:
    try:
        tokens = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as e:
        return [f"unreadable ({e})"]
    problems = []
    if tokens.dtype != np.uint16:
        problems.append(f"dtype {tokens.dtype}, not uint16")
    if tokens.shape != (expected["tokens"],):
        problems.append(f"{tokens.size:,} tokens, not {expected['tokens']:,}")
    if tokens.size and tokens.max() >= enc.n_vocab:
        problems.append(f"token ids >= {enc.n_vocab}")
    if (documents := np.count_nonzero(tokens == EOT)) != expected["documents"]:
        problems.append(f"{documents:,} <|endoftext|> tokens, not {expected['documents']:,}")
    if sha256_file(path) != expected["sha256"]:
        problems.append("sha256 differs")
    return problems


def verify(out: Path) -> int:
    manifest = read_manifest(out)
    if manifest is None:
        raise UserError(f"{out / 'manifest.json'} not found: nothing to verify")
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return verify(args.out) if args.verify else prepare(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
    except OSError as e:  # a full disk, a read-only folder
        print(f"error: {e}", file=sys.stderr)
    except BrokenProcessPool:
        print("error: a tokenizer process died (out of memory? killed?); rerun the same command to resume",
              file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume", file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":  # a must: with spawn (macOS, Windows) every worker imports this file
    sys.exit(main())
