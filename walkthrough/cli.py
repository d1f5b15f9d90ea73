"""walkthrough: build, export and check the step series, or read it (or any repository's history) in
the terminal, or in a browser (serve).

A mistake the user can fix (a bad flag, a missing folder, a bad range) is one line on stderr and
exit code 1.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import NoReturn

from .bookmark import Bookmarks, default_path
from .errors import WalkthroughError
from .exercise import Exercise
from .history import load_series
from .patches import build, check, export, open_history
from .stand_ins import CORPUS, make_stand_ins

# the project root holds walkthrough/, steps/ and history/
PROJECT = Path(__file__).resolve().parent.parent
# The files the series ends at. check() compares every file of the last step with the project's copy
# anyway; this list adds the ones the last step must not lack. A new script joins this list in the
# change that adds its step.
SERIES_FILES = (
    "part0/__init__.py",
    "part0/micrograd.py",
    "part0/backprop.py",
    "longrun/__init__.py",
    "longrun/common.py",
    "train_gpt2.py",
    "longrun/meters.py",
    "longrun/run_folder.py",
    "longrun/stopping.py",
    "longrun/manifest.py",
    "longrun/hellaswag_scoring.py",
    "hellaswag.py",
    "fineweb.py",
    "tools/__init__.py",
    "tools/plot_log.py",
    "tools/preflight.py",
    "tools/sample.py",
    "tools/export_hf.py",
    "tools/report_card.py",
    "tools/reproduce.py",
    "input.txt",
)


def check_series(steps_dir: Path, project: Path) -> list[str]:
    """What `walkthrough check` checks: the series in steps_dir, against this project's files."""
    return check(steps_dir, project, SERIES_FILES)


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage mistake reported like any other: one line, exit code 1 (argparse
    prints the whole usage and exits 2)."""

    def error(self, message: str) -> NoReturn:
        raise WalkthroughError(f"{message} (see {self.prog} --help)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="walkthrough",
        description="Read the series step by step (no command), or build, export and check it.",
    )
    parser.add_argument(
        "--project",
        type=Path,
        metavar="DIR",
        help=f"project root (default: the current folder where it holds steps/, else {PROJECT})",
    )
    parser.add_argument(
        "--repo",
        nargs="+",
        metavar=("PATH", "RANGE"),
        help="read any repository's first-parent history instead; "
        "RANGE defaults to HEAD (e.g. v1.0..main)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    building = commands.add_parser(
        "build", help="build steps/ into a repository with a step-NN tag per step"
    )
    building.add_argument(
        "--into", type=Path, metavar="DIR", help="where (default: PROJECT/history)"
    )
    exporting = commands.add_parser("export", help="write an edited history back into steps/")
    exporting.add_argument(
        "--from",
        dest="source",
        type=Path,
        metavar="DIR",
        help="which history (default: PROJECT/history)",
    )
    commands.add_parser(
        "check",
        help="verify the series: applies, numbered 1..N, narrated, ends at the project's files",
    )
    commands.add_parser(
        "stand-ins",
        help="make stand-ins/ in the current folder (or PROJECT), what Try-its use offline: "
        "a random GPT-2, HellaSwag examples (the [hf] extra)",
    )
    serving = commands.add_parser(
        "serve",
        help="the reader in a browser, at http://localhost:PORT (the [serve] extra)",
        description="Serve the reader of the project (the current folder where it holds steps/, "
        "or the one given before the command: walkthrough --project DIR serve --port 8000) "
        "to a browser on this machine, at http://localhost:PORT: "
        "each tab runs a reader of its own, every key as in the terminal, r included. "
        "Needs textual-serve: pip install -e '.[serve]'.",
    )
    serving.add_argument(
        "--port", type=int, default=8000, help="the port on localhost (default: 8000)"
    )
    exercise = commands.add_parser(
        "exercise",
        help="rebuild step N yourself: a tree at step N-1 next to history/, "
        "and a check of what it does",
        description="The tree is made in the project: the current folder where it holds steps/, "
        "or the one given before the command (walkthrough --project DIR exercise N).",
    )
    exercise.add_argument("number", type=int, metavar="N", help="the step to rebuild")
    then = exercise.add_mutually_exclusive_group()
    then.add_argument("--check", action="store_true", help="run step N's check against your tree")
    then.add_argument(
        "--compare", action="store_true", help="read your change beside the series' step N"
    )
    then.add_argument(
        "--reset",
        action="store_true",
        help="start over at step N-1 (your tree is set aside, not deleted)",
    )
    then.add_argument(
        "--remove",
        action="store_true",
        help="set your tree aside as FOLDER.kept-TIME (not deleted)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _run(argv)
    except WalkthroughError as error:
        message = str(error)
    except BrokenPipeError:
        # `walkthrough exercise 8 | head`: the reader of our output left, which is no error, and
        # Python's own complaint about the closed stdout at exit is not one either
        sys.stderr.close()
        return 0
    except OSError as error:
        # a folder where a file should be, a file that can't be read or written
        message = (
            f"{error.filename}: {error.strerror}"
            if error.filename and error.strerror
            else str(error)
        )
    except KeyboardInterrupt:  # build and export swap in what they wrote only once it is whole
        print("walkthrough: interrupted", file=sys.stderr)
        return 130
    print(f"walkthrough: error: {message}", file=sys.stderr)
    return 1


def _run(argv: list[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    here = Path.cwd()
    if args.project is None and not (here / "steps").is_dir():
        # it writes a tree of the learner's own: where they stand, never elsewhere
        if args.command == "exercise":
            raise WalkthroughError(
                f"{here} holds no steps/: "
                "run walkthrough exercise in the project's folder, or pass --project DIR"
            )
        # it writes where the learner stands too: a step's checkout, say
        if args.command != "stand-ins":
            # reading, building and checking the installed project's series from anywhere
            args.project = PROJECT
    args.project = args.project or here
    if args.repo is not None and len(args.repo) > 2:
        parser.error("--repo takes a PATH and at most one RANGE")
    steps, history = args.project / "steps", args.project / "history"
    if args.command == "build":
        tags = build(steps, args.into or history)
        print(f"{args.into or history}: {tags[0][0]} .. {tags[-1][0]}, main at {tags[-1][1][:12]}")
    elif args.command == "export":
        written = export(args.source or history, steps)
        print(f"{steps}: wrote {len(written)} step patches")
    elif args.command == "check":
        problems = check_series(steps, args.project)
        for problem in problems:
            print(f"walkthrough check: {problem}", file=sys.stderr)
        if problems:
            return 1
        print(f"{steps}: the series is sound")
    elif args.command == "stand-ins":
        # the project's own, or the installed one's where it has none
        corpus = args.project / "input.txt"
        made = make_stand_ins(args.project / "stand-ins", corpus if corpus.is_file() else CORPUS)
        print(f"{made}: tiny-gpt2/, hellaswag.jsonl")
    elif args.command == "exercise":
        return _exercise(args)
    elif args.command == "serve":
        _serve(args)
    else:
        return _read(args)
    return 0


def _exercise(args: argparse.Namespace) -> int:
    exercise = Exercise.of(open_history(args.project), args.number)
    step = exercise.step
    if args.check:
        result = exercise.run_check()
        verdict = "pass" if result.ok else f"fail: {result.message}"
        print(f"step {step.number} ({step.title}): {verdict}")
        if not result.ok and "`" in result.message:  # a quoted command runs where the check ran it
            print(f"(the commands quoted run in {exercise.folder}: cd there to paste one)")
        return 0 if result.ok else 1
    if args.compare:
        return _show(exercise.compare())
    if args.remove:
        kept = exercise.set_aside()
        print(
            f"{exercise.folder} set aside as {kept}: "
            "rename it back to go on, or delete it when you no longer need it"
        )
    elif args.reset:
        kept = exercise.reset()
        print(
            f"{exercise.folder}: back at step {step.number - 1}; "
            f"your tree as it was is {kept} (delete it when done)"
        )
    else:
        if not exercise.create():
            print(
                f"{exercise.folder} exists already: your work in it is kept (--reset starts over)\n"
            )
        print(exercise.prompt())
    return 0


def _read(args: argparse.Namespace) -> int:
    return _show(load_series(*args.repo) if args.repo else open_history(args.project))


def _serve(args: argparse.Namespace) -> None:
    try:
        from textual_serve.server import Server
    except ImportError:
        raise WalkthroughError(
            "walkthrough serve needs textual-serve: pip install -e '.[serve]'"
        ) from None
    open_history(args.project)  # built (or found wrong) once, here, before any tab waits on it
    reader = [sys.executable, "-m", "walkthrough", "--project", str(args.project.resolve())]
    # textual-serve starts one reader a browser tab, from a shell command line: ours, with each
    # argument quoted
    Server(shlex.join(reader), host="localhost", port=args.port, title="walkthrough").serve()


def _show(series) -> int:
    # only the reader needs Textual: build, export and check start faster
    from .app import WalkthroughApp

    app = WalkthroughApp(series, Bookmarks(default_path()))
    app.run()
    # 1 when the app died of an exception (Textual has printed its traceback)
    return app.return_code or 0
