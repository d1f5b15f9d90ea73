"""Bad input, kills, full disks and two runs at once: train_gpt2.py, hellaswag.py, plot_log and
common.

A user's mistake is one line on stderr and exit code 1, never a traceback; nothing is lost or left
behind; nothing hangs.
"""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import fineweb
import hellaswag
import helpers
import train_gpt2
from fixtures import failing_compilers
from helpers import ROOT, TORCHRUN
from longrun import common, run_folder
from tools import plot_log, sample

TINY = ["--data", "input.txt", *helpers.TINY]


def script(name, *args, timeout=120, **kwargs):
    """`python NAME args` in the project root; a tool (tools/X.py) as users run it,
    `python -m tools.X`."""
    command = (
        ["-m", name.removesuffix(".py").replace("/", ".")]
        if str(name).startswith("tools/")
        else [name]
    )
    return helpers.run_python(*command, *args, timeout=timeout, **kwargs)


def one_line_error(proc, *words):
    """The process failed with one line on stderr (warnings aside) that holds every word."""
    lines = [line for line in proc.stderr.splitlines() if "warning" not in line.lower()]
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def main_error(capsys, argv, *words, main=train_gpt2.main):
    """one_line_error for main(argv) (train_gpt2.py's, or another program's) called in this
    process, from the project's root as `script` runs it."""
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse
        code = e.code
    finally:
        os.chdir(here)
    out, err = capsys.readouterr()
    return one_line_error(subprocess.CompletedProcess(argv, code, out, err), *words)


def tmp_leftovers(folder):
    return [p.name for p in Path(folder).rglob("*.tmp")]


# ---- flags: checked when parsed, each mistake one line


@pytest.mark.parametrize(
    "flags, words",
    [
        (["-B", "0"], ["--batch-size", "at least 1"]),
        (["-B", "-4"], ["--batch-size"]),
        (["-T", "0"], ["--seq-len"]),
        (["-T", "2048"], ["block size 1024"]),
        (["--n-layer", "0"], ["--n-layer"]),
        (["--n-head", "3", "--n-embd", "128"], ["multiple of --n-head 3"]),
        (["--vocab-size", "0"], ["--vocab-size"]),
        (["--vocab-size", "100"], ["smaller than GPT-2's tokenizer"]),
        (["--max-lr", "nan"], ["--max-lr", "positive number"]),
        (["--max-lr", "-1"], ["--max-lr"]),
        (["--weight-decay", "2"], ["--weight-decay", "0 to 1"]),
        (["--val-steps", "0"], ["--val-steps"]),
        (["--max-steps", "many"], ["--max-steps", "whole number"]),
        (["--preset", "d99"], ["invalid choice"]),
        (["--device", "nonsense"], ["'nonsense' is not a device"]),
        (["--seed", "-1"], ["--seed", "0 to 2**63 - 1"]),
        (["--seed", str(2**70)], ["--seed", "0 to 2**63 - 1"]),
        (
            ["--device", "cuda"] if not torch.cuda.is_available() else ["--device", "nonsense"],
            ["--device"],
        ),
    ],
)
def test_bad_flags(capsys, tmp_path, flags, words):
    main_error(capsys, [*TINY, "--log-dir", tmp_path / "log", *flags], *words)
    assert not (tmp_path / "log").exists()


def test_flags_as_a_user_sees_them():
    """The same, through the real script: one line, exit 1, no traceback."""
    one_line_error(
        script("train_gpt2.py", "--preset", "cpu", "-B", "0"),
        "train_gpt2.py: error:",
        "--batch-size",
    )


def test_log_dir_that_is_a_file(capsys, tmp_path):
    (tmp_path / "log").write_text("not a folder")
    main_error(capsys, [*TINY, "--log-dir", tmp_path / "log"], "is a file")
    assert (tmp_path / "log").read_text() == "not a folder"


# ---- data that cannot make a batch, or is not GPT-2 tokens


@pytest.mark.parametrize("text", ["", "Hi", "word " * 40])
def test_too_little_data_is_refused_not_a_hang(tmp_path, text):
    (tmp_path / "small.txt").write_text(text)
    proc = script(
        "train_gpt2.py",
        *TINY,
        "--data",
        tmp_path / "small.txt",
        "--log-dir",
        tmp_path / "log",
        timeout=300,
    )
    one_line_error(proc, "small.txt", "fewer than one batch", "65")


def test_without_validation_the_val_split_need_not_hold_a_batch(capsys, tmp_path):
    # 1,000 tokens: the train split's 900 hold a batch of -B 4 -T 32 (128 + 1 tokens), the val
    # split's 100 do not; a run that never validates does not need them
    (tmp_path / "small.txt").write_text(" ".join(["the"] * 1000))
    flags = [
        *TINY,
        "--data",
        tmp_path / "small.txt",
        "--log-dir",
        tmp_path / "log",
        "--max-steps",
        "1",
    ]
    main_error(
        capsys, [*flags, "-B", "4", "--total-batch", "128", "--val-every", "1"], "val split", "129"
    )
    assert train_gpt2.main([str(a) for a in [*flags, "-B", "4", "--total-batch", "128"]]) == 0


def test_shard_with_ids_beyond_the_vocabulary(capsys, tmp_path):
    np.save(tmp_path / "x_val_000000.npy", np.arange(2000, dtype=np.uint16))
    np.save(tmp_path / "x_train_000001.npy", np.full(2000, 60000, dtype=np.uint16))
    argv = [*TINY, "--data", tmp_path, "--log-dir", tmp_path / "log"]
    main_error(capsys, argv, "x_train_000001.npy", "token id 60000")


def test_npy_with_a_corrupt_header(capsys, tmp_path):
    np.save(tmp_path / "x_val_000000.npy", np.arange(2000, dtype=np.uint16))
    shard = tmp_path / "x_train_000001.npy"
    np.save(shard, np.arange(2000, dtype=np.uint16))
    raw = bytearray(shard.read_bytes())
    raw[20] = ord("!")  # inside the header's dict
    shard.write_bytes(bytes(raw))
    main_error(
        capsys, [*TINY, "--data", tmp_path, "--log-dir", tmp_path / "log"], "x_train_000001.npy"
    )


# ---- runs: identity, resume, the lock


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory):
    """A finished run of two steps, made once: each test resumes a copy of it."""
    log_dir = tmp_path_factory.mktemp("two_steps") / "log"
    proc = script("train_gpt2.py", *TINY, "--max-steps", 2, "--log-dir", log_dir)
    assert proc.returncode == 0, proc.stderr
    return log_dir


@pytest.fixture
def first_run(two_steps, tmp_path):
    """This test's copy of the two-step run: its log folder."""
    return shutil.copytree(two_steps, tmp_path / "log")


def test_resume_refuses_another_runs_log(capsys, first_run):
    log_dir = first_run
    text = (log_dir / "log.txt").read_text()
    (log_dir / "log.txt").write_text(text.replace(text.split()[2], "someoneelse", 1))
    argv = [*TINY, "--max-steps", 4, "--log-dir", log_dir, "--resume"]
    line = main_error(capsys, argv, "model_00002.pt", "someoneelse")
    assert "is from run" in line
    assert "someoneelse" in (log_dir / "log.txt").read_text()  # nothing truncated


def test_resume_refuses_other_sizes_and_settings(capsys, first_run):
    log_dir = first_run
    argv = [*TINY, "--log-dir", log_dir, "--resume"]
    main_error(capsys, [*argv, "--n-layer", 3], "--n-layer 2 (this run: 3)")
    main_error(capsys, [*argv, "--seed", 7], "--seed 1337 (this run: 7)")


def test_a_run_stopped_before_its_first_checkpoint_resumes_from_step_0(capsys, tmp_path):
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    # killed mid-write, no checkpoint
    (log_dir / "log.txt").write_text("# run abc123\n0 train 10.9\n1 train 10.")
    main_error(capsys, [*TINY, "--log-dir", log_dir], "already holds a run", "--resume")
    proc = script("train_gpt2.py", *TINY, "--max-steps", 2, "--log-dir", log_dir, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "starts again from step 0" in proc.stderr and "half-written" in proc.stderr
    lines = (log_dir / "log.txt").read_text().splitlines()
    losses = [line.split()[:2] for line in lines[1:] if line.split()[1] == "train"]
    assert lines[0] == "# run abc123" and losses == [["0", "train"], ["1", "train"]]


def test_resume_with_nothing_to_resume(capsys, tmp_path):
    main_error(capsys, [*TINY, "--log-dir", tmp_path / "log", "--resume"], "no run to continue")


def test_garbage_in_the_log_names_its_line(capsys, first_run):
    log_dir = first_run
    with open(log_dir / "log.txt", "a") as f:
        f.write("garbage here\n3 train 1.0\n")
    argv = [*TINY, "--max-steps", 4, "--log-dir", log_dir, "--resume"]
    main_error(capsys, argv, "log.txt:10:", "garbage here")


@pytest.mark.parametrize(
    "state, words",
    [
        ({"model": {}}, ["not a train_gpt2.py checkpoint"]),
        (
            {"model": {}, "config": {}},
            ["cannot be resumed", "optimizer", "missing or of the wrong type"],
        ),
        (
            {
                "model": {},
                "optimizer": {},
                "step": "2",
                "config": {},
                "loader": {},
                "args": {},
                "run_id": "x",
            },
            ["step"],
        ),
        ([1, 2, 3], ["not a train_gpt2.py checkpoint"]),
    ],
)
def test_crafted_checkpoints(capsys, tmp_path, state, words):
    # its checksum right: what follows it is what is wrong
    if isinstance(state, dict) and "model" in state:
        state = state | {"sha256": run_folder.tensor_digest(state["model"], state.get("optimizer"))}
    torch.save(state, tmp_path / "model_00005.pt")
    main_error(capsys, [*TINY, "--log-dir", tmp_path, "--resume"], "model_00005.pt", *words)


def test_a_checkpoint_that_would_run_code_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "model_00005.pt"
    # a pickle whose loading calls os.system: torch.load(weights_only=True) must refuse it
    evil.write_bytes(
        b"\x80\x02cposix\nsystem\nq\x00X"
        + len(f"touch {marker}").to_bytes(4, "little")
        + f"touch {marker}".encode()
        + b"q\x01\x85q\x02Rq\x03."
    )
    line = one_line_error(
        script("train_gpt2.py", *TINY, "--log-dir", tmp_path, "--resume"), "model_00005.pt"
    )
    assert (
        "not a readable checkpoint" in line and "weights_only" not in line and "False" not in line
    )
    data = tmp_path / "h.jsonl"
    data.write_text(json.dumps({"ctx": "A", "endings": ["b", "c", "d", "e"], "label": 0}) + "\n")
    one_line_error(
        script("hellaswag.py", "--checkpoint", evil, "--data", data, "--device", "cpu"),
        "model_00005.pt",
    )
    assert not marker.exists()


def wait_for(path, proc, seconds=300):  # a bound for a hang, not a timing: a busy machine is slow
    deadline = time.time() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_two_trainings_never_share_a_log_dir(tmp_path):
    log_dir = tmp_path / "log"
    first = subprocess.Popen(
        [sys.executable, "train_gpt2.py", *TINY, "--max-steps", "100000", "--log-dir", log_dir],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(log_dir / "log.txt", first)
        second = script("train_gpt2.py", *TINY, "--log-dir", log_dir, "--resume")
        one_line_error(second, str(log_dir), "in use by another process", f"pid {first.pid}")
    finally:
        first.send_signal(signal.SIGTERM)
        out, _ = first.communicate(timeout=300)
    # the first run was untouched: it saves and exits
    assert first.returncode == 0 and "stopped at step" in out


def test_ctrl_c_before_the_first_step_stops_at_once(tmp_path):
    # the 124M model takes seconds to build on a CPU: the signal lands there, before the
    # loop's own handler
    log_dir = tmp_path / "log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "train_gpt2.py",
            "--data",
            "input.txt",
            "-B",
            "1",
            "-T",
            "32",
            "--total-batch",
            "32",
            "--device",
            "cpu",
            "--hellaswag-every",
            "0",
            "--log-dir",
            log_dir,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(log_dir / ".lock", proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().endswith("(--resume continues from it)")
    assert not list(log_dir.glob("model_*.pt"))  # nothing to save yet


CTRL_C_INSIDE_A_WRITE = """
import signal, sys, threading, time
from longrun.common import write_atomically
# a thread with Ctrl-C not blocked, as torch's threads are
other = threading.Thread(target=threading.Event().wait, daemon=True)
other.start()
def write(f):
    f.write(b"first half, ")
    # the kernel may pick any thread for a Ctrl-C: here, that one
    signal.pthread_kill(other.ident, signal.SIGINT)
    time.sleep(0.2)  # Python raises it in the main thread at its next chance
    f.write(b"second half")
try:
    write_atomically(sys.argv[1], write)
except KeyboardInterrupt:
    print("Ctrl-C after the write:", open(sys.argv[1]).read())
"""


def test_a_ctrl_c_inside_an_atomic_write_waits_for_the_whole_file(tmp_path):
    """A checkpoint being written when a second Ctrl-C comes: the write finishes, then the
    interrupt. Blocking the signal in the main thread was not enough (a traceback from inside
    torch.save, no checkpoint): another thread took it, and Python raised it in the main thread
    all the same."""
    target = tmp_path / "model.pt"
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_INSIDE_A_WRITE, str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == "Ctrl-C after the write: first half, second half\n"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]  # no temporary file left


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    """The first Ctrl-C asks the run to finish its step and save; a second one, during that step,
    stops it there."""
    log_dir = tmp_path / "log"
    # the 124M model on 512 tokens: a step takes seconds on a CPU, so the second signal lands inside
    # the step the first one ends, not in the checkpoint written after it (a quiet machine did 64
    # tokens in under 0.5 s)
    argv = [
        "--data",
        "input.txt",
        "-B",
        "1",
        "-T",
        "512",
        "--total-batch",
        "512",
        "--device",
        "cpu",
    ]
    argv += [
        "--val-every",
        "0",
        "--hellaswag-every",
        "0",
        "--sample-every",
        "0",
        "--log-dir",
        str(log_dir),
    ]
    proc = subprocess.Popen(
        [sys.executable, "train_gpt2.py", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:
        if line.startswith("step     0"):
            proc.send_signal(signal.SIGINT)
            break
    heard = next(
        line for line in proc.stderr if line.startswith("Ctrl-C") or "warning" not in line.lower()
    )
    assert (
        heard
        == "Ctrl-C: the run stops after this step, with a checkpoint; Ctrl-C again stops it now\n"
    ), heard
    # once the run has said it heard the first: inside the step it will finish
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("train_gpt2.py: interrupted: nothing since the last checkpoint")
    )
    assert not list(log_dir.glob("*.tmp"))


# ---- full disks and read-only folders


def test_a_failed_checkpoint_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def disk_full(obj, f):
        f.write(b"x" * 1000)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f.name)

    monkeypatch.setattr(torch, "save", disk_full)
    target = tmp_path / "model_00001.pt"
    with pytest.raises(OSError):
        common.write_atomically(target, lambda f: torch.save({}, f))
    assert list(tmp_path.iterdir()) == []


def test_os_errors_are_one_line(capsys, tmp_path):
    def full():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "model_00001.pt.tmp"))

    assert common.run_cli("train_gpt2.py", full) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert (
        line == f"train_gpt2.py: error: {tmp_path / 'model_00001.pt.tmp'}: No space left on device"
    )


def test_a_full_disk_during_training_is_one_line_and_resumable(tmp_path):
    # a checkpoint write that fails as a full disk would (sitecustomize-free: a wrapper
    # script patches torch.save)
    wrapper = tmp_path / "full_disk.py"
    wrapper.write_text(
        "import errno, os, runpy, sys, torch\n"
        "def save(obj, f):\n"
        "    f.write(b'partial')\n"
        "    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f.name)\n"
        "torch.save = save\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "sys.argv = ['train_gpt2.py', *sys.argv[1:]]\n"
        "runpy.run_path('train_gpt2.py', run_name='__main__')\n"
    )
    log_dir = tmp_path / "log"
    proc = script(wrapper, *TINY, "--max-steps", 2, "--log-dir", log_dir)
    one_line_error(proc, "model_00002.pt.", ".tmp: No space left on device")
    assert tmp_leftovers(log_dir) == []
    again = script("train_gpt2.py", *TINY, "--max-steps", 2, "--log-dir", log_dir, "--resume")
    # no checkpoint was written: the run starts again from step 0
    assert again.returncode == 0, again.stderr
    assert (log_dir / "model_00002.pt").exists()


# ---- hellaswag.py and tools/plot_log.py


def test_hellaswag_context_longer_than_the_model(tmp_path):
    """A 3,000-token context is cut from the left to the model's 1,024 positions,
    as lm-eval does."""
    from longrun import hellaswag_scoring

    model = train_gpt2.GPT(
        train_gpt2.GPTConfig(block_size=64, n_layer=1, n_head=1, n_embd=16)
    ).eval()
    example = {"ctx": "word " * 3000, "endings": ["a", "b c", "d e f", "g"], "label": 0}
    ((pred, pred_norm),) = hellaswag_scoring.predict(
        model, [example], device="cpu", fixed_shape=True
    )
    assert 0 <= pred < 4 and 0 <= pred_norm < 4
    ctx, cont = hellaswag_scoring.fit(list(range(3000)), [7, 8, 9], 64)
    assert ctx == list(range(3000 - 62, 3000)) and len(ctx) + len(cont) - 1 == 64
    with pytest.raises(common.UserError, match="does not fit"):
        hellaswag_scoring.fit([1], list(range(70)), 64)


def test_hellaswag_on_a_corrupt_transformers_folder(capsys, tmp_path):
    folder = tmp_path / "broken-gpt2"
    folder.mkdir()
    (folder / "config.json").write_text("{ not json")
    data = tmp_path / "h.jsonl"
    data.write_text(json.dumps({"ctx": "A", "endings": ["b", "c", "d", "e"], "label": 0}) + "\n")
    argv = ["--model", folder, "--data", data, "--device", "cpu"]
    main_error(capsys, argv, "hellaswag.py: error:", "broken-gpt2", main=hellaswag.main)


def test_hellaswag_bad_device(capsys):
    main_error(capsys, ["--device", "nonsense"], "not a device", main=hellaswag.main)


def test_plot_into_a_missing_folder(capsys, tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("0 train 10.9\n1 train 9.0\n")
    argv = [log, "-o", tmp_path / "no" / "such" / "x.png"]
    words = ["plot_log.py: error:", "No such file or directory"]
    main_error(capsys, argv, *words, main=plot_log.main)


def test_plot_names_the_file_it_writes(capsys, tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("0 train 10.9\n1 train 9.0\n")
    assert plot_log.main([str(log), "-o", str(tmp_path / "curves")]) == 0
    # what the picture shows, then where it went
    assert capsys.readouterr().out.splitlines() == [
        "train: 10.9 at step 0 -> 9 at step 1",
        f"wrote {tmp_path / 'curves.png'}",
    ]
    assert (tmp_path / "curves.png").exists()


# ---- found by a review: checkpoint order past step 99,999, --data on resume, configs,
# formats, ranks, writers


def test_checkpoints_are_ordered_by_step_not_by_name(tmp_path):
    for step in (5000, 95000, 100000):
        (tmp_path / f"model_{step:05d}.pt").write_bytes(b"")
    (tmp_path / "model_notes.pt").write_bytes(b"")  # not a name save_checkpoint writes
    assert [p.rsplit("/", 1)[1] for p in run_folder.checkpoints(tmp_path)] == [
        "model_05000.pt",
        "model_95000.pt",
        "model_100000.pt",
    ]


def test_resume_on_other_data_is_refused(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    for i, split in enumerate(["val", "train", "train", "train"]):
        np.save(shards / f"x_{split}_{i:06d}.npy", np.arange(100, 300, dtype=np.uint16))
    log_dir = tmp_path / "log"
    flags = [*TINY, "--max-steps", "2", "--log-dir", log_dir]
    assert script("train_gpt2.py", *flags, "--data", shards).returncode == 0
    one_line_error(
        script("train_gpt2.py", *flags, "--resume"), f"--data {shards} (this run: input.txt)"
    )


@pytest.mark.parametrize("config", [{"n_head": 3, "n_embd": 32}, {"n_layer": "2"}, {"n_layer": 0}])
def test_hellaswag_checkpoint_with_an_impossible_config(capsys, tmp_path, config):
    model = train_gpt2.GPT(train_gpt2.GPTConfig(block_size=64, n_layer=1, n_head=1, n_embd=16))
    path = tmp_path / "model_00001.pt"
    state = {
        "model": model.state_dict(),
        "config": {"n_layer": 1, "n_head": 1, "n_embd": 16, **config},
    }
    torch.save(state | {"sha256": run_folder.tensor_digest(state["model"])}, path)
    data = tmp_path / "h.jsonl"
    data.write_text(json.dumps({"ctx": "A", "endings": ["b", "c", "d", "e"], "label": 0}) + "\n")
    argv = ["--checkpoint", path, "--data", data, "--device", "cpu"]
    main_error(capsys, argv, "model_00001.pt", main=hellaswag.main)


def test_plot_in_a_format_matplotlib_cannot_write(capsys, tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("0 train 10.9\n1 train 9.0\n")
    argv = [log, "-o", tmp_path / "curves.txt"]
    main_error(capsys, argv, "cannot write", "curves.txt", main=plot_log.main)
    assert not (tmp_path / "curves.txt").exists()


def test_every_rank_reports_a_mistake_itself(tmp_path):
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    (log_dir / "log.txt").write_text("0 train 1.0\n")
    proc = subprocess.run(
        [*TORCHRUN, "train_gpt2.py", *TINY, "--total-batch", "128", "--log-dir", log_dir],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert proc.stderr.count("train_gpt2.py: error:") == 2 and "already holds a run" in proc.stderr
    # torchrun reports the failure; our code shows no traceback
    assert 'train_gpt2.py", line' not in proc.stderr
    assert (log_dir / "log.txt").read_text() == "0 train 1.0\n"


def test_two_writers_of_one_path_never_share_a_temporary_file(tmp_path):
    target = tmp_path / "same.bin"
    code = (
        "import sys, longrun.common as common\n"
        "for i in range(200):\n"
        "    common.write_atomically(\n"
        "        sys.argv[1], lambda f: f.write(sys.argv[2].encode() * 100_000)\n"
        "    )\n"
    )
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(target), mark],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mark in "ab"
    ]
    errors = [w.communicate(timeout=120)[1] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], errors
    # one writer's whole file, never a mix
    assert target.read_bytes() in (b"a" * 100_000, b"b" * 100_000)
    assert list(tmp_path.iterdir()) == [target]


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "manifest.json"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f"manifest.json.{int(dead.stdout)}.tmp"  # as SIGKILL mid-write leaves it
    stale.write_bytes(b"half")
    other = tmp_path / "manifest.json.notes.tmp"  # not a name write_atomically makes: left alone
    other.write_bytes(b"someone's")
    mine = tmp_path / f"manifest.json.{os.getppid()}.tmp"  # a running process's: left alone
    mine.write_bytes(b"half")
    common.write_atomically(target, lambda f: f.write(b"{}"))
    assert target.read_bytes() == b"{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [target.name, mine.name, other.name]
    )


# ---- a file of ours is never written through a link


@pytest.mark.parametrize("name", ["console.txt", ".lock"])
def test_a_link_in_place_of_a_run_file_is_refused_and_its_target_untouched(capsys, tmp_path, name):
    theirs = tmp_path / "someone-elses.txt"
    theirs.write_text("keep me\n")
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    (log_dir / name).symlink_to(theirs)
    argv = ["--data", "input.txt", *TINY, "--max-steps", "1", "--log-dir", log_dir]
    main_error(capsys, argv, f"{log_dir / name} is a symbolic link")
    assert theirs.read_text() == "keep me\n"


def test_a_link_in_place_of_a_shard_folders_lock_is_refused(capsys, tmp_path):
    theirs = tmp_path / "someone-elses.txt"
    theirs.write_text("keep me\n")
    out = tmp_path / "shards"
    out.mkdir()
    (out / ".lock").symlink_to(theirs)
    code = fineweb.main(
        ["--files", "input.txt", "--out", str(out), "--shard-size", "50000", "--workers", "1"]
    )
    err = capsys.readouterr().err  # datasets' progress bars may come first, on a cold cache
    assert code == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"fineweb.py: error: {out / '.lock'} is a symbolic link: "
        "remove it (nothing is written through a link)"
    )
    assert theirs.read_text() == "keep me\n"


def test_a_checkpoint_with_damaged_tensors_is_refused_wherever_it_is_read(capsys, tmp_path):
    """4 KiB of flipped bytes inside the weights: the file still loads, but its tensors no
    longer match the checksum saved with them, so resuming, sampling and scoring it are each
    refused in one line."""
    log_dir = tmp_path / "log"
    assert script("train_gpt2.py", *TINY, "--max-steps", "1", "--log-dir", log_dir).returncode == 0
    path = log_dir / "model_00001.pt"
    data = bytearray(path.read_bytes())
    # torch.save's zip: the first tensor's bytes follow its entry's name
    weights = data.index(b"data/0")
    middle = weights + (len(data) - weights) // 2
    data[middle : middle + 4096] = bytes(b ^ 0xFF for b in data[middle : middle + 4096])
    path.write_bytes(bytes(data))
    assert torch.load(path, weights_only=True)["model"]  # it loads: only the checksum can tell
    main_error(capsys, [*TINY, "--max-steps", "2", "--log-dir", log_dir, "--resume"], "is damaged")
    main_error(capsys, [path, "--device", "cpu"], "model_00001.pt is damaged", main=sample.main)


def test_a_log_step_in_other_digits_is_named_not_a_traceback(tmp_path):
    """'²3' passes str.isdigit, but int() refuses it: the line is an error naming it."""
    log = tmp_path / "log.txt"
    log.write_text("# run abc\n0 train 10.5\n²3 train 9.1\n")
    with pytest.raises(
        common.UserError, match=r"log.txt:3: expected '<step> <kind> <value>', got '²3 train 9.1'"
    ):
        run_folder.read_log(str(log))


def test_a_log_holding_a_diverged_runs_nan_reads_back(tmp_path):
    """A diverged run logs its validation loss as nan: its log must read back, to resume it or
    to plot it."""
    log = tmp_path / "log.txt"
    log.write_text("# run abc\n0 train 10.5\n1 val nan\n2 train inf\n")
    assert run_folder.read_log(str(log)) == (
        "abc",
        ["0 train 10.5\n", "1 val nan\n", "2 train inf\n"],
    )


@pytest.mark.parametrize("name", ["train_gpt2.py", "tools/preflight.py"])
def test_a_model_too_big_for_memory_is_one_line(name, tmp_path):
    """A width of 2**20: GPT-2's embedding alone would take 196 GiB."""
    flags = [
        *TINY,
        "--n-layer",
        "1",
        "--n-head",
        "1",
        "--n-embd",
        2**20,
        "--max-steps",
        "1",
        "--log-dir",
        tmp_path,
    ]
    line = one_line_error(script(name, *flags), "out of memory: ", "GiB asked for at once")
    assert f"{Path(name).name}: error: " in line


@pytest.mark.parametrize("name", ["tools/sample.py", "tools/export_hf.py"])
def test_a_checkpoint_too_big_for_memory_is_one_line(name, tmp_path):
    """A checkpoint whose config asks for a width of 2**20 (its weights left out): building
    its model fails."""
    config = dict(block_size=1024, vocab_size=50304, n_layer=1, n_head=1, n_embd=2**20)
    path = tmp_path / "big.pt"
    torch.save({"model": {}, "config": config, "sha256": run_folder.tensor_digest({}, None)}, path)
    args = [path, tmp_path / "out"] if name == "tools/export_hf.py" else [path]
    line = one_line_error(script(name, *args), "out of memory: ", "GiB asked for at once")
    assert f"{Path(name).name}: error: " in line


def test_preflight_counts_a_trillion_steps_checkpoints_without_listing_them(tmp_path):
    """--max-steps 1e12 --checkpoint-every 1 made a set of 1e12 steps (MemoryError); now the disk
    check refuses it."""
    flags = [*TINY, "--max-steps", "1e12", "--checkpoint-every", "1", "--log-dir", tmp_path / "log"]
    proc = script("tools/preflight.py", *flags, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    disk = next(line for line in proc.stdout.splitlines() if line.startswith("disk "))
    assert disk.split()[1] == "FAIL" and "1000000000000 x" in disk, proc.stdout


def test_a_failed_write_that_names_no_file_is_told_with_the_file(tmp_path, capsys):
    """A full disk, as a plain f.write reports it, names no file: the line names the
    one being written."""

    def full(f):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    assert common.run_cli("x.py", lambda: common.write_atomically(tmp_path / "a.bin", full)) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"x.py: error: {tmp_path / 'a.bin'}.") and line.endswith(
        ".tmp: No space left on device"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "failure",
    [
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 21824 vs 21718"),
        OSError("200000 requested and 118720 written"),
    ],
    ids=["torch.save's zip writer", "numpy's short write"],
)
def test_a_full_disk_in_a_writers_own_words_is_no_space_left(
    tmp_path, capsys, monkeypatch, failure
):
    """torch.save and np.save report a full disk in words of their own, naming no errno: where the
    disk is out of space, the line says so and names the file; elsewhere torch's RuntimeError is a
    bug's and keeps its traceback."""

    def write(f):
        f.write(b"half")
        raise failure

    monkeypatch.setattr(common, "out_of_space", lambda path: True)
    assert common.run_cli("x.py", lambda: common.write_atomically(tmp_path / "a.bin", write)) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"x.py: error: {tmp_path / 'a.bin'}.") and line.endswith(
        ".tmp: No space left on device"
    )
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(common, "out_of_space", lambda path: False)
    # a short write with room left (a quota, say) is still the disk's: its words
    if isinstance(failure, OSError):
        assert (
            common.run_cli("x.py", lambda: common.write_atomically(tmp_path / "a.bin", write)) == 1
        )
        assert capsys.readouterr().err.strip().endswith(".tmp: 200000 requested and 118720 written")
    else:
        with pytest.raises(RuntimeError):
            common.run_cli("x.py", lambda: common.write_atomically(tmp_path / "a.bin", write))
    assert list(tmp_path.iterdir()) == []


def test_no_tokenizer_files_and_no_network_is_one_line_naming_the_cache(tmp_path):
    """tiktoken downloads GPT-2's BPE files on first use: offline with an empty cache, the line says
    what to set."""
    (tmp_path / "empty").mkdir()
    # a proxy nobody listens on: no network, here or on a machine that has one
    unreachable = "http://127.0.0.1:9"
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty"), "HTTPS_PROXY": unreachable}
    proc = script(
        "train_gpt2.py", "--preset", "cpu", "--max-steps", 1, "--log-dir", tmp_path / "log", env=env
    )
    one_line_error(proc, "cannot download GPT-2's tokenizer", "set TIKTOKEN_CACHE_DIR")


def test_a_compiler_that_does_not_work_is_one_line(tmp_path):
    """preflight finds a gcc on PATH; one that fails (broken, or the wrong one) still ends the run
    in one line."""
    bin_ = failing_compilers(tmp_path / "bin")
    env = {
        **os.environ,
        "PATH": f"{bin_}:{os.environ['PATH']}",
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
    }
    argv = [*TINY, "--compile", "--max-steps", 1, "--log-dir", tmp_path / "log"]
    proc = script("train_gpt2.py", *argv, env=env, timeout=300)
    one_line_error(
        proc, "torch.compile could not build its code (InvalidCxxCompiler", "pass --no-compile"
    )
