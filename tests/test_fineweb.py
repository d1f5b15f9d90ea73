"""fineweb.py: corpus -> GPT-2 token shards. The oracle is tiktoken itself: the shards, read in order, must be the
documents' encode_ordinary tokens, each preceded by <|endoftext|>."""

import contextlib
import hashlib
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
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tiktoken

import fineweb

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = (ROOT / "input.txt").read_text(encoding="utf-8")
enc = tiktoken.get_encoding("gpt2")
EOT = enc.eot_token


def sample_documents(n: int, seed: int, longest: int = 6000) -> list[str]:
    """Slices of tiny Shakespeare, 20 to `longest` characters, plus the awkward cases."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        start, length = rng.randrange(len(SHAKESPEARE) - longest), rng.randint(20, longest)
        docs.append(SHAKESPEARE[start:start + length])
    docs[1] = ""  # empty documents are skipped and counted
    docs[2] = "An <|endoftext|> in the text is just text, and so are émigrés, 東京 and 🤖."
    docs[3] = "x"  # a one-token document
    return docs


DOCS = sample_documents(40, seed=0)


def eot_joined(docs: list[str]) -> np.ndarray:
    return np.array([t for d in docs if d for t in [EOT, *enc.encode_ordinary(d)]], dtype=np.uint16)


def write_jsonl(path: Path, docs: list[str], field: str = "text") -> Path:
    path.write_text("".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)), encoding="utf-8")
    return path


def shard_files(out: Path) -> list[Path]:
    return sorted(out.glob("*.npy"), key=lambda p: p.name.rsplit("_", 1)[1])  # by index: val 000000 first


def token_stream(out: Path) -> np.ndarray:
    return np.concatenate([np.load(p) for p in shard_files(out)])


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def run(*args) -> int:
    argv = [str(a) for a in args]
    # two workers unless a test says otherwise, whatever the machine: parallel, yet cheap to start
    return fineweb.main(argv if "--workers" in argv else argv + ["--workers", "2"])


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


def test_jsonl_corpus_becomes_the_eot_joined_encoding_cut_into_exact_shards(tmp_path, capsys):
    out = tmp_path / "shards"
    assert run("--files", write_jsonl(tmp_path / "docs.jsonl", DOCS), "--out", out, "--shard-size", 1000) == 0

    expected = eot_joined(DOCS)
    files = shard_files(out)
    assert [p.name for p in files] == ["edufineweb_val_000000.npy"] + [
        f"edufineweb_train_{i:06d}.npy" for i in range(1, len(files))]
    shards = [np.load(p) for p in files]
    assert all(s.dtype == np.uint16 for s in shards)
    assert [len(s) for s in shards[:-1]] == [1000] * (len(shards) - 1) and 0 < len(shards[-1]) <= 1000
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
    files, out = write_jsonl(tmp_path / "docs.jsonl", DOCS), tmp_path / "shards"
    assert run("--files", files, "--out", out, "--shard-size", 5000) == 0
    written = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    capsys.readouterr()
    assert run("--files", files, "--out", out, "--shard-size", 5000) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.iterdir()} == written


def test_limits_cut_a_sample(tmp_path):
    files = write_jsonl(tmp_path / "docs.jsonl", DOCS)
    assert run("--files", files, "--out", tmp_path / "docs", "--limit-docs", 5, "--shard-size", 1000) == 0
    assert np.array_equal(token_stream(tmp_path / "docs"), eot_joined(DOCS[:5]))
    assert manifest(tmp_path / "docs")["empty_documents"] == 1

    assert run("--files", files, "--out", tmp_path / "tokens", "--limit-tokens", 2500, "--shard-size", 1000) == 0
    assert [len(np.load(p)) for p in shard_files(tmp_path / "tokens")] == [1000, 1000, 500]
    assert np.array_equal(token_stream(tmp_path / "tokens"), eot_joined(DOCS)[:2500])


def test_plain_text_file_is_one_document(tmp_path):
    out = tmp_path / "shakespeare"
    assert run("--files", ROOT / "input.txt", "--out", out, "--shard-size", 100_000, "--val-shards", 1) == 0
    assert [p.name.rsplit("_", 2)[1] for p in shard_files(out)] == ["val", "train", "train", "train"]
    assert np.array_equal(token_stream(out), eot_joined([SHAKESPEARE]))


def test_plain_text_by_paragraph(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("First paragraph,\nstill the first.\n\nSecond one.\n\n\nThird.\n")
    assert run("--files", text, "--out", tmp_path / "out", "--sample-by", "paragraph", "--shard-size", 1000) == 0
    assert manifest(tmp_path / "out")["documents"] == 3
    assert np.count_nonzero(token_stream(tmp_path / "out") == EOT) == 3


def test_parquet_with_another_text_field(tmp_path):
    table = pa.table({"url": [f"https://example.com/{i}" for i in range(len(DOCS))], "content": DOCS})
    pq.write_table(table, tmp_path / "docs.parquet")
    out = tmp_path / "out"
    assert run("--files", tmp_path / "docs.parquet", "--text-field", "content", "--out", out, "--shard-size", 3000) == 0
    assert np.array_equal(token_stream(out), eot_joined(DOCS))


def test_the_lectures_loader_reads_the_shards(tmp_path):
    # the reproduction lecture's loader: files whose name holds the split, sorted, each loaded with np.load
    out = tmp_path / "out"
    assert run("--files", write_jsonl(tmp_path / "docs.jsonl", DOCS), "--out", out, "--shard-size", 3000,
               "--val-shards", 2) == 0
    streams = {}
    for split in ["val", "train"]:
        names = sorted(s for s in os.listdir(out) if split in s)
        streams[split] = np.concatenate([np.load(out / s).astype(np.int32) for s in names])
    assert len(streams["val"]) == 6000
    assert np.array_equal(np.concatenate([streams["val"], streams["train"]]), eot_joined(DOCS))


# ---- bad input: one line on stderr, an exit code, no traceback


def test_missing_text_field_names_the_fields_there_are(tmp_path, capsys, quiet_datasets):
    files = tmp_path / "docs.jsonl"
    files.write_text('{"body": "Hello", "title": "A"}\n')
    assert run("--files", files, "--out", tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "'text'" in err and "body, title" in err


@pytest.mark.parametrize("name, content, complaint", [
    ("empty.jsonl", "", "empty corpus"),
    ("empty.txt", "", "empty corpus"),
    ("blank.jsonl", '{"text": ""}\n{"text": null}\n', "empty corpus: all 2 documents"),
    ("broken.jsonl", '{"text": "fine"}\n{"text": oops\n', "cannot read"),
    ("junk.parquet", "not a parquet file", "cannot read"),
    ("notes.md", "# hi", "unknown file type"),
])
def test_bad_input_is_one_clear_error(tmp_path, capsys, quiet_datasets, name, content, complaint):
    (tmp_path / name).write_text(content)
    assert run("--files", tmp_path / name, "--out", tmp_path / "out") == 1
    err = capsys.readouterr().err
    *before, last = err.splitlines()
    assert last.startswith("error: ") and complaint in last and "Traceback" not in err, err
    # the rest fail before any work; a corpus of empty documents shows as such once read, after the progress bars
    assert not before or name == "blank.jsonl"
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_missing_file(tmp_path, capsys, quiet_datasets):
    assert run("--files", tmp_path / "nope.jsonl", "--out", tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "nope.jsonl" in err


def test_output_folder_that_cannot_be_made(tmp_path, capsys, quiet_datasets):
    (tmp_path / "taken").write_text("a file where the folder should go")
    assert run("--files", write_jsonl(tmp_path / "docs.jsonl", DOCS), "--out", tmp_path / "taken") == 1
    *bars, last = capsys.readouterr().err.splitlines()
    assert last.startswith("error: ") and "taken" in last and not bars


def test_refuses_to_mix_settings_in_one_folder(tmp_path, capsys, quiet_datasets):
    files, out = write_jsonl(tmp_path / "docs.jsonl", DOCS), tmp_path / "out"
    assert run("--files", files, "--out", out, "--shard-size", 1000) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    other = write_jsonl(tmp_path / "other.jsonl", DOCS[:10])
    capsys.readouterr()
    assert run("--files", other, "--out", out, "--shard-size", 2000) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "shard_size" in err and "files" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_refuses_a_folder_of_shards_without_a_manifest(tmp_path, capsys, quiet_datasets):
    out = tmp_path / "out"
    out.mkdir()
    np.save(out / "edufineweb_train_000001.npy", np.zeros(10, dtype=np.uint16))  # the lecture's script, say
    assert run("--files", write_jsonl(tmp_path / "docs.jsonl", DOCS), "--out", out) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "no manifest.json" in err
    assert sorted(p.name for p in out.iterdir()) == ["edufineweb_train_000001.npy"]


# ---- verify, interrupt, resume


def test_verify_names_each_bad_shard_and_a_rerun_rebuilds_them(tmp_path, capsys):
    files, out = write_jsonl(tmp_path / "docs.jsonl", DOCS), tmp_path / "out"
    assert run("--files", files, "--out", out, "--shard-size", 1000) == 0
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
    assert truncated.name in bad_lines[0] and flipped.name in bad_lines[1] and "sha256" in bad_lines[1]

    truncated.unlink()  # what the message advises: delete them and rerun
    flipped.unlink()
    assert run("--files", files, "--out", out, "--shard-size", 1000) == 0
    assert {p.name: p.read_bytes() for p in shard_files(out)} == good
    assert run("--verify", "--out", out) == 0


# ~250k tokens: hundreds of shards of 800 tokens, so the run lasts long enough to interrupt; and 4,000 documents:
# 16 tasks, so that work is left for a worker to die in the middle of
BIG_DOCS = sample_documents(4000, seed=1, longest=400)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clean")
    files = write_jsonl(folder / "big.jsonl", BIG_DOCS)
    assert run("--files", files, "--out", folder / "out", "--shard-size", 800, "--workers", 2) == 0
    return files, folder / "out"


def descendants(pid: int) -> list[int]:
    children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
    return children + [d for child in children for d in descendants(child)]


def wait_for_shards(out: Path, count: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "the run finished before the test could interrupt it"
        if (out / "manifest.json").exists() and len(manifest(out)["shards"]) >= count:
            return
        time.sleep(0.002)
    pytest.fail("no shards appeared")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and process groups")
@pytest.mark.parametrize("interrupt", ["kill the parent", "kill the workers", "ctrl-c"])
def test_interrupted_run_resumes_to_identical_bytes(tmp_path, capsys, clean_run, interrupt):
    if interrupt == "kill the workers" and not Path("/proc").is_dir():
        pytest.skip("finds the workers' pids in Linux's /proc")
    files, clean = clean_run
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "fineweb.py"), "--files", str(files), "--out", str(out), "--shard-size", "800",
         "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        # a job a shell starts in the background (`pytest &`, some CI runners) ignores SIGINT, and so would the run
        # it starts: give the run Ctrl-C's default, as a user's foreground command has
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_for_shards(out, 3, process)
        if interrupt == "kill the parent":
            os.kill(process.pid, signal.SIGKILL)
        elif interrupt == "kill the workers":  # as the OOM killer might
            for pid in descendants(process.pid):
                os.kill(pid, signal.SIGKILL)
        else:
            os.killpg(process.pid, signal.SIGINT)  # what the terminal sends to the whole job
        _, err = process.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever is left of the job, should the test have failed
    expected_code = {"kill the parent": -signal.SIGKILL, "kill the workers": 1, "ctrl-c": 130}[interrupt]
    assert process.returncode == expected_code, err
    if interrupt != "kill the parent":
        assert "rerun the same command to resume" in err.splitlines()[-1] and "Traceback" not in err
    assert not manifest(out)["complete"]

    capsys.readouterr()
    assert run("--files", files, "--out", out, "--shard-size", 800, "--workers", 1) == 0
    assert "resuming after" in capsys.readouterr().out  # not starting over, which would give the same bytes too
    assert [p.name for p in shard_files(out)] == [p.name for p in shard_files(clean)]
    for resumed, reference in zip(shard_files(out), shard_files(clean), strict=True):
        assert resumed.read_bytes() == reference.read_bytes(), resumed.name
    assert manifest(out)["shards"] == manifest(clean)["shards"]


def test_workers_started_by_spawn_as_on_macos_and_windows(tmp_path):
    # spawn starts each worker by importing fineweb.py afresh: without the __main__ guard every worker would rerun
    # the whole job. runpy runs the script as __main__, as `python fineweb.py` does.
    spawn = ("import multiprocessing, runpy, sys; multiprocessing.set_start_method('spawn'); "
             "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    files, out = write_jsonl(tmp_path / "docs.jsonl", DOCS), tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-c", spawn, str(ROOT / "fineweb.py"), "--files", str(files), "--out", str(out),
         "--shard-size", "1000", "--workers", "2"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert np.array_equal(token_stream(out), eot_joined(DOCS))


def test_train_gpt2_loader_reads_the_shards(tmp_path):
    import train_gpt2

    out = tmp_path / "shards"
    assert fineweb.main(["--files", str(ROOT / "input.txt"), "--out", str(out), "--shard-size", "50000",
                         "--workers", "1"]) == 0
    tokens = [50256] + enc.encode_ordinary(SHAKESPEARE)
    val, train = train_gpt2.load_split(str(out), "val"), train_gpt2.load_split(str(out), "train")
    assert len(val) == 1 and len(train) == 6
    loader = train_gpt2.DataLoaderLite(train, B=4, T=256)
    stream = np.concatenate([loader.next_batch()[0].flatten().numpy() for _ in range(250)])
    assert stream.tolist() == tokens[50000 : 50000 + len(stream)]  # across train shard ends, nothing dropped
