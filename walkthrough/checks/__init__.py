"""Behavioural checks for the exercises, one per step of Parts 0 and I, keyed by the step's Step-Id
(see core.py).

`run(tree, slugs)` runs checks against a tree in a fresh process started in it (the tree's modules
shadow ours there) and returns one Result per check, in order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import autograd, data, evals, model, optim, speed  # noqa: F401  (each registers its checks)
from .core import CHECKS, Check, environment

__all__ = ["CHECKS", "Check", "Result", "run"]


@dataclass(frozen=True)
class Result:
    slug: str
    ok: bool
    message: str  # "" when it passed; else the one line the learner reads
    seconds: float


def run(tree: Path, slugs: list[str], timeout: float = 300) -> list[Result]:
    """Run the named checks against `tree`, in one process started in it."""
    with tempfile.TemporaryDirectory() as scratch:
        out, err = Path(scratch, "out"), Path(scratch, "err")
        pid = Zygote.fork(tree.resolve(), slugs, out, err)
        deadline = time.monotonic() + timeout
        try:
            while ended(pid) is False:
                if time.monotonic() > deadline:
                    late = f"the checks were still running after {timeout:g} s"
                    return [Result(s, False, late, timeout) for s in slugs]
                time.sleep(0.05)
        finally:
            # passed, failed, timed out or Ctrl-C: what the learner's code started ends with the run
            end_group(pid)
        stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    results = [Result(**json.loads(line)) for line in stdout.splitlines() if line.startswith("{")]
    # the process died (a learner's sys.exit at import, a crash): say how
    if len(results) < len(slugs):
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        ran = {result.slug for result in results}
        results += [
            Result(s, False, f"the check's process ended early: {last}", 0.0)
            for s in slugs
            if s not in ran
        ]
    return results


def end_group(pid: int) -> None:
    """Kill the run's process group: the run itself, and every process the learner's code
    started in it."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # all of them gone already
        pass


def ended(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # the zygote reaps its children as they end: an ended one is gone
    except ProcessLookupError:
        return True
    return False


# Each run of the checks is a process of its own, started in the tree: the tree's modules must
# shadow ours, and nothing a learner's code does may outlive the run. A new Python would import
# torch each time (1.5 s of CPU); instead every run is a fork of one process that imported it once,
# the zygote, started with the first run and kept for the next.
ZYGOTE_CODE = """
import json, os, runpy, signal, sys
# what every run imports (dynamo: with the first optimizer): once, before the forks
import torch, torch._dynamo
# a run that ends is reaped at once (its results are in its files)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
# a Ctrl-C is for the runs and the program using them: the program ends us (EOF)
signal.signal(signal.SIGINT, signal.SIG_IGN)
for request in sys.stdin:
    tree, slugs, out, err = json.loads(request)
    pid = os.fork()
    if pid:
        print(pid, flush=True)
        continue
    # the run: a process started in the tree, as `python -m walkthrough.checks TREE SLUG...` would
    # be, leading a process group of its own, which ends with it (end_group): what the learner's
    # code starts goes with it (a process that makes a session of its own leaves the group, and is
    # the learner's to end)
    os.setpgid(0, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # its own subprocesses are waited for
    # a Ctrl-C ends the run, as in any Python program
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for fd, path in ((0, os.devnull), (1, out), (2, err)):  # stdin no longer the zygote's requests
        os.dup2(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), fd)
    sys.argv = ["walkthrough.checks", tree, *slugs]
    code = 0
    try:
        runpy.run_module("walkthrough.checks", run_name="__main__", alter_sys=True)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)
"""


class Zygote:
    """The zygote of this program (a class of one), started when first needed; it ends with
    the program (EOF)."""

    process: subprocess.Popen | None = None
    lock = threading.Lock()  # one request at a time: the suite runs checks from two threads

    @classmethod
    def fork(cls, tree: Path, slugs: list[str], out: Path, err: Path) -> int:
        """Start a run of the checks; its process id."""
        with cls.lock:
            if cls.process is None or cls.process.poll() is not None:
                cls.process = subprocess.Popen(
                    [sys.executable, "-c", ZYGOTE_CODE],
                    # one request a line: a tree, its checks, and the files for its output
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,  # one process id a line
                    text=True,
                    env=environment(),
                )
            cls.process.stdin.write(json.dumps([str(tree), slugs, str(out), str(err)]) + "\n")
            cls.process.stdin.flush()
            return int(cls.process.stdout.readline())
