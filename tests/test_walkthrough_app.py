"""The reader driven the way a user drives it: keys and clicks through the Pilot, then what the screen shows."""

import asyncio
import contextlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import OptionList

from repos import BIG_LINES, ENV, git
from walkthrough.app import WalkthroughApp
from walkthrough.bookmark import Bookmarks
from walkthrough.cli import main
from walkthrough.history import load_series
from walkthrough.patches import HISTORY_RANGE, build
from walkthrough.rows import MAX_ROWS
from walkthrough.widgets import DiffView, FileList, HelpScreen, Narration, StepList
from walkthrough_fixtures import DEMO_STEPS, INJECTED, make_hostile_repo, write_series

SIZE = (120, 40)


@pytest.fixture(scope="module")
def demo_history(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    write_series(root / "steps", DEMO_STEPS)
    build(root / "steps", root / "history")
    return root / "history"


def drive(app: WalkthroughApp, steps, size) -> None:
    """Run the app headless at `size` and let `steps` work it through the Pilot."""

    async def run() -> None:
        async with app.run_test(size=size) as pilot:
            await steps(pilot)

    asyncio.run(run())


def reader(repo: Path, state: Path, rev_range: str = HISTORY_RANGE) -> tuple[WalkthroughApp, list[str]]:
    """The app on a repository, with its bookmarks in `state` and its notifications collected in a list."""
    app = WalkthroughApp(load_series(repo, rev_range), Bookmarks(state / "walkthrough.json"))
    notes: list[str] = []
    app.notify = lambda message, **_: notes.append(message)
    return app, notes


def title(app: WalkthroughApp) -> str:
    return str(app.query_one("#title").render())


def status(app: WalkthroughApp) -> str:
    return str(app.query_one("#status").render())


def diff_lines(app: WalkthroughApp) -> list[str]:
    """The diff pane as it is on screen."""
    diff = app.query_one(DiffView)
    return [diff.render_line(y).text.rstrip() for y in range(diff.size.height)]


def test_step_keys_move_through_the_series(demo_history, tmp_path):
    app, notes = reader(demo_history, tmp_path)

    async def keys(pilot):
        assert title(app) == "Step 1/5 · Read the text"
        for key, index in [("n", 1), ("right", 2), ("p", 1), ("left", 0), ("G", 4), ("g", 0)]:
            await pilot.press(key)
            assert app.index == index and app.query_one(StepList).highlighted == index
        await pilot.press("p")
        await pilot.press("G", "n")
        assert app.index == 4 and notes == ["This is the first step.", "This is the last step."]
        assert title(app) == "Step 5/5 · Keep the sample text"
        assert "The first step's sample becomes the test text" in app.query_one(Narration).document.source
        assert diff_lines(app)[:2] == ["R input.txt → data/sample.txt   +0 −0", "no change to the content"]

    drive(app, keys, SIZE)


def test_jump_to_a_step_number(demo_history, tmp_path):
    app, notes = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("colon", "4", "enter")
        assert app.index == 3 and title(app) == "Step 4/5 · Causal self-attention"
        await pilot.press("colon", "9", "9", "enter")
        assert app.index == 3 and notes == ["No step '99': enter a number from 1 to 5."]
        await pilot.press("colon", "2", "escape")
        assert app.index == 3 and not app.query_one("#prompt").display
        assert app.focused is app.query_one(DiffView)  # focus goes back where it was

    drive(app, keys, SIZE)


def test_search_narration_and_diffs_then_next_and_previous_match(demo_history, tmp_path):
    app, notes = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("N")
        assert notes == ["No search yet: press / to search."]
        await pilot.press("slash", *"c_attn", "enter")
        # the first match from step 1 is step 4's narration ("Names follow ... (`c_attn`, `c_proj`)")
        assert app.index == 3 and status(app) == "step-04 · unified · match 1/3"
        await pilot.press("N")
        assert status(app).endswith("match 2/3")
        current = [line for line in diff_lines(app) if "c_attn" in line]
        assert current and all("self.c_attn" in line or "c_attn(x)" in line for line in current)
        await pilot.press("P", "P")
        assert status(app).endswith("match 3/3")  # wraps around
        await pilot.press("slash", *"Shakespeare", "enter")
        assert app.index == 0 and status(app).endswith("match 1/1")
        await pilot.press("slash", *"no such/words", "enter")  # inside the prompt, / is text
        assert notes[-1] == "No match for 'no such/words'." and app.match is None

    drive(app, keys, SIZE)


def test_split_toggle_and_whole_file(demo_history, tmp_path):
    app, notes = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("colon", "3", "enter", "s")
        assert status(app) == "step-03 · side by side"
        assert any("│" in line and "@dataclass" in line for line in diff_lines(app))
        await pilot.press("s")
        assert status(app) == "step-03 · unified" and not any("│" in line for line in diff_lines(app))
        await pilot.press("f")
        assert status(app) == "step-03 · file train_gpt2.py"
        assert diff_lines(app)[:2] == ["train_gpt2.py at step-03", " 1 from dataclasses import dataclass"]
        await pilot.press("n")  # the file stays in view across steps
        assert diff_lines(app)[0] == "train_gpt2.py at step-04"
        await pilot.press("f")
        assert diff_lines(app)[0].startswith("M train_gpt2.py")

    drive(app, keys, SIZE)


def test_file_list_clicks_and_tab_focus(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        files = app.query_one(FileList)
        assert files.display and files.option_count == 2  # step 1 adds input.txt and train_gpt2.py
        assert app.path == "train_gpt2.py"  # the code first, the data after it
        assert diff_lines(app)[0].startswith("A train_gpt2.py")
        await pilot.click(FileList, offset=(4, 1))
        assert app.path == "input.txt"
        assert any(line.startswith("A input.txt") for line in diff_lines(app))
        await pilot.press("f")
        assert diff_lines(app)[0] == "input.txt at step-01"
        await pilot.click(StepList, offset=(4, 3))
        assert app.index == 3
        assert not app.query_one(FileList).display  # one file: no list
        app.query_one(StepList).focus()
        seen = []
        for _ in range(3):
            await pilot.press("tab")
            seen.append(type(app.focused))
        assert seen == [Narration, DiffView, StepList]

    drive(app, keys, SIZE)


def test_copied_checkout_runs_as_exactly_one_checkout_in_a_shell(tmp_path):
    """Tags named like a shell command, like an option, and like a branch: the copied line, run by sh from another
    folder on a copy of the repository, checks out that step and does nothing else."""
    repo = make_hostile_repo(tmp_path / "repo")
    app, _ = reader(repo, tmp_path, "HEAD")
    copied = []

    async def keys(pilot):
        for _ in range(app.step_count):
            await pilot.press("c", "n")
            copied.append(app.clipboard)

    drive(app, keys, SIZE)
    assert copied[0] == f"git -C {repo} {app.series.steps[0].checkout.removeprefix('git ')}" and INJECTED in copied[0]
    branches = git(repo, "for-each-ref", "refs/heads")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for step, command in zip(app.series.steps, copied, strict=True):
        clone = tmp_path / f"clone-{step.number}"
        shutil.copytree(repo, clone)
        command = command.replace(f"-C {repo} ", f"-C {clone} ")
        subprocess.run(["sh", "-c", command], cwd=elsewhere, env={**os.environ, **ENV}, check=True, capture_output=True)
        assert git(clone, "rev-parse", "HEAD").strip() == step.commit.sha
        assert git(clone, "for-each-ref", "refs/heads") == branches  # no branch made (-b) or switched to (v1)
    assert not list(tmp_path.rglob("m[123]"))  # nothing the tag's name spells out ran


def test_file_names_that_are_not_utf8_are_shown_escaped_with_their_content(tmp_path, monkeypatch):
    record = recording_editor(tmp_path, monkeypatch)
    app, notes = reader(make_hostile_repo(tmp_path / "repo"), tmp_path, "HEAD")
    fake_suspend(app)

    async def keys(pilot):
        labels = [str(app.query_one(FileList).get_option_at_index(i).prompt) for i in range(2)]
        assert labels[0].startswith("A caf\\xe9.txt ") and labels[1].startswith('A quote"\tand tab.txt ')
        await pilot.press("f")
        assert status(app).endswith("file caf\\xe9.txt")
        top = diff_lines(app)[:2]
        assert top[0].startswith("caf\\xe9.txt at x;touch${IFS}m1") and top[1] == "1 latin name"
        await pilot.press("e")
        assert notes == [] and record.read_bytes().endswith(b"\nlatin name\n")

    drive(app, keys, SIZE)


def test_copy_checkout_command(demo_history, tmp_path):
    app, notes = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("n", "c")
        assert app.clipboard == f"git -C {demo_history} checkout step-02"
        assert notes == [f"Sent to the terminal's clipboard (if it accepts OSC 52): {app.clipboard}"]

    drive(app, keys, SIZE)


def recording_editor(tmp_path: Path, monkeypatch) -> Path:
    """Set $EDITOR to an editor that writes down which file it was given, and what was in it, in the file returned."""
    record, editor = tmp_path / "editor-saw.txt", tmp_path / "editor.py"
    editor.write_text(
        "import sys, pathlib\n"
        "seen = sys.argv[1] + '\\n' + open(sys.argv[1]).read()\n"
        f"pathlib.Path({str(record)!r}).write_text(seen, errors='surrogateescape')\n"  # a name may not be UTF-8
    )
    monkeypatch.setenv("EDITOR", shlex.join([sys.executable, str(editor)]))
    monkeypatch.delenv("VISUAL", raising=False)
    return record


def fake_suspend(app: WalkthroughApp) -> list[str]:
    """Stand in for App.suspend (the test driver has no terminal to hand over) the way Textual writes it: the
    terminal is given back after `yield` only when the block ends without an exception."""
    events: list[str] = []

    @contextlib.contextmanager
    def suspend():
        events.append("suspended")
        yield
        events.append("resumed")

    app.suspend = suspend
    return events


def test_edit_opens_a_copy_of_the_file_at_this_step_and_removes_it(demo_history, tmp_path, monkeypatch):
    record = recording_editor(tmp_path, monkeypatch)
    app, notes = reader(demo_history, tmp_path)
    events = fake_suspend(app)

    async def keys(pilot):
        await pilot.press("colon", "2", "enter", "e")
        path, content = record.read_text().split("\n", 1)
        assert path.endswith("/step-02/train_gpt2.py") and content == DEMO_STEPS[1][2]["train_gpt2.py"]
        assert events == ["suspended", "resumed"] and notes == []
        assert not Path(path).exists() and list(app._copies.iterdir()) == []  # gone when the editor exits

    drive(app, keys, SIZE)
    app, notes = reader(demo_history, tmp_path)  # a driver that cannot suspend: say where the copy is
    copies = []

    async def keys_again(pilot):
        await pilot.press("e")
        prefix = "This terminal can't hand over to an editor; the copy is at "
        assert notes[0].startswith(prefix)
        copies.append(Path(notes[0].removeprefix(prefix)))
        assert copies[0].read_text() == DEMO_STEPS[1][2]["train_gpt2.py"]  # kept while the app runs
        monkeypatch.delenv("EDITOR")
        await pilot.press("e")
        assert notes[1] == "Set $EDITOR (or $VISUAL) to a command to open files."

    drive(app, keys_again, SIZE)
    assert not copies[0].exists() and not app._copies.exists()  # gone when the app exits


@pytest.mark.parametrize("editor", ["no-such-editor-anywhere", "a-folder", "not-executable.txt"])
def test_an_editor_that_cannot_start_is_a_message_and_the_app_goes_on(demo_history, tmp_path, monkeypatch, editor):
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "not-executable.txt").write_text("not a program\n")
    command = editor if editor.startswith("no-such") else str(tmp_path / editor)
    monkeypatch.setenv("EDITOR", command)
    monkeypatch.delenv("VISUAL", raising=False)
    app, notes = reader(demo_history, tmp_path)
    events = fake_suspend(app)

    async def keys(pilot):
        await pilot.press("e")
        assert events == ["suspended", "resumed"]  # the terminal is given back
        reason = "No such file or directory" if editor.startswith("no-such") else "Permission denied"
        assert notes == [f"Could not start the editor {command!r}: {reason}"]
        assert list(app._copies.iterdir()) == []
        await pilot.press("n")
        assert app.index == 1  # still reading

    drive(app, keys, SIZE)
    assert not app._copies.exists()


def test_a_crash_in_the_reader_exits_non_zero(demo_history, tmp_path, monkeypatch):
    async def crash(self):
        raise RuntimeError("a bug")

    monkeypatch.setattr(WalkthroughApp, "on_mount", crash)
    monkeypatch.setattr(WalkthroughApp, "run", lambda self: App.run(self, headless=True))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert main(["--repo", str(demo_history), HISTORY_RANGE]) == 1


def test_help_lists_every_binding(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("question_mark", "colon", "n")  # the reader's keys wait behind the help
        assert isinstance(app.screen, HelpScreen) and app.index == 0
        text = "\n".join(str(widget.render()) for widget in app.screen.query("Static"))
        for keys, description in app.key_rows():
            assert keys in text and description in text
        assert "n →" in text and "p ←" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)

    drive(app, keys, SIZE)


def test_quit_remembers_the_step(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("n", "n", "q")

    drive(app, keys, SIZE)
    assert app.return_code == 0
    app, _ = reader(demo_history, tmp_path)

    async def keys_again(pilot):
        assert app.index == 2 and title(app).startswith("Step 3/5")

    drive(app, keys_again, SIZE)


def test_odd_commits_never_crash_the_reader(odd_repo, tmp_path):
    """Root commit, binary file, rename, deletion, non-UTF-8 text, merge, 10,000-line diff: every view of each."""
    app, notes = reader(odd_repo, tmp_path, "HEAD")

    async def keys(pilot):
        seen = []
        for _ in range(app.step_count):
            for key in ("s", "f", "f", "s"):
                await pilot.press(key)
            seen.append(diff_lines(app)[0])
            await pilot.press("n")
        assert seen == [
            "A a.py   +2 −0",
            "R a.py → b.py   +0 −0",
            "D logo.bin   +0 −0",
            "A notes.txt   +1 −0",
            "M b.py   +1 −1",
            "A side.txt   +1 −0",
            "A big.txt   +10000 −0",
        ]
        diff = app.query_one(DiffView)
        assert diff.rows[-1].text == (
            f"… the diff is {BIG_LINES:,} lines; showing the first {MAX_ROWS - 2:,}. "
            f"See it all: git show {app.series.steps[-1].commit.sha}"
        )
        await pilot.press("slash", *"line 9999", "enter")  # in the big diff, past the rows it shows
        assert app.index == 6 and notes[-1] == (
            f"This match is past the first {MAX_ROWS:,} rows shown: "
            f"git show {app.series.steps[-1].commit.sha} shows it all."
        )
        await pilot.press("colon", "1", "enter")
        await pilot.click(FileList, offset=(4, 1))
        await pilot.press("f")
        assert diff_lines(app)[1] == "binary file: 256 bytes"
        await pilot.press("colon", "4", "enter")  # the file view follows logo.bin, deleted by now
        assert diff_lines(app)[1] == "not in the repository at this step"
        await pilot.press("f", "f")  # back to the diff, then this step's own file
        assert diff_lines(app)[:2] == ["notes.txt at " + app.series.steps[3].ref, "1 caf\ufffd cr\ufffdme"]

    drive(app, keys, (80, 24))


def test_step_list_follows_the_keyboard_when_focused(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        app.query_one(StepList).focus()
        await pilot.press("down", "down")
        assert app.index == 2
        await pilot.press("enter")
        assert isinstance(app.focused, OptionList) and app.index == 2

    drive(app, keys, SIZE)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_main_screen_snapshot(demo_history, tmp_path, snap_compare, size):
    app = WalkthroughApp(load_series(demo_history, HISTORY_RANGE), Bookmarks(tmp_path / "walkthrough.json"))
    assert snap_compare(app, press=["colon", "4", "enter"], terminal_size=size)
