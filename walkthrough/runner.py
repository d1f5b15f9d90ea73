"""Run a step's Try-it where you read it: in a git worktree of that step, one argument list at a
time, the output streamed line by line, the whole process group stopped on request.

Plain Python and asyncio, no Textual. A Try-it line goes through `narration.split`: `a && b` is two
argument lists, run one after the other until one fails; a leading `VAR=value` sets that variable; a
line that needs a shell (a pipe, a redirect, `$`, `;`) is never run, and says so. Nothing here ever
hands a string to a shell.

The worktrees live in the repository's git dir, `GIT_DIR/walkthrough-runs/<tag>`, made on a step's
first run and reused after, put back to the step's files before each run (what a run wrote is
removed, so a Try-it that trains into log/cpu finds it empty again);
`rm -rf history/.git/walkthrough-runs` removes them all (the reader prunes git's record of a removed
one before it adds it again, and a rebuilt history/ starts without any).
"""

from __future__ import annotations

import asyncio
import codecs
import os
import re
import shlex
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .gitcmd import run_git
from .history import Series
from .narration import Command, NarrationError, mismatch, read, split, try_it
from .stand_ins import make_stand_ins

RUNS = "walkthrough-runs"  # in the git dir: one worktree per step that was run
GRACE = 2.0  # seconds between SIGTERM and SIGKILL when a run is stopped
# what every Try-it runs with, here and in the test suite's check of it: one thread (the narrations'
# figures are what one thread computes; more can change a loss's last digits) and no warnings (a
# library's warning on stderr would land between the lines a step promises)
TRY_IT_ENV = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Planned:
    text: str  # the Try-it line, as written
    commands: tuple[Command, ...] = ()  # what runs, in order; none when the line is refused
    refused: str = ""  # why it is not run


def plan(narration: str, stand_ins: bool = False) -> list[Planned]:
    """The Try-it of a narration as what `r` runs, line by line, with its stand-ins swapped in if
    asked (what the checks run offline); [] when there is no Try-it block."""
    planned = []
    for line in read(narration).checked_commands() if stand_ins else try_it(narration):
        try:
            planned.append(Planned(line, tuple(split(line))))
        except NarrationError as error:
            planned.append(Planned(line, refused=str(error)))
    return planned


def argv_here(argv: list[str]) -> list[str]:
    """`python` and `torchrun` as the reader's interpreter (the user's venv, activated or not)."""
    if argv[0] in ("python", "python3"):
        return [sys.executable, *argv[1:]]
    if argv[0] == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    return list(argv)


def env_here(command_env: dict[str, str]) -> dict[str, str]:
    """A Try-it command's environment: the user's, one thread, no warnings, and the folder of the
    interpreter the reader runs in first on PATH, so that a `python` another program starts
    (`torchrun --no-python python ...`) is that interpreter too, like the commands' own
    (argv_here)."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])
    return {**os.environ, **TRY_IT_ENV, "PATH": path, **command_env}


def shown_command(command: Command) -> str:
    """The argument list as a learner would type it into a shell, with its variables in front:
    `python` as the Try-it writes it, not the path of the interpreter that runs it (argv_here),
    which is the `python` first on the command's PATH anyway (env_here)."""
    env = [f"{name}={typed(value)}" for name, value in command.env.items()]
    return " ".join([*env, *map(typed, command.argv)])


def typed(word: str) -> str:
    """One word as a person quotes it: bare where a shell leaves it alone, in single quotes, or in
    double quotes where it holds a single quote and nothing a shell reads inside double quotes
    (shlex would write '"'"')."""
    if "'" in word and not re.search(r'["$`\\!]', word):
        return f'"{word}"'
    return shlex.quote(word)


def offline() -> bool:
    """Whether the Hugging Face Hub is out of reach: its offline switch is on, or it does not answer
    in 3 s."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return True
    try:
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
    except OSError:
        return True
    return False


def with_stand_ins(narration: str, folder: Path, runs: Path) -> str:
    """When the step's Try-it needs the network (a **Stand-in** line) and the machine is offline:
    its stand-ins made in `runs` (once) and linked into the checkout `folder`, and the line that
    says so; else ""."""
    try:
        if not read(narration).swaps or not offline():
            return ""
    except NarrationError:
        return ""
    made = make_stand_ins(runs / "stand-ins")
    if not (folder / "stand-ins").is_symlink():
        (folder / "stand-ins").symlink_to(made, target_is_directory=True)
    return "offline: run with the stand-ins its Stand-in line names"


def runs_folder(series: Series) -> Path:
    return Path(series.repo.git_dir).resolve() / RUNS


def worktree(series: Series, index: int, root: Path | None = None) -> tuple[Path, bool]:
    """(a clean checkout of step `index`, whether it was made just now): a git worktree at the
    step's commit, made on first use under `root` (default: runs_folder); afterwards the same one,
    put back to the step's files."""
    step = series.steps[index]
    name = step.ref if SAFE_NAME.fullmatch(step.ref) else step.commit.sha[:12]
    folder = (root or runs_folder(series)) / name
    if (folder / ".git").exists():
        git = series.repo.git
        where = f"could not put {folder} back to {step.ref}"
        run_git(git, "-C", str(folder), "reset", "--quiet", "--hard", step.commit.sha, what=where)
        # and without what the last run wrote
        run_git(git, "-C", str(folder), "clean", "--quiet", "-d", "--force", "-x", what=where)
        return folder, False
    folder.parent.mkdir(parents=True, exist_ok=True)
    git = series.repo.git
    run_git(git, "worktree", "prune", what="could not tidy git's list of worktrees")
    run_git(
        git,
        "worktree",
        "add",
        "--detach",
        "--force",
        str(folder),
        step.commit.sha,
        what=f"could not check out {step.ref} in {folder}",
    )
    return folder, True


def verdict(narration: str, output: str, status: int) -> str:
    """In a few words, what the run's output says against the narration's What-you-should-see;
    '' when the narration promises nothing."""
    try:
        promise = read(narration)
    except NarrationError:
        return ""
    if status != promise.exit_status:
        return ""
    problem = mismatch(promise, output)
    return (
        "matches What you should see"
        if problem is None
        else f"differs from What you should see: {problem}"
    )


@dataclass
class Record:
    """One run of one step: what the reader shows while the app runs, and keeps after."""

    index: int
    folder: Path
    new_checkout: bool
    planned: list[Planned]
    lines: list[str] = field(default_factory=list)
    status: int | None = None  # None while running
    started: float = 0.0
    ended: float | None = None
    stopped: bool = False
    verdict: str = ""
    first_output: float | None = None  # seconds from the start to the first line a command printed

    @property
    def running(self) -> bool:
        return self.status is None

    def seconds(self, now: float) -> float:
        return (self.ended if self.ended is not None else now) - self.started


class Run:
    """Runs the planned lines in `cwd`, calling `on_line` with each line of output (and the runner's
    own notes, which start with '$ ' or '· '). `stop()` ends it: SIGTERM to the whole process group,
    SIGKILL after GRACE."""

    def __init__(
        self,
        planned: list[Planned],
        cwd: Path,
        on_line: Callable[[str], None],
        clock=time.monotonic,
    ):
        self.planned = planned
        self.cwd = cwd
        self.on_line = on_line
        self.clock = clock
        self.stopped = False
        self.output: list[str] = []  # the commands' own lines, for the verdict
        self.first_output: float | None = None
        self._started = clock()
        self._process: asyncio.subprocess.Process | None = None

    async def run(self) -> int:
        status = 0
        for line in self.planned:
            if line.refused:
                self.on_line(f"· needs a shell: not run: {line.text}")
                continue
            for command in line.commands:
                if self.stopped:
                    return status
                self.on_line(f"$ {shown_command(command)}")
                status = await self._one(command)
                if status != 0:
                    return status
        return status

    async def _one(self, command: Command) -> int:
        # PYTHONUNBUFFERED: lines as they are printed, not at exit
        env = env_here({"PYTHONUNBUFFERED": "1", **command.env})
        try:
            process = await asyncio.create_subprocess_exec(
                *argv_here(command.argv),
                cwd=self.cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                # its own process group, so a stop reaches every process it starts
                start_new_session=True,
            )
        except OSError as error:
            self.on_line(f"· could not start {command.argv[0]!r}: {error.strerror or error}")
            return 127
        self._process = process
        reading = asyncio.ensure_future(self._read(process.stdout))
        status = await process.wait()
        # whatever it left running (it would hold the pipe open)
        _kill_group(process.pid, signal.SIGKILL)
        await reading
        self._process = None
        return status

    async def _read(self, stream: asyncio.StreamReader) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        while chunk := await stream.read(1 << 16):
            pending += decoder.decode(chunk)
            *lines, pending = pending.split("\n")
            for line in lines:
                self._emit(line)
        pending += decoder.decode(b"", final=True)
        if pending:
            self._emit(pending)

    def _emit(self, line: str) -> None:
        # a progress bar redrawn with \r: its last state
        line = line.rstrip("\r").rsplit("\r", 1)[-1]
        if self.first_output is None:
            self.first_output = self.clock() - self._started
        self.output.append(line)
        self.on_line(line)

    def stop(self) -> None:
        self.stopped = True
        process = self._process
        if process is None or process.returncode is not None:
            return
        _kill_group(process.pid, signal.SIGTERM)
        # still there after GRACE: SIGKILL (only while the leader lives; once it exits, _one kills
        # what is left)
        asyncio.get_running_loop().call_later(
            GRACE, lambda: process.returncode is None and _kill_group(process.pid, signal.SIGKILL)
        )

    def kill(self) -> None:
        """At once, for a reader that is closing: SIGKILL to the process group."""
        self.stopped = True
        if self._process is not None and self._process.returncode is None:
            _kill_group(self._process.pid, signal.SIGKILL)


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):  # the group is gone already
        pass


def describe_status(status: int) -> str:
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exit {status}"
