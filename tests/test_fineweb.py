"""fineweb.py: corpus -> GPT-2 token shards. The oracle is tiktoken itself: the shards, read in
order, must be the documents' encode_ordinary tokens, each preceded by <|endoftext|>."""

import contextlib
import errno
import hashlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import datasets
import numpy as np
import pytest
import tiktoken

import fineweb
from helpers import ROOT

SHAKESPEARE = (ROOT / "input.txt").read_text(encoding="utf-8")
enc = tiktoken.get_encoding("gpt2")
EOT = enc.eot_token


def sample_documents(n: int, seed: int, longest: int = 6000) -> list[str]:
    """Slices of tiny Shakespeare, 20 to `longest` characters, plus the awkward cases."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        start, length = rng.randrange(len(SHAKESPEARE) - longest), rng.randint(20, longest)
        docs.append(SHAKESPEARE[start : start + length])
    docs[1] = ""  # empty documents are skipped and counted
    docs[2] = "An <|endoftext|> in the text is just text, and so are émigrés, 東京 and 🤖."
    docs[3] = "x"  # a one-token document
    return docs


DOCS = sample_documents(40, seed=0)


def eot_joined(docs: list[str]) -> np.ndarray:
    return np.array([t for d in docs if d for t in [EOT, *enc.encode_ordinary(d)]], dtype=np.uint16)


def write_docs(folder: Path, docs: list[str]) -> list[Path]:
    """Each document in a .txt file of its own (fineweb.py reads a text file as one
    document), in order."""
    folder.mkdir(parents=True, exist_ok=True)
    files = [folder / f"doc{i:05d}.txt" for i in range(len(docs))]
    for path, doc in zip(files, docs, strict=True):
        path.write_text(doc, encoding="utf-8")
    return files


def shard_files(out: Path) -> list[Path]:
    # by index: val 000000 first
    return sorted(out.glob("*.npy"), key=lambda p: p.name.rsplit("_", 1)[1])


def token_stream(out: Path) -> np.ndarray:
    return np.concatenate([np.load(p) for p in shard_files(out)])


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def run(*args) -> int:
    argv = [str(a) for a in args]
    try:
        # two workers unless a test says otherwise, whatever the machine: parallel, yet
        # cheap to start
        return fineweb.main(argv if "--workers" in argv else argv + ["--workers", "2"])
    except SystemExit as e:  # a bad flag: argparse exits
        return e.code


def folder(out: Path) -> dict[str, bytes]:
    """Every file in out but the lock (which each run rewrites with its pid): what a refused run
    must not change."""
    return {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".lock"}


def one_error_line(err: str) -> str:
    """The error a failed run ends with (progress bars may come before it), checked to be one
    line, no traceback."""
    *_, last = err.splitlines()
    assert last.startswith("fineweb.py: error: ") and "Traceback" not in err, err
    return last


@pytest.fixture(autouse=True, scope="module")
def hf_cache(tmp_path_factory):
    # datasets keeps an Arrow copy of every file it reads: keep ours out of the user's cache
    cache = tmp_path_factory.mktemp("hf_datasets_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
        patch.setenv("HF_DATASETS_CACHE", str(cache))  # for the runs in a subprocess
        yield


@pytest.fixture
def quiet_datasets():
    # datasets draws progress bars on stderr; the error tests check that stderr holds one line
    datasets.disable_progress_bars()
    yield
    datasets.enable_progress_bars()


# ---- the token stream


def test_text_files_become_the_eot_joined_encoding_cut_into_exact_shards(tmp_path, capsys):
    out = tmp_path / "shards"
    assert (
        run("--files", *write_docs(tmp_path / "docs", DOCS), "--out", out, "--shard-size", 1000)
        == 0
    )

    expected = eot_joined(DOCS)
    files = shard_files(out)
    assert [p.name for p in files] == ["edufineweb_val_000000.npy"] + [  # the lecture's names
        f"edufineweb_train_{i:06d}.npy" for i in range(1, len(files))
    ]
    shards = [np.load(p) for p in files]
    assert all(s.dtype == np.uint16 for s in shards)
    assert [len(s) for s in shards[:-1]] == [1000] * (len(shards) - 1) and 0 < len(
        shards[-1]
    ) <= 1000
    assert np.array_equal(np.concatenate(shards), expected)

    m = manifest(out)
    assert m["complete"] and m["tokens"] == len(expected)
    assert m["documents"] == sum(1 for d in DOCS if d) and m["empty_documents"] == 1
    for entry, path in zip(m["shards"], files, strict=True):
        assert entry["file"] == path.name
        assert entry["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert entry["documents"] == np.count_nonzero(np.load(path) == EOT)
    assert "1 empty skipped" in capsys.readouterr().out


def test_rerun_of_a_finished_run_does_nothing_and_says_so(tmp_path, capsys):
    files, out = write_docs(tmp_path / "docs", DOCS), tmp_path / "shards"
    assert run("--files", *files, "--out", out, "--shard-size", 5000) == 0
    written = {p: p.stat().st_mtime_ns for p in out.iterdir() if p.name != ".lock"}
    capsys.readouterr()
    assert run("--files", *files, "--out", out, "--shard-size", 5000) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.iterdir() if p.name != ".lock"} == written


def test_plain_text_file_is_one_document(tmp_path):
    out = tmp_path / "shakespeare"
    assert run("--files", ROOT / "input.txt", "--out", out, "--shard-size", 100_000) == 0
    assert [p.name.rsplit("_", 2)[1] for p in shard_files(out)] == [
        "val",
        "train",
        "train",
        "train",
    ]
    assert np.array_equal(token_stream(out), eot_joined([SHAKESPEARE]))


@pytest.mark.parametrize("name, decoy", [("a[1].txt", "a1.txt"), ("b*.txt", "bz.txt")])
def test_a_file_named_like_a_pattern_is_that_file_alone(tmp_path, name, decoy):
    """datasets reads data_files as glob patterns: `a[1].txt` would be a1.txt, `b*.txt`
    would add bz.txt."""
    folder = tmp_path / "in [x]"  # the folder's name too
    folder.mkdir()
    (folder / name).write_text(DOCS[0], encoding="utf-8")
    (folder / decoy).write_text(DOCS[4], encoding="utf-8")
    out = tmp_path / "out"
    assert run("--files", folder / name, "--out", out, "--shard-size", 10_000_000) == 0
    assert np.array_equal(token_stream(out), eot_joined(DOCS[:1]))


def test_the_lectures_loader_reads_the_shards(tmp_path):
    # the reproduction lecture's loader: files whose name holds the split, sorted, each
    # loaded with np.load
    out = tmp_path / "out"
    assert (
        run("--files", *write_docs(tmp_path / "docs", DOCS), "--out", out, "--shard-size", 3000)
        == 0
    )
    streams = {}
    for split in ["val", "train"]:
        names = sorted(s for s in os.listdir(out) if split in s)
        streams[split] = np.concatenate([np.load(out / s).astype(np.int32) for s in names])
    assert len(streams["val"]) == 3000
    assert np.array_equal(np.concatenate([streams["val"], streams["train"]]), eot_joined(DOCS))


# ---- bad input: one line on stderr, an exit code, no traceback


def test_an_empty_corpus_makes_no_shards_and_says_so(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    assert run("--files", tmp_path / "empty.txt", "--out", tmp_path / "out") == 0
    assert "0 shards, 0 tokens; documents: 0 tokenized, 1 empty skipped" in capsys.readouterr().out
    assert shard_files(tmp_path / "out") == []


def test_output_folder_that_cannot_be_made(tmp_path, capsys, quiet_datasets):
    (tmp_path / "taken").write_text("a file where the folder should go")
    assert run("--files", *write_docs(tmp_path / "docs", DOCS), "--out", tmp_path / "taken") == 1
    assert one_error_line(capsys.readouterr().err).endswith(f"{tmp_path / 'taken'}: File exists")
    assert (tmp_path / "taken").read_text() == "a file where the folder should go"


def test_refuses_to_mix_settings_in_one_folder(tmp_path, capsys, quiet_datasets):
    files, out = write_docs(tmp_path / "docs", DOCS), tmp_path / "out"
    assert run("--files", *files, "--out", out, "--shard-size", 1000) == 0
    before = folder(out)
    other = write_docs(tmp_path / "other", DOCS[:10])
    capsys.readouterr()
    assert run("--files", *other, "--out", out, "--shard-size", 2000) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "shard_size" in err and "files" in err
    assert folder(out) == before


def test_refuses_a_folder_of_shards_without_a_manifest(tmp_path, capsys, quiet_datasets):
    out = tmp_path / "out"
    out.mkdir()
    # the lecture's script, say
    np.save(out / "edufineweb_train_000001.npy", np.zeros(10, dtype=np.uint16))
    assert run("--files", *write_docs(tmp_path / "docs", DOCS), "--out", out) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "no manifest.json" in err
    assert sorted(folder(out)) == ["edufineweb_train_000001.npy"]


def test_missing_file_and_a_folder_for_a_file(tmp_path, capsys, quiet_datasets):
    (tmp_path / "corpus").mkdir()
    write_docs(tmp_path / "corpus", DOCS)
    for path in [tmp_path / "corpus", tmp_path / "corpus" / "nope.txt"]:
        assert run("--files", path, "--out", tmp_path / "out") == 1
        assert capsys.readouterr().err.splitlines() == [
            f"fineweb.py: error: argument --files: {path}: no such file (see --help)"
        ]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "flags, complaint",
    [
        (["--workers", "0"], "argument --workers: expected a whole number of at least 1, got '0'"),
        (["--shard-size", "lots"], "argument --shard-size: expected a whole number, got 'lots'"),
    ],
)
def test_bad_flags_are_one_line_before_any_work(tmp_path, capsys, flags, complaint):
    assert (
        run("--files", *write_docs(tmp_path / "docs", DOCS), "--out", tmp_path / "out", *flags) == 1
    )
    err = capsys.readouterr().err
    assert err.splitlines() == [f"fineweb.py: error: {complaint} (see --help)"]
    assert not (tmp_path / "out").exists()


def test_running_out_of_memory_is_one_line(tmp_path, capsys, monkeypatch, quiet_datasets):
    def no_memory(self, tokens):
        raise MemoryError

    monkeypatch.setattr(fineweb.ShardBuffer, "take", no_memory)
    out = tmp_path / "out"
    assert (
        run("--files", *write_docs(tmp_path / "docs", DOCS), "--out", out, "--shard-size", 1000)
        == 1
    )
    line = one_error_line(capsys.readouterr().err)
    assert (
        line.startswith("fineweb.py: error: out of memory: ")
        and "(try a smaller --shard-size)" in line
    )
    # nothing written, nothing half-written
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


@pytest.mark.parametrize(
    "make, complaint",
    [
        (lambda out: None, "no such folder, nothing to verify"),
        (
            lambda out: out.mkdir(),
            "holds no manifest.json (not a folder fineweb.py wrote): nothing to verify",
        ),
    ],
)
def test_verify_on_a_folder_that_holds_no_shards(tmp_path, capsys, make, complaint):
    make(tmp_path / "out")
    assert run("--verify", "--out", tmp_path / "out") == 1
    assert capsys.readouterr().err.splitlines() == [
        f"fineweb.py: error: {tmp_path / 'out'}{':' * (not (tmp_path / 'out').exists())} "
        f"{complaint}"
    ]


# ---- a damaged manifest


def retyped_tokens(m):
    m["shards"][1]["tokens"] = "1000"
    return m


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda m: json.dumps(m)[:-40], "not JSON: "),
        (lambda m: b"\xff\xfe" + json.dumps(m).encode(), "not JSON: "),
        (lambda m: [m], "not a JSON object"),
        (lambda m: m | {"settings": 3}, "'settings' is missing or not dict"),
        (lambda m: {k: v for k, v in m.items() if k != "tokens"}, "'tokens' is missing or not int"),
        (retyped_tokens, "shard entry 1 is not a shard entry"),
    ],
)
def test_a_damaged_manifest_is_named(tmp_path, capsys, quiet_datasets, damage, problem):
    files, out = write_docs(tmp_path / "docs", DOCS), tmp_path / "out"
    assert run("--files", *files, "--out", out, "--shard-size", 1000) == 0
    damaged = damage(manifest(out))
    damaged = damaged if isinstance(damaged, str | bytes) else json.dumps(damaged)
    (out / "manifest.json").write_bytes(damaged.encode() if isinstance(damaged, str) else damaged)
    before = folder(out)
    for command in [["--files", *files, "--shard-size", 1000], ["--verify"]]:
        capsys.readouterr()
        assert run(*command, "--out", out) == 1
        last = one_error_line(capsys.readouterr().err)
        assert last.startswith(f"fineweb.py: error: {out / 'manifest.json'} is damaged ({problem}")
        assert last.endswith(f"): delete {out} and rerun to start over")
    assert folder(out) == before


# ---- verify, interrupt, resume


def test_verify_names_each_bad_shard_and_a_rerun_rebuilds_them(tmp_path, capsys):
    files, out = write_docs(tmp_path / "docs", DOCS), tmp_path / "out"
    assert run("--files", *files, "--out", out, "--shard-size", 1000) == 0
    good = {p.name: p.read_bytes() for p in shard_files(out)}
    assert run("--verify", "--out", out) == 0

    truncated, flipped = shard_files(out)[1], shard_files(out)[3]
    truncated.write_bytes(good[truncated.name][:-2])
    data = bytearray(good[flipped.name])
    data[-7] ^= 0x10  # one bit of one token: same size, a different id
    flipped.write_bytes(bytes(data))
    capsys.readouterr()
    assert run("--verify", "--out", out) == 1
    bad_lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("BAD")]
    assert len(bad_lines) == 2
    assert (
        truncated.name in bad_lines[0] and flipped.name in bad_lines[1] and "sha256" in bad_lines[1]
    )

    truncated.unlink()  # what the message advises: delete them and rerun
    flipped.unlink()
    assert run("--files", *files, "--out", out, "--shard-size", 1000) == 0
    assert {p.name: p.read_bytes() for p in shard_files(out)} == good
    assert run("--verify", "--out", out) == 0


# ~250k tokens: hundreds of shards of 800 tokens, so the run lasts long enough to interrupt; and
# 4,000 documents: 16 tasks, so that work is left for a worker to die in the middle of
BIG_DOCS = sample_documents(4000, seed=1, longest=400)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clean")
    files = write_docs(folder / "big", BIG_DOCS)
    assert run("--files", *files, "--out", folder / "out", "--shard-size", 800, "--workers", 2) == 0
    return files, folder / "out"


def descendants(pid: int) -> list[int]:
    children = [
        int(c)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for c in (task / "children").read_text().split()
    ]
    return children + [d for child in children for d in descendants(child)]


def wait_for_shards(out: Path, count: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 300  # a bound for a hang, not a timing: a busy machine is slow
    while time.monotonic() < deadline:
        assert process.poll() is None, "the run finished before the test could interrupt it"
        if (out / "manifest.json").exists() and len(manifest(out)["shards"]) >= count:
            return
        time.sleep(0.002)
    pytest.fail("no shards appeared")


def wait_until_stopped(pid: int) -> None:
    """kill() returns before a running process has taken its SIGSTOP: wait until every thread
    of it has."""
    # a bound for a hang: a busy machine is slow to schedule the stop
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            tasks = [Path(task, "stat").read_text() for task in Path(f"/proc/{pid}/task").iterdir()]
        except FileNotFoundError:  # a thread ended while we looked: look again
            continue
        # the state follows "(name)"
        if all(stat.rsplit(")", 1)[1].split()[0] in "tT" for stat in tasks):
            return
        time.sleep(0.002)
    pytest.fail(f"process {pid} did not stop")


@contextlib.contextmanager
def fineweb_process(*args):
    """`python fineweb.py ARGS` in a process group of its own (so a test can signal the whole job,
    as a terminal does), killed with all its workers when the test is done with it."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "fineweb.py"), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # a job a shell starts in the background (`pytest &`, some CI runners) ignores SIGINT,
        # and so would the run it starts: give the run Ctrl-C's default, as a user's
        # foreground command has
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            # whatever is left of the job, should the test have failed
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


def assert_same_shards(out: Path, reference: Path) -> None:
    assert [p.name for p in shard_files(out)] == [p.name for p in shard_files(reference)]
    for ours, theirs in zip(shard_files(out), shard_files(reference), strict=True):
        assert ours.read_bytes() == theirs.read_bytes(), ours.name
    assert manifest(out)["shards"] == manifest(reference)["shards"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and process groups")
@pytest.mark.parametrize(
    "interrupt", ["kill the parent", "kill the workers", "kill one worker", "ctrl-c", "sigterm"]
)
def test_interrupted_run_resumes_to_identical_bytes(tmp_path, capsys, clean_run, interrupt):
    if interrupt in ("kill the workers", "kill one worker") and not Path("/proc").is_dir():
        pytest.skip("finds the workers' pids in Linux's /proc")
    files, clean = clean_run
    out = tmp_path / "out"
    with fineweb_process(
        "--files", *files, "--out", out, "--shard-size", 800, "--workers", 2
    ) as process:
        wait_for_shards(out, 3, process)
        if interrupt == "kill the parent":
            workers = descendants(process.pid) if Path("/proc").is_dir() else []
            for pid in workers:
                # frozen, they cannot follow their parent: do they hold its lock too?
                os.kill(pid, signal.SIGSTOP)
            os.kill(process.pid, signal.SIGKILL)
            # not communicate(): the frozen workers keep the output pipes open
            process.wait(timeout=300)
            import fcntl  # POSIX only, as this test is

            # the lock died with its holder: the next run may start at once
            with open(out / ".lock") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            err = ""
        else:
            if interrupt == "kill the workers":  # as the OOM killer might
                for pid in descendants(process.pid):
                    os.kill(pid, signal.SIGKILL)
            elif interrupt == "kill one worker":
                # the pool must stop the other one, or the run hangs
                os.kill(descendants(process.pid)[0], signal.SIGKILL)
            elif interrupt == "ctrl-c":
                os.killpg(process.pid, signal.SIGINT)  # what the terminal sends to the whole job
            else:
                # what `kill`, a job scheduler or a stopping container sends
                os.killpg(process.pid, signal.SIGTERM)
            # the whole run takes a few seconds: one that went on after the signal would finish, and
            # fail the asserts
            _, err = process.communicate(timeout=300)
    expected_code = {
        "kill the parent": -signal.SIGKILL,
        "kill the workers": 1,
        "kill one worker": 1,
    }
    expected_code |= {"ctrl-c": 130, "sigterm": 130}
    assert process.returncode == expected_code[interrupt], err
    if interrupt != "kill the parent":
        assert "rerun the same command to resume" in err.splitlines()[-1] and "Traceback" not in err
        assert not list(out.glob("*.tmp"))  # the shard being saved was finished, or never begun
    assert not manifest(out)["complete"]

    capsys.readouterr()
    assert run("--files", *files, "--out", out, "--shard-size", 800, "--workers", 1) == 0
    # not starting over, which would give the same bytes too
    assert "resuming after" in capsys.readouterr().out
    assert_same_shards(out, clean)
    assert not list(out.glob("*.tmp"))


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals, and the lock is POSIX-only")
def test_one_run_per_folder(tmp_path, capsys, clean_run, quiet_datasets):
    files, clean = clean_run
    out = tmp_path / "out"
    with fineweb_process(
        "--files", *files, "--out", out, "--shard-size", 800, "--workers", 2
    ) as first:
        wait_for_shards(out, 3, first)
        # frozen while holding the folder: the test decides when it goes on
        os.killpg(first.pid, signal.SIGSTOP)
        # else its writer may still be renaming a file when `before` is read
        wait_until_stopped(first.pid)
        before = folder(out)
        # a second run of other settings would cut the rest into shards of another size, under
        # the same manifest
        assert run("--files", *files, "--out", out, "--shard-size", 1600) == 1
        assert one_error_line(capsys.readouterr().err) == (
            f"fineweb.py: error: {out} is in use by another process (pid {first.pid}): "
            "wait for it, or choose another folder"
        )
        assert folder(out) == before
        os.killpg(first.pid, signal.SIGCONT)
        _, err = first.communicate(timeout=300)
        assert first.returncode == 0, err
    assert_same_shards(out, clean)  # the first run's shards, all of its size, none of the second's
    assert manifest(out)["complete"] and run("--verify", "--out", out) == 0
    # and once the first is done, its settings still guard the folder
    before = folder(out)
    capsys.readouterr()
    assert run("--files", *files, "--out", out, "--shard-size", 1600) == 1
    assert "shard_size differ" in one_error_line(capsys.readouterr().err)
    assert folder(out) == before


def failing_on(call, error, original):
    """A stand-in for `original` that fails on its `call`-th call, as a disk that fills up or
    turns read-only does."""
    calls = itertools.count(1)

    def fail(*args, **kwargs):
        if next(calls) == call:
            # as the kernel's refusal arrives: no file name
            raise OSError(error, os.strerror(error))
        return original(*args, **kwargs)

    return fail


@pytest.mark.parametrize(
    "target, call, error",
    [
        ("np.save", 3, errno.ENOSPC),  # a full disk while a shard is written
        # remounted read-only: the manifest's 3rd write, after 2 shards
        ("os.fsync", 5, errno.EROFS),
    ],
)
def test_a_disk_that_refuses_a_write_is_one_line_and_the_rerun_resumes(
    tmp_path, capsys, monkeypatch, quiet_datasets, target, call, error
):
    files = write_docs(tmp_path / "docs", DOCS)
    clean, out = tmp_path / "clean", tmp_path / "out"
    assert run("--files", *files, "--out", clean, "--shard-size", 1000) == 0
    module, name = {"np.save": (np, "save"), "os.fsync": (os, "fsync")}[target]
    monkeypatch.setattr(module, name, failing_on(call, error, getattr(module, name)))
    capsys.readouterr()
    assert run("--files", *files, "--out", out, "--shard-size", 1000, "--workers", 1) == 1
    monkeypatch.undo()
    line = one_error_line(capsys.readouterr().err)  # naming the file being written
    assert line.startswith(f"fineweb.py: error: {out}{os.sep}") and line.endswith(
        f": {os.strerror(error)}"
    )
    assert not list(out.glob("*.tmp")) and not manifest(out)["complete"]
    assert run("--files", *files, "--out", out, "--shard-size", 1000) == 0
    assert "resuming after" in capsys.readouterr().out
    assert_same_shards(out, clean)


@pytest.mark.skipif(
    sys.platform == "win32" or os.geteuid() == 0, reason="root writes to a read-only folder anyway"
)
def test_a_read_only_folder_is_one_line(tmp_path, capsys, quiet_datasets):
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert run("--files", *write_docs(tmp_path / "docs", DOCS), "--out", out) == 1
    finally:
        out.chmod(0o755)
    assert (
        one_error_line(capsys.readouterr().err)
        == f"fineweb.py: error: {out / '.lock'}: Permission denied"
    )
    assert not list(out.iterdir())


# one byte of a shard's header changed, each making numpy raise something else (found by
# trying every byte):
HEADER_DAMAGE = {
    "TokenError": (10, 0),  # the header dict's "{" -> NUL
    "SyntaxError": (21, ord(",")),  # "<u2" -> ",u2"
    "a bytes dtype": (22, ord("S")),  # "<u2" -> "<S2": loads, as 2-byte strings
    "TypeError": (26, ord("B")),  # the space before 'fortran_order' -> B, a Python 2 bytes literal
    "ValueError": (61, ord("9")),  # shape (1000,) -> (9000,): more tokens than the file holds
}


@pytest.mark.parametrize("damage", HEADER_DAMAGE)
def test_verify_names_a_shard_with_a_damaged_header(tmp_path, capsys, damage):
    out = tmp_path / "out"
    assert (
        run("--files", *write_docs(tmp_path / "docs", DOCS), "--out", out, "--shard-size", 1000)
        == 0
    )
    shard = shard_files(out)[2]
    data = bytearray(shard.read_bytes())
    position, value = HEADER_DAMAGE[damage]
    assert data[position] != value
    data[position] = value
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    assert run("--verify", "--out", out) == 1
    output = capsys.readouterr()
    bad = [line for line in output.out.splitlines() if line.startswith("BAD")]
    assert (
        len(bad) == 1 and bad[0].startswith(f"BAD {shard}: ") and "Traceback" not in output.err
    ), output


def test_workers_started_by_spawn_as_on_macos_and_windows(tmp_path):
    # spawn starts each worker by importing fineweb.py afresh: without the __main__ guard
    # every worker would rerun the whole job. runpy runs the script as __main__, as
    # `python fineweb.py` does.
    spawn = (
        "import multiprocessing, runpy, sys; multiprocessing.set_start_method('spawn'); "
        "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    files, out = write_docs(tmp_path / "docs", DOCS), tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            spawn,
            str(ROOT / "fineweb.py"),
            "--files",
            *map(str, files),
            "--out",
            str(out),
            "--shard-size",
            "1000",
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert np.array_equal(token_stream(out), eot_joined(DOCS))


def test_train_gpt2_loader_reads_the_shards(tmp_path):
    import train_gpt2

    out = tmp_path / "shards"
    assert (
        fineweb.main(
            [
                "--files",
                str(ROOT / "input.txt"),
                "--out",
                str(out),
                "--shard-size",
                "50000",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    tokens = [50256] + enc.encode_ordinary(SHAKESPEARE)
    min_tokens = 4 * 256 + 1  # one batch of B=4, T=256, and its last target
    val, train = (
        train_gpt2.load_split(str(out), "val", min_tokens),
        train_gpt2.load_split(str(out), "train", min_tokens),
    )
    assert len(val) == 1 and len(train) == 6
    loader = train_gpt2.DataLoaderLite(train, B=4, T=256)
    stream = np.concatenate([loader.next_batch()[0].flatten().numpy() for _ in range(250)])
    # across train shard ends, nothing dropped
    assert stream.tolist() == tokens[50000 : 50000 + len(stream)]
