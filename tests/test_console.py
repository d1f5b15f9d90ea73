"""The run's output on disk: console.txt holds every line the run printed, each after the
time it was printed, and a resumed run's lines follow the first run's; each step line ends
with the time left."""

import os
import re
import signal
import sys
import time

import pytest
import torch

import helpers
import train_gpt2
from helpers import ROOT
from longrun import meters, run_folder
from longrun.common import open_no_link

TINY = [*helpers.TINY, "--val-every", "2", "--val-steps", "1"]  # and a validation every 2 steps
STAMP = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (.*)")


@pytest.fixture
def train(capsys, tmp_path):
    """train_gpt2.main with TINY and these flags, in this process: its stdout lines. (The run
    installs its signal handlers; the fixture puts pytest's back, and torch's thread count.)"""
    handlers = {
        signum: signal.getsignal(signum)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    threads = torch.get_num_threads()
    # a tiny model: more threads only wait for each other on a busy machine
    torch.set_num_threads(1)
    data = tmp_path / "input.txt"  # a tenth of tiny shakespeare: tokenized in a tenth of the time
    data.write_text((ROOT / "input.txt").read_text()[:100_000])

    def run(*args):
        assert train_gpt2.main([*TINY, "--data", str(data), *map(str, args)]) == 0, (
            capsys.readouterr().err
        )
        return capsys.readouterr().out.splitlines()

    yield run
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    torch.set_num_threads(threads)


def test_console_holds_every_printed_line_with_its_time_and_resume_appends(tmp_path, train):
    started = time.time()
    first = train("--max-steps", 2, "--log-dir", tmp_path / "log")
    resumed = train("--max-steps", 3, "--log-dir", tmp_path / "log", "--resume")
    finished = time.time()
    console = (tmp_path / "log" / "console.txt").read_text().splitlines()
    stamped = [STAMP.fullmatch(line) for line in console]
    assert all(stamped), console
    # nothing the terminal showed is missing, in order
    assert [m[2] for m in stamped] == first + resumed
    times = [time.mktime(time.strptime(m[1], "%Y-%m-%d %H:%M:%S")) for m in stamped]
    assert int(started) <= times[0] and times == sorted(times) and times[-1] <= finished
    assert first[2].startswith("validation loss:")
    # its own format still, and no times
    metrics = (tmp_path / "log" / "log.txt").read_text().splitlines()[1:]
    assert metrics[:2] == [f"0 val {first[2].split()[-1]}", f"0 train {first[3].split()[4]}"], (
        metrics
    )
    steps = [line for line in first + resumed if line.startswith("step ")]
    assert [int(line.split()[1]) for line in steps] == [0, 1, 2]
    assert all(re.search(r" \| eta \d+ s$", line) for line in steps), steps
    assert steps[-1].endswith("| eta 0 s")


def test_console_holds_the_error_that_stops_a_run_and_log_txt_its_health(tmp_path, capsys):
    """A run stopped by a mistake ends its console.txt with the error line, as the terminal
    showed it; log.txt holds the learning rate, the gradient norm and the throughput of every
    step it took."""
    data = tmp_path / "input.txt"
    data.write_text((ROOT / "input.txt").read_text()[:100_000])
    log_dir = tmp_path / "nan"
    handlers = {
        signum: signal.getsignal(signum)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        status = train_gpt2.main(
            [*TINY, "--data", str(data), "--log-dir", str(log_dir), "--max-lr", "1e30"]
        )
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    error = capsys.readouterr().err.splitlines()[-1]
    assert status == 1 and error.startswith(
        "train_gpt2.py: error: loss nan, gradient norm nan at step 1:"
    )
    assert (
        STAMP.fullmatch(console := (log_dir / "console.txt").read_text().splitlines()[-1])[2]
        == error
    ), console
    assert not isinstance(sys.stdout, run_folder.Console)  # the copy ended with the run
    kinds = [
        line.split()[1]
        for line in (log_dir / "log.txt").read_text().splitlines()[1:]
        if line.startswith("0 ")
    ]
    # mfu only where the peak is known
    assert kinds == ["val", "train", "lr", "norm", "tok_s"], kinds


def test_console_holds_a_bug_s_traceback_too(tmp_path, capsys, monkeypatch):
    """A bug is no user's mistake: it keeps its traceback, and console.txt keeps it as the
    terminal showed it."""
    data = tmp_path / "input.txt"
    data.write_text((ROOT / "input.txt").read_text()[:100_000])

    def bug(*args):
        raise ValueError("a bug")

    monkeypatch.setattr(train_gpt2, "checkpoint_due", bug)  # called after the first step
    handlers = {
        signum: signal.getsignal(signum)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        status = train_gpt2.main([*TINY, "--data", str(data), "--log-dir", str(tmp_path / "bug")])
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    err = capsys.readouterr().err
    assert status == 1 and err.startswith("Traceback") and err.endswith("ValueError: a bug\n")
    console = (tmp_path / "bug" / "console.txt").read_text()
    assert console.rstrip().endswith("ValueError: a bug") and "Traceback" in console


def test_time_left_goes_by_the_pace_since_the_first_step(monkeypatch):
    clock = [1000.0, 1010.0, 1030.0, 1060.0]  # when each step ends
    monkeypatch.setattr(
        train_gpt2.time, "time", lambda: clock[0] if len(clock) == 1 else clock.pop(0)
    )
    eta = meters.TimeLeft(max_steps=500)
    assert eta(0, 0.05) == " | eta 25 s"  # the first step: its own 0.05 s for each of the 499 left
    assert eta(1, 5.0) == " | eta 83.0 min"  # 10 s since the first: 10 s for each of the 498 left
    # 30 s over 2 steps, evaluation included: 15 s each, 497 left
    assert eta(2, 5.0) == " | eta 2.1 h"
    assert eta(498, 5.0) == " | eta 20 s"  # 60 s over 3 steps, 1 left


def logged(log_dir, kind):
    """[(step, value)] of one kind of log.txt's lines."""
    lines = (log_dir / "log.txt").read_text().splitlines()[1:]
    return [(int(step), float(value)) for step, k, value in map(str.split, lines) if k == kind]


def test_a_full_disk_ends_the_copy_on_a_whole_line_and_says_so(tmp_path, capsys, monkeypatch):
    path = tmp_path / "console.txt"
    run_folder.Console.start(str(path))
    try:
        print("first line")
        real_write = run_folder.os.write
        # the disk takes 7 bytes
        monkeypatch.setattr(run_folder.os, "write", lambda fd, data: real_write(fd, data[:7]))
        print("second line")
        monkeypatch.undo()
        print("third line")
    finally:
        run_folder.Console.stop()
    out, err = capsys.readouterr()
    assert out == "first line\nsecond line\nthird line\n"  # the terminal still shows everything
    assert err == f"warning: {path}: No space left on device; the copy of the output stops here\n"
    assert [line.split(" ", 2)[2] for line in path.read_text().splitlines()] == ["first line"]


def test_log_txt_gets_one_write_a_step(tmp_path, train, monkeypatch):
    """A step's loss and health lines (lr, norm, tok_s) go to log.txt together: the file is opened
    once a step."""
    opened = []

    def counting(path, mode):
        if os.path.basename(path) == "log.txt":
            opened.append(path)
        return open_no_link(path, mode)

    monkeypatch.setattr(run_folder, "open_no_link", counting)
    train("--max-steps", 4, "--val-every", 0, "--log-dir", tmp_path / "log")
    assert len(opened) == 4
    kinds = [
        line.split()[1] for line in (tmp_path / "log" / "log.txt").read_text().splitlines()[1:]
    ]
    assert kinds == ["train", "lr", "norm", "tok_s"] * 4  # no mfu on a CPU: its peak is not known
