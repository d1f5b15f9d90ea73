"""preflight.py passes a good setup and refuses a bad one, one line per check; the normal start
refuses a shard folder that fineweb.py has not finished or that differs from its manifest, naming
the `fineweb.py --verify` command."""

import json
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

import fineweb
import helpers
import train_gpt2
from fixtures import failing_compilers
from helpers import ROOT
from longrun import common
from longrun.shards import load_shard
from tools import preflight

TINY = [*helpers.TINY, "--max-steps", "2"]


@pytest.fixture(scope="module")
def made_shards(tmp_path_factory):
    """A folder fineweb.py made: 20,000 characters of tiny shakespeare, 1 val and 4 train shards
    (1,500 tokens each)."""
    folder = tmp_path_factory.mktemp("made")
    text = folder / "text.txt"
    text.write_text((ROOT / "input.txt").read_text()[:20_000])
    assert (
        fineweb.main(
            [
                "--files",
                str(text),
                "--out",
                str(folder / "shards"),
                "--shard-size",
                "1500",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    return folder / "shards"


@pytest.fixture
def shards(made_shards, tmp_path):
    """A copy of the folder, for a test to damage."""
    return Path(
        shutil.copytree(made_shards, tmp_path / "shards", ignore=shutil.ignore_patterns(".lock"))
    )


@pytest.fixture(autouse=True)
def restored():
    """The in-process runs install their signal handlers and use one thread: put
    pytest's back afterwards."""
    handlers = {
        signum: signal.getsignal(signum)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    torch.set_num_threads(threads)


def check(capsys, *flags):
    """(exit status, {check: (ok or FAIL, its line)}, the last line) of tools/preflight.py
    with these flags."""
    status = preflight.main([*TINY, *map(str, flags)])
    lines = capsys.readouterr().out.splitlines()
    checks = {line.split()[0]: (line.split()[1], line.split(maxsplit=2)[2]) for line in lines[:-1]}
    return status, checks, lines[-1]


def checkpoint_bytes():
    """What preflight expects TINY's checkpoint to take: float32 weights and AdamW's two moments."""
    config = train_gpt2.GPTConfig(vocab_size=50304, n_layer=2, n_head=2, n_embd=32)
    return 12 * sum(p.numel() for p in train_gpt2.GPT(config).parameters())


def test_passes_a_good_setup(capsys, shards, tmp_path):
    status, checks, verdict = check(capsys, "--data", shards, "--log-dir", tmp_path / "log")
    assert status == 0 and verdict == "the run would start", checks
    assert list(checks) == list(preflight.CHECKS) and all(ok == "ok" for ok, _ in checks.values())
    tokens = sum(len(load_shard(str(p))) for p in shards.glob("*_train_*.npy"))
    assert checks["data"][1] == (
        f"{shards} (5 shards match manifest.json): train {tokens:,} tokens, val 1,500; "
        f"2 steps x 64 tokens = {2 * 64 / tokens:.2f} epochs"
    )
    assert checks["batch"][1].endswith("= 64 tokens per micro-step; 64 per step: grad accum 1")
    assert checks["run"][1] == f"{tmp_path / 'log'}: a fresh run"
    assert not (tmp_path / "log").exists()  # nothing written
    assert f"1 x {checkpoint_bytes() / 1e9:.2f} GB of checkpoints" in checks["disk"][1]
    # the measured step: a few ms at this size
    ms = float(checks["time"][1].split("ms per step")[0])
    assert checks["time"][1].endswith(
        f"2 steps take about {2 * ms / 1000:.0f} s, evaluation not counted"
    )


def test_looks_at_a_run_folders_lock_without_writing_one(capsys, shards, tmp_path):
    # a folder, empty: preflight checks whether a run holds it, and creates nothing there
    (tmp_path / "log").mkdir()
    status, checks, verdict = check(capsys, "--data", shards, "--log-dir", tmp_path / "log")
    assert status == 0 and list((tmp_path / "log").iterdir()) == [], checks


def test_refuses_an_unfinished_shard_folder_and_so_does_the_run(capsys, shards, tmp_path):
    manifest = json.loads((shards / "manifest.json").read_text())
    # as an interrupted run leaves it
    (shards / "manifest.json").write_text(json.dumps(manifest | {"complete": False}))
    status, checks, verdict = check(capsys, "--data", shards, "--log-dir", tmp_path / "log")
    assert status == 1 and verdict == "2 of 7 checks failed: the run would not start"
    assert checks["data"] == (
        "FAIL",
        f"{shards} is unfinished: rerun the fineweb.py command that made it, "
        f"then check it with: python fineweb.py --verify --out {shards}",
    )
    assert checks["time"] == (
        "FAIL",
        "not measured: the data, batch and device checks must pass first",
    )
    assert train_gpt2.main([*TINY, "--data", str(shards), "--log-dir", str(tmp_path / "log")]) == 1
    assert capsys.readouterr().err.strip() == f"train_gpt2.py: error: {checks['data'][1]}"


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda path: path.unlink(), "edufineweb_train_000002.npy missing"),
        (
            lambda path: np.save(path, np.load(path)[:-1]),
            "edufineweb_train_000002.npy holds 1,499 tokens",
        ),
    ],
)
def test_the_run_refuses_shards_that_differ_from_the_manifest(
    capsys, shards, tmp_path, damage, problem
):
    damage(shards / "edufineweb_train_000002.npy")
    assert train_gpt2.main([*TINY, "--data", str(shards), "--log-dir", str(tmp_path / "log")]) == 1
    error = capsys.readouterr().err.strip()
    assert problem in error and error.endswith(f"run python fineweb.py --verify --out {shards}"), (
        error
    )


def test_only_preflight_reads_every_byte(capsys, shards, tmp_path):
    shard = shards / "edufineweb_train_000002.npy"
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 1  # one token changed: the size is right, the sha256 is not
    shard.write_bytes(bytes(raw))
    status, checks, _ = check(capsys, "--data", shards, "--log-dir", tmp_path / "log")
    assert status == 1 and checks["data"] == (
        "FAIL",
        f"{shard}: sha256 differs: run python fineweb.py --verify --out {shards}",
    )


@pytest.mark.parametrize(
    "flags, problem",
    [
        (
            ["--weight-decay", "0.2"],
            "was trained with --weight-decay 0.1 (this run: 0.2): pass its settings to --resume it",
        ),
        (
            ["--n-layer", "3"],
            "was trained with --n-layer 2 (this run: 3): pass its settings to --resume it",
        ),
    ],
)
def test_refuses_a_contradicting_resume(capsys, tmp_path, flags, problem):
    log_dir = tmp_path / "log"
    assert train_gpt2.main([*TINY, "--data", "input.txt", "--log-dir", str(log_dir)]) == 0
    # the disk check's size
    assert abs((log_dir / "model_00002.pt").stat().st_size / checkpoint_bytes() - 1) < 0.02
    status, checks, _ = check(
        capsys, "--data", "input.txt", "--log-dir", log_dir, "--resume", *flags
    )
    assert status == 1 and checks["run"] == ("FAIL", f"{log_dir / 'model_00002.pt'} {problem}"), (
        checks
    )
    status, checks, _ = check(
        capsys, "--data", "input.txt", "--log-dir", log_dir, "--resume", "--max-steps", 3
    )
    assert status == 0 and checks["run"] == (
        "ok",
        f"{log_dir}: resumes {log_dir / 'model_00002.pt'} at step 2 of 3",
    )


def test_resume_of_a_finished_run_says_it_is_done(capsys, tmp_path):
    log_dir = tmp_path / "log"
    flags = [
        *TINY,
        "--data",
        "input.txt",
        "--log-dir",
        str(log_dir),
        "--val-every",
        "1",
        "--val-steps",
        "1",
    ]
    assert train_gpt2.main(flags) == 0
    capsys.readouterr()
    log = (log_dir / "log.txt").read_text()
    assert train_gpt2.main([*flags, "--resume"]) == 0
    done = f"{log_dir}: the run is done: {log_dir / 'model_00002.pt'} is step 2, --max-steps is 2"
    assert capsys.readouterr().out == done + "\n"  # no validation again, no samples
    assert (log_dir / "log.txt").read_text() == log  # the final validation is still there, once
    assert (log_dir / "console.txt").read_text().splitlines()[-1].endswith(done)
    status, checks, _ = check(capsys, "--data", "input.txt", "--log-dir", log_dir, "--resume")
    assert status == 0 and checks["run"] == ("ok", f"{done}; --resume only says so")
    # done, but not a run of this size: refused, naming both values, not "done"
    assert train_gpt2.main([*flags, "--resume", "--n-layer", "3"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"train_gpt2.py: error: {log_dir / 'model_00002.pt'} was trained with --n-layer 2 "
        "(this run: 3): pass its settings to --resume it"
    ]


def test_hellaswag_offline_names_the_flag_for_a_local_file(capsys, tmp_path, monkeypatch):
    def offline():
        raise common.UserError("could not download https://example/hellaswag_val.jsonl: no network")

    monkeypatch.setattr(train_gpt2.hellaswag_scoring, "download", offline)
    flags = ["--data", "input.txt", "--log-dir", tmp_path / "log", "--hellaswag-every", 1]
    status, checks, _ = check(capsys, *flags)
    message = (
        "HellaSwag: could not download https://example/hellaswag_val.jsonl: no network "
        "(or pass --hellaswag-data FILE, or turn it off with --hellaswag-every 0)"
    )
    assert status == 1 and checks["hellaswag"] == ("FAIL", message)
    assert train_gpt2.main([*TINY, *map(str, flags)]) == 1
    assert capsys.readouterr().err == f"train_gpt2.py: error: {message}\n"


def test_the_device_line_counts_this_machines_gpus(monkeypatch):
    """--world-size counts the processes on every machine: 16 on a machine of 8 GPUs is
    two such machines."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(train_gpt2, "pick_device", lambda name: "cuda")
    monkeypatch.setattr(preflight, "compiler_missing", lambda: None)
    args = train_gpt2.parse_args([])
    line = preflight.check_device(preflight.Plan(args, 16))
    assert line == "8 x NVIDIA H100 80GB HBM3 on each of 2 machines, bfloat16, compile on"
    assert preflight.check_device(preflight.Plan(args, 4)).startswith("4 x NVIDIA H100")
    with pytest.raises(common.UserError, match="12 processes do not fill machines of 8 GPUs each"):
        preflight.check_device(preflight.Plan(args, 12))


def test_a_compiler_that_fails_fails_the_device_check(tmp_path, monkeypatch):
    """A gcc on PATH that does not work (broken, or the wrong one): found before the run, not at
    its first step."""
    bin_ = failing_compilers(tmp_path / "bin", says="gcc: internal error")
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    args = train_gpt2.parse_args(["--device", "cpu", "--compile"])
    with pytest.raises(
        common.UserError,
        match="torch.compile needs a C compiler that works .*: gcc: internal error",
    ):
        preflight.check_device(preflight.Plan(args, 1))
