"""
Where fineweb.py's documents come from: a Hub dataset (FineWeb-Edu by default, downloaded by threads and converted by
processes) or local files (.jsonl, .json, .parquet, .txt), read as a datasets.Dataset that the workers index by row;
the file and line to fix when the input is bad; and the source's fingerprint, so that a resumed run refuses a source
that changed. A module of its own: fineweb.py keeps its core, tokenizing documents and cutting shards, in one readable
place.
"""

import contextlib
import glob
import json
import logging
from pathlib import Path

import multiprocess
from datasets import DownloadConfig, load_dataset, load_dataset_builder
from datasets import config as datasets_config
from datasets.exceptions import DatasetGenerationError
from huggingface_hub import HfFileSystem, snapshot_download

from longrun.common import UserError, sha256_file

# local files go through datasets' own builders, chosen by extension
BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".txt": "text"}


# local files are converted to Arrow by several processes only when they are big: starting them costs ~2-3 s (a
# fresh Python imports datasets again), about what converting 200 MB of JSON lines in one process took here
BYTES_PER_CONVERTER = 2**28


def describe(args):
    if args.files:
        return str(args.files[0]) + (f" (and {len(args.files) - 1} more files)" if len(args.files) > 1 else "")
    return f"{args.dataset} ({args.name or 'default'}, {args.split})"


def builder_for(files):
    for f in files:
        if f.is_dir():
            raise UserError(f"{f} is a folder: --files takes files (all of a folder's: --files {f}/*.jsonl)")
        if not f.exists():
            raise UserError(f"{f}: no such file")
    unknown = [f for f in files if f.suffix not in BUILDERS]
    if unknown:
        raise UserError(f"{unknown[0]}: unknown file type (expected {', '.join(BUILDERS)})")
    builders = {BUILDERS[f.suffix] for f in files}
    if len(builders) > 1:
        raise UserError(f"--files mixes {' and '.join(sorted(builders))} files: prepare them separately")
    if all(f.stat().st_size == 0 for f in files):
        raise UserError(f"empty corpus: {', '.join(map(str, files))} holds nothing")
    return builders.pop()


def reason(error):
    # DatasetGenerationError only says "an error occurred"; its cause says which
    while isinstance(error, DatasetGenerationError) and error.__cause__ is not None:
        error = error.__cause__
    return (str(error).splitlines() or [type(error).__name__])[0]


def download(args):
    """A Hub dataset's data files, downloaded side by side by --workers threads into the Hub cache, where
    load_dataset finds them: datasets itself fetches them one after the other, or forks a pool of processes to (its
    num_proc), and threads need no fork. Nothing to do offline, for a local folder, or once datasets has converted
    the dataset (it reads only its Arrow files then)."""
    if datasets_config.HF_HUB_OFFLINE or Path(args.dataset).exists():  # HF_HUB_OFFLINE or HF_DATASETS_OFFLINE
        return
    builder = load_dataset_builder(args.dataset, args.name)
    if Path(builder.cache_dir).is_dir():
        return
    hub = HfFileSystem()  # datasets resolved the data files to hf://datasets/ID@REVISION/PATH
    files = [hub.resolve_path(url) for urls in (builder.config.data_files or {}).values() for url in urls]
    files = [f for f in files if f.repo_id == args.dataset]  # files of other repositories are left to datasets
    if files:
        print(f"downloading {len(files)} files of {args.dataset} with {min(len(files), args.workers)} threads")
        snapshot_download(
            args.dataset,
            repo_type="dataset",
            revision=files[0].revision,
            allow_patterns=[f.path_in_repo for f in files],
            max_workers=args.workers,
        )


def converters(args):
    """How many processes datasets may use to convert the source to Arrow (None: this one). A Hub dataset gets
    --workers, which datasets caps at one per data file: sample-10BT's 14 parquet files convert side by side, not
    one after the other. Local files: one per 256 MiB of them, up to one per file and --workers."""
    if args.files:
        wanted = min(len(args.files), sum(f.stat().st_size for f in args.files) // BYTES_PER_CONVERTER)
    else:
        wanted = args.workers
    processes = min(wanted, args.workers)
    return processes if processes > 1 else None


@contextlib.contextmanager
def started_by_a_fork_server():
    """datasets starts its num_proc processes with multiprocess's default, fork on Linux: a copy of this process, down
    to the locks its threads hold (pyarrow runs threads of its own). A copy made while one is held waits for it
    forever, as a forked pool of datasets' did here for 10 minutes, until killed. A fork server copies a process that
    has no threads (Python 3.14's default on Linux); Windows has none, and spawns."""
    before = multiprocess.get_start_method(allow_none=True)
    if "forkserver" in multiprocess.get_all_start_methods():
        multiprocess.set_start_method("forkserver", force=True)
    try:
        yield
    finally:
        multiprocess.set_start_method(before, force=True)


def load_corpus(args):
    """The corpus as a datasets.Dataset: Arrow files memory-mapped from disk, so a worker can read any rows by index
    (the parent never touches the text) and a resumed run seeks straight to its document."""
    if args.files:
        builder = builder_for(args.files)
        options = {"sample_by": args.sample_by} if builder == "text" else {}
        # datasets reads data_files as glob patterns: escaped, a name (a[1].txt, b*.txt) is the one file it names
        source = dict(path=builder, data_files=[glob.escape(str(f)) for f in args.files], split="train", **options)
    else:
        source = dict(path=args.dataset, name=args.name, split=args.split)
    # the json builder logs the error it is about to raise: the user would read it twice, once as a long line
    logging.getLogger("datasets.packaged_modules.json.json").setLevel(logging.CRITICAL)
    try:
        if not args.files:
            download(args)
        with started_by_a_fork_server():
            # a DownloadConfig of our own: without one, datasets would download with a pool of processes too
            corpus = load_dataset(**source, num_proc=converters(args), download_config=DownloadConfig())
    except Exception as e:  # datasets reports bad input with many exception types; the user needs the reason
        raise bad_input(args, f"cannot read {describe(args)}: {reason(e)}") from None
    if len(corpus) == 0:
        raise UserError(f"empty corpus: {describe(args)} has no documents")
    if args.text_field not in corpus.column_names:
        raise UserError(
            f"{describe(args)} has no field {args.text_field!r}; its fields are "
            f"{', '.join(corpus.column_names)} (choose one with --text-field)"
        )
    # a column of numbers, lists, or of mixed types (datasets' "Json"). datasets settles a JSON file's column types on
    # its first 10 MB, though: a number further on arrives as its JSON text, "5", and no check here can tell
    feature = corpus.features[args.text_field]
    kind = getattr(feature, "dtype", type(feature).__name__)  # "string"; or "int64", "Json", "List"
    if kind not in ("string", "large_string"):
        raise bad_input(args, f"{describe(args)}: field {args.text_field!r} holds {kind} values, not text")
    return corpus.select_columns([args.text_field])


# datasets reports a malformed JSON line by its row within one block of the file, not by its line, and takes bytes
# that are not UTF-8 without a word (the worker that decodes them fails). Scanning the files ourselves, only after a
# failure, names the file and the line at no cost to a run that succeeds.
JSON_TYPES = {
    int: "a number",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "an object",
    str: "a string",
    type(None): "null",
}


def line_problem(line, field):
    """What is wrong with one line of a .txt file (field None) or a .jsonl file, or None."""
    try:
        text = line.decode("utf-8-sig")  # -sig: a byte-order mark at the start of a file is not an error
    except UnicodeDecodeError as e:
        return f"not UTF-8 (byte {e.start + 1} of the line is {line[e.start]:#04x})"
    if field is None or not text.strip():
        return None
    try:
        row = json.loads(text)
    except json.JSONDecodeError as e:
        return f"not JSON ({e.msg} at column {e.colno})"
    if not isinstance(row, dict):
        return f"not a JSON object but {JSON_TYPES[type(row)]}"
    value = row.get(field)
    if value is not None and not isinstance(value, str):
        return f"{field!r} is {JSON_TYPES[type(value)]}, not a string"
    try:
        (value or "").encode()
    except UnicodeEncodeError as e:  # an escaped lone surrogate, "\ud800": valid JSON, not text
        return f"{field!r} holds a lone surrogate (\\u{ord(value[e.start]):04x}), which is not text"
    return None


def first_bad_line(files, field):
    for path in files:
        if path.suffix in (".jsonl", ".txt"):
            with open(path, "rb") as f:
                for number, line in enumerate(f, 1):
                    if problem := line_problem(line, field if path.suffix == ".jsonl" else None):
                        return f"{path}, line {number:,}: {problem}"
    return None


def bad_input(args, fallback):
    """The error to report for input datasets or a worker could not take: its file and line if we can find it."""
    return UserError((first_bad_line(args.files, args.text_field) if args.files else None) or fallback)


def file_fingerprint(path):
    """What a file holds: its size and the sha256 of its bytes. Not its modification time: a file copied again, the
    same bytes, is the same source. Hashing reads the whole file, which tokenizing it does anyway."""
    return {"file": str(path.resolve()), "size": path.stat().st_size, "sha256": sha256_file(path)}


def source_fingerprint(args, corpus):
    if args.files:
        return [file_fingerprint(f) for f in args.files]
    # datasets hashes a dataset's revision and files into the Dataset's fingerprint: a new version changes it
    return {"datasets_fingerprint": corpus._fingerprint}


FINGERPRINT = {"size": "size", "sha256": "content"}


def check_source(out, recorded, current):
    """A source edited since the folder's shards were made from it must not be mixed into them on resume."""
    if recorded == current:
        return
    if isinstance(current, list):  # --files: the same files (the settings say so); name the first that changed
        recorded = recorded if isinstance(recorded, list) else []
        for i, new in enumerate(current):
            old = recorded[i] if i < len(recorded) and isinstance(recorded[i], dict) else {}
            if old != new:
                differ = " and ".join(name for key, name in FINGERPRINT.items() if old.get(key) != new[key])
                raise UserError(
                    f"{new['file']} has changed ({differ}) since the shards in {out} were made from it: "
                    f"put the original back, or delete {out} to start over"
                )
    raise UserError(
        f"the dataset is not the version the shards in {out} were made from (its datasets fingerprint changed): "
        f"delete {out} to start over, or choose another --out"
    )
