"""The suite itself. It holds however it is started: a background job (`python -m pytest &`)
ignores SIGINT, `nohup` ignores SIGHUP, and the tests that send those signals to a process need it
to act on them (see conftest.py). And the edits its tests make to a step's code find that code
whatever its comments say."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CHILD = (  # what a process the suite starts sees: Python's own SIGINT handler, and SIGHUP's default
    "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
    "signal.getsignal(signal.SIGHUP) is signal.SIG_DFL)"
)


def ignoring_both():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def child_sees(setup: str) -> list[str]:
    """A process started where SIGINT and SIGHUP are ignored runs `setup`, then starts CHILD:
    what CHILD printed."""
    start_child = (
        f"sys.stdout.write(subprocess.check_output([sys.executable, '-c', {CHILD!r}], text=True))"
    )
    probe = f"import subprocess, sys\n{setup}\n{start_child}"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        preexec_fn=ignoring_both,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_started_with_sigint_and_sighup_ignored_the_suite_gives_its_children_both():
    # inherited: what the tests' processes would get
    assert child_sees("pass") == ["False", "False"]
    assert child_sees(f"sys.path.insert(0, {str(TESTS)!r}); import conftest") == ["True", "True"]


def test_a_tests_edit_keys_on_code_not_on_comments(tmp_path):
    from check_tags import edit

    (tmp_path / "f.py").write_text(
        "x = 1  # the first\n# a note\n\ny = x + 1  # then\ns = 'a # b'\n"
    )
    # the file's comments were reworded since the test was written: the edit still finds its code
    edit(tmp_path, ("x = 1  # old words\ny = x + 1\n", "x = 2\n"), ("a # b", "c"), file="f.py")
    assert (tmp_path / "f.py").read_text() == "x = 2\ns = 'c'\n"
    (tmp_path / "f.py").write_text("z = 1  # x = 1\n")  # code inside a comment is not code
    with pytest.raises(AssertionError, match="exactly once"):
        edit(tmp_path, ("x = 1", "x = 2"), file="f.py")
