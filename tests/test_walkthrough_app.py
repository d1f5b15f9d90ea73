"""The reader driven the way a user drives it: keys and clicks through the Pilot, then what the
screen shows."""

import asyncio
import contextlib
import html
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from rich.cells import cell_len
from textual.app import App
from textual.geometry import Region
from textual.widgets import OptionList, Static

from repos import BIG_LINES, ENV, git
from walkthrough.app import WalkthroughApp
from walkthrough.bookmark import Bookmarks
from walkthrough.cli import main
from walkthrough.confirm_screen import ConfirmRun
from walkthrough.diff_view import DiffView
from walkthrough.file_list import FileList
from walkthrough.help_screen import HelpScreen, key_rows
from walkthrough.history import load_series
from walkthrough.narration_view import Narration
from walkthrough.patches import HISTORY_RANGE, build
from walkthrough.reader_screen import ReaderScreen
from walkthrough.rows import MAX_ROWS
from walkthrough.run_panel import RunPanel
from walkthrough.step_list import StepList
from walkthrough_fixtures import (
    DEMO_STEPS,
    INJECTED,
    LONG_COMMAND,
    RUN_STEPS,
    make_hostile_repo,
    write_series,
)

SIZE = (120, 40)


def built_history(tmp_path_factory, name: str, steps) -> Path:
    root = tmp_path_factory.mktemp(name)
    write_series(root / "steps", steps)
    build(root / "steps", root / "history")
    return root / "history"


@pytest.fixture(scope="module")
def demo_history(tmp_path_factory) -> Path:
    return built_history(tmp_path_factory, "demo", DEMO_STEPS)


def drive(app: WalkthroughApp, steps, size) -> None:
    """Run the app headless at `size` and let `steps` work it through the Pilot."""

    async def run() -> None:
        async with app.run_test(size=size) as pilot:
            # the reader's screen lays itself out at its size once it has mounted
            await pilot.pause()
            await steps(pilot)

    asyncio.run(run())


def reader(
    repo: Path, state: Path, rev_range: str = HISTORY_RANGE
) -> tuple[WalkthroughApp, list[str]]:
    """The app on a repository, its bookmarks in `state`, its notifications collected in a list."""
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
            steps = app.query_one(StepList)
            assert app.reader.nav.index == index and steps.step_at[steps.highlighted] == index
        await pilot.press("p")
        await pilot.press("G", "n")
        assert app.reader.nav.index == 4 and notes == [
            "This is the first step.",
            "This is the last step.",
        ]
        assert title(app) == "Step 5/5 · Keep the sample text"
        assert (
            "The first step's sample becomes the test text"
            in app.query_one(Narration).document.source
        )
        assert diff_lines(app)[:2] == [
            "R input.txt → data/sample.txt   +0 −0",
            "no change to the content",
        ]

    drive(app, keys, SIZE)


def test_jump_to_a_step_number(demo_history, tmp_path):
    app, notes = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("colon", "4", "enter")
        assert app.reader.nav.index == 3 and title(app) == "Step 4/5 · Causal self-attention"
        await pilot.press("colon", "9", "9", "enter")
        assert app.reader.nav.index == 3 and notes == ["No step '99': enter a number from 1 to 5."]
        await pilot.press("colon", "2", "escape")
        assert app.reader.nav.index == 3 and not app.query_one("#prompt").display
        assert app.focused is app.query_one(DiffView)  # focus goes back where it was

    drive(app, keys, SIZE)


def test_search_narration_and_diffs_then_next_and_previous_match(demo_history, tmp_path):
    app, notes = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("N")
        assert notes == ["No search yet: press / to search."]
        await pilot.press("slash", *"c_attn", "enter")
        # the first match from step 1 is in step 4's narration:
        # "Names follow ... (`c_attn`, `c_proj`)"
        assert app.reader.nav.index == 3 and status(app) == "step-04 · unified · match 1/3"
        await pilot.press("N")
        assert status(app).endswith("match 2/3")
        current = [line for line in diff_lines(app) if "c_attn" in line]
        assert current and all("self.c_attn" in line or "c_attn(x)" in line for line in current)
        await pilot.press("P", "P")
        assert status(app).endswith("match 3/3")  # wraps around
        await pilot.press("slash", *"Shakespeare", "enter")
        assert app.reader.nav.index == 0 and status(app).endswith("match 1/1")
        # another step: no match here, so no counter; N still goes on from the match
        await pilot.press("n")
        assert status(app) == "step-02 · unified"
        await pilot.press("N")
        assert app.reader.nav.index == 0 and status(app).endswith("match 1/1")
        await pilot.press("slash", *"no such/words", "enter")  # inside the prompt, / is text
        assert (
            notes[-1] == "No match for 'no such/words'." and app.reader.nav.search.current is None
        )

    drive(app, keys, SIZE)


def test_split_toggle_and_whole_file(demo_history, tmp_path):
    app, notes = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("colon", "3", "enter", "s")
        assert status(app) == "step-03 · side by side"
        assert any("│" in line and "@dataclass" in line for line in diff_lines(app))
        await pilot.press("s")
        assert status(app) == "step-03 · unified" and not any(
            "│" in line for line in diff_lines(app)
        )
        await pilot.press("f")
        assert status(app) == "step-03 · file train_gpt2.py"
        assert diff_lines(app)[:2] == [
            "train_gpt2.py at step-03",
            " 1 from dataclasses import dataclass",
        ]
        await pilot.press("n")  # the file stays in view across steps
        assert diff_lines(app)[0] == "train_gpt2.py at step-04"
        await pilot.press("f")
        assert diff_lines(app)[0].startswith("M train_gpt2.py")

    drive(app, keys, SIZE)


@pytest.mark.parametrize("mode", ["unified", "side by side"])
def test_the_diff_scrolls_sideways_under_its_line_numbers(demo_history, tmp_path, mode):
    """shift+→ moves the code, not the numbers: side by side, each side under its own numbers."""
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("colon", "4", "enter", *(["s"] if mode == "side by side" else []))
        y = next(y for y, line in enumerate(diff_lines(app)) if "n_embd: int = 768" in line)
        was = diff_lines(app)[y]
        await pilot.press("shift+right")
        now = diff_lines(app)[y]
        for before, after in zip(was.split("│"), now.split("│"), strict=True):
            number = before.split()[0]  # the line number, at the same place before and after
            assert after.split()[0] == number and after.index(number) == before.index(number)
            # the code moved under it
            assert after.index("int = 768") == before.index("int = 768") - 8

    drive(app, keys, (80, 24))


def test_file_list_clicks_and_tab_focus(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        files = app.query_one(FileList)
        assert files.display and files.option_count == 2  # step 1 adds input.txt and train_gpt2.py
        assert app.reader.nav.path == "train_gpt2.py"  # the code first, the data after it
        assert diff_lines(app)[0].startswith("A train_gpt2.py")
        await pilot.click(FileList, offset=(4, 1))
        assert app.reader.nav.path == "input.txt"
        assert any(line.startswith("A input.txt") for line in diff_lines(app))
        await pilot.press("f")
        assert diff_lines(app)[0] == "input.txt at step-01"
        await pilot.click(StepList, offset=(4, 3))
        assert app.reader.nav.index == 3
        assert not app.query_one(FileList).display  # one file: no list
        app.query_one(StepList).focus()
        seen = []
        for _ in range(3):
            await pilot.press("tab")
            seen.append(type(app.focused))
        assert seen == [Narration, DiffView, StepList]

    drive(app, keys, SIZE)


def test_copied_checkout_runs_as_exactly_one_checkout_in_a_shell(tmp_path):
    """Tags named like a shell command, like an option, and like a branch: the copied line, run
    by sh from another folder on a copy of the repository, checks out that step and does
    nothing else."""
    repo = make_hostile_repo(tmp_path / "repo")
    app, _ = reader(repo, tmp_path, "HEAD")
    copied = []

    async def keys(pilot):
        for _ in range(len(app.reader.series.steps)):
            await pilot.press("c", "n")
            copied.append(app.clipboard)

    drive(app, keys, SIZE)
    assert (
        copied[0] == f"git -C {repo} {app.reader.series.steps[0].checkout.removeprefix('git ')}"
        and INJECTED in copied[0]
    )
    branches = git(repo, "for-each-ref", "refs/heads")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for step, command in zip(app.reader.series.steps, copied, strict=True):
        clone = tmp_path / f"clone-{step.number}"
        shutil.copytree(repo, clone)
        command = command.replace(f"-C {repo} ", f"-C {clone} ")
        subprocess.run(
            ["sh", "-c", command],
            cwd=elsewhere,
            env={**os.environ, **ENV},
            check=True,
            capture_output=True,
        )
        assert git(clone, "rev-parse", "HEAD").strip() == step.commit.sha
        # no branch made (-b) or switched to (v1)
        assert git(clone, "for-each-ref", "refs/heads") == branches
    assert not list(tmp_path.rglob("m[123]"))  # nothing the tag's name spells out ran


def test_file_names_that_are_not_utf8_are_shown_escaped_with_their_content(tmp_path, monkeypatch):
    record = recording_editor(tmp_path, monkeypatch)
    app, notes = reader(make_hostile_repo(tmp_path / "repo"), tmp_path, "HEAD")
    fake_suspend(app)

    async def keys(pilot):
        labels = [str(app.query_one(FileList).get_option_at_index(i).prompt) for i in range(2)]
        assert labels[0].startswith("A caf\\xe9.txt ") and labels[1].startswith(
            'A quote"\tand tab.txt '
        )
        await pilot.press("f")
        assert status(app).endswith("file caf\\xe9.txt")
        top = diff_lines(app)[:2]
        assert top[0].startswith("caf\\xe9.txt at x;touch${IFS}m1") and top[1] == "1 latin name"
        await pilot.press("e")
        assert notes == [] and record.read_bytes().endswith(b"\nlatin name\n")

    drive(app, keys, SIZE)


def test_copy_checkout_command(demo_history, tmp_path, monkeypatch):
    # no clipboard program can be used: OSC 52 only
    for name in ("TMUX", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    app, notes = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("n", "c")
        assert app.clipboard == f"git -C {demo_history} checkout step-02"
        assert notes == [
            f"Sent to the terminal's clipboard (if it accepts OSC 52): {app.clipboard}"
        ]

    drive(app, keys, SIZE)


def recording_editor(tmp_path: Path, monkeypatch) -> Path:
    """Set $EDITOR to an editor that writes down which file it was given, and what was in it, in the
    file returned."""
    record, editor = tmp_path / "editor-saw.txt", tmp_path / "editor.py"
    editor.write_text(
        "import sys, pathlib\n"
        "seen = sys.argv[1] + '\\n' + open(sys.argv[1]).read()\n"
        # a name may not be UTF-8
        f"pathlib.Path({str(record)!r}).write_text(seen, errors='surrogateescape')\n"
    )
    monkeypatch.setenv("EDITOR", shlex.join([sys.executable, str(editor)]))
    monkeypatch.delenv("VISUAL", raising=False)
    return record


def fake_suspend(app: WalkthroughApp) -> list[str]:
    """Stand in for App.suspend (the test driver has no terminal to hand over) the way Textual
    writes it: the terminal is given back after `yield` only when the block ends without
    an exception."""
    events: list[str] = []

    @contextlib.contextmanager
    def suspend():
        events.append("suspended")
        yield
        events.append("resumed")

    app.suspend = suspend
    return events


def test_edit_opens_a_copy_of_the_file_at_this_step_and_removes_it(
    demo_history, tmp_path, monkeypatch
):
    record = recording_editor(tmp_path, monkeypatch)
    app, notes = reader(demo_history, tmp_path)
    events = fake_suspend(app)

    async def keys(pilot):
        await pilot.press("colon", "2", "enter", "e")
        path, content = record.read_text().split("\n", 1)
        assert (
            path.endswith("/step-02/train_gpt2.py") and content == DEMO_STEPS[1][2]["train_gpt2.py"]
        )
        assert events == ["suspended", "resumed"] and notes == []
        # gone when the editor exits
        assert not Path(path).exists() and list(app.reader.copies.root.iterdir()) == []

    drive(app, keys, SIZE)
    # a driver that cannot suspend: say where the copy is
    app, notes = reader(demo_history, tmp_path)
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
    assert not copies[0].exists() and not app.reader.copies.root.exists()  # gone when the app exits


@pytest.mark.parametrize("editor", ["no-such-editor-anywhere", "a-folder", "not-executable.txt"])
def test_an_editor_that_cannot_start_is_a_message_and_the_app_goes_on(
    demo_history, tmp_path, monkeypatch, editor
):
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
        reason = (
            "No such file or directory" if editor.startswith("no-such") else "Permission denied"
        )
        assert notes == [f"Could not start the editor {command!r}: {reason}"]
        assert list(app.reader.copies.root.iterdir()) == []
        await pilot.press("n")
        assert app.reader.nav.index == 1  # still reading

    drive(app, keys, SIZE)
    assert not app.reader.copies.root.exists()


def test_a_crash_in_the_reader_exits_non_zero(demo_history, tmp_path, monkeypatch):
    async def crash(self):
        raise RuntimeError("a bug")

    monkeypatch.setattr(ReaderScreen, "on_mount", crash)
    monkeypatch.setattr(WalkthroughApp, "run", lambda self: App.run(self, headless=True))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert main(["--repo", str(demo_history), HISTORY_RANGE]) == 1


def test_help_lists_every_binding(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("question_mark", "colon", "n")  # the reader's keys wait behind the help
        assert isinstance(app.screen, HelpScreen) and app.reader.nav.index == 0
        text = "\n".join(str(widget.render()) for widget in app.screen.query("Static"))
        for keys, description in key_rows(app, ReaderScreen.BINDINGS):
            assert keys in text and description in text
        assert "n →" in text and "p ←" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)

    drive(app, keys, SIZE)


def test_the_help_names_each_key_once(demo_history, tmp_path):
    """Each key is on one row of the help, and named nowhere else in it: a description that names
    another key (shift+←'s once said "shift+→: right") lists that key twice."""
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("question_mark")
        await pilot.pause()
        text = str(app.screen.query_one("#help-keys", Static).render()).replace("\u00a0", " ")
        listed = [key for keys, _ in key_rows(app, ReaderScreen.BINDINGS) for key in keys.split()]
        assert len(listed) == len(set(listed)) and {"shift+←", "shift+→"} <= set(listed)
        for key in listed:
            if len(key) > 1:  # a letter is in words too
                assert len(re.findall(rf"(?<![\w+]){re.escape(key)}(?![\w+])", text)) == 1, key

    drive(app, keys, SIZE)


def test_the_help_fits_80x24_each_description_wrapping_under_itself(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("question_mark")
        await pilot.pause()
        table = app.screen.query_one("#help-keys", Static)
        region = Region(0, 0, table.size.width, table.size.height)
        lines = [strip.text.replace("\u00a0", " ").rstrip() for strip in table.render_lines(region)]
        width = max(cell_len(shown) for shown, _ in key_rows(app, ReaderScreen.BINDINGS))
        assert (
            table.region.right <= 80 and max(cell_len(line) for line in lines) <= table.size.width
        )
        assert any(line[: width + 2].isspace() for line in lines), (
            "a description that wraps, at 80 columns"
        )
        # every description starts in one column
        assert all(line[width : width + 2] == "  " for line in lines)
        descriptions = " ".join(line[width + 2 :] for line in lines).split()
        for _, description in key_rows(app, ReaderScreen.BINDINGS):
            assert " ".join(description.split()) in " ".join(descriptions), description

    drive(app, keys, (80, 24))


def test_help_and_quit_show_in_an_80_column_footer(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.pause()
        shown = [
            key.description
            for key in app.query("FooterKey")
            if key.region.width and key.region.right <= 80
        ]
        assert "Help" in shown and "Quit" in shown, shown

    drive(app, keys, (80, 24))


def test_quit_remembers_the_step(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("n", "n", "q")

    drive(app, keys, SIZE)
    assert app.return_code == 0
    app, _ = reader(demo_history, tmp_path)

    async def keys_again(pilot):
        assert app.reader.nav.index == 2 and title(app).startswith("Step 3/5")

    drive(app, keys_again, SIZE)


def test_odd_commits_never_crash_the_reader(odd_repo, tmp_path):
    """Root commit, binary file, rename, deletion, non-UTF-8 text, merge, 10,000-line diff: every
    view of each."""
    app, notes = reader(odd_repo, tmp_path, "HEAD")

    async def keys(pilot):
        seen = []
        for _ in range(len(app.reader.series.steps)):
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
            f"See it all: {app.reader.series.git()} show {app.reader.series.steps[-1].commit.sha}"
        )
        where = Path(app.reader.series.repo.working_tree_dir).resolve()
        # a command that works wherever you are
        assert app.reader.series.git() == f"git -C {shlex.quote(str(where))}"
        await pilot.press("slash", *"line 9999", "enter")  # in the big diff, past the rows it shows
        assert app.reader.nav.index == 6 and notes[-1] == (
            f"This match is past the first {MAX_ROWS:,} rows shown: "
            f"{app.reader.series.git()} show {app.reader.series.steps[-1].commit.sha} shows it all."
        )
        await pilot.press("colon", "1", "enter")
        await pilot.click(FileList, offset=(4, 1))
        await pilot.press("f")
        assert diff_lines(app)[1] == "binary file: 256 bytes"
        await pilot.press("colon", "4", "enter")  # the file view follows logo.bin, deleted by now
        assert diff_lines(app)[1] == "not in the repository at this step"
        await pilot.press("f", "f")  # back to the diff, then this step's own file
        assert diff_lines(app)[:2] == [
            "notes.txt at " + app.reader.series.steps[3].ref,
            "1 caf\ufffd cr\ufffdme",
        ]

    drive(app, keys, (80, 24))


def test_step_list_follows_the_keyboard_when_focused(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        app.query_one(StepList).focus()
        await pilot.press("down", "down")
        assert app.reader.nav.index == 2
        await pilot.press("enter")
        assert isinstance(app.focused, OptionList) and app.reader.nav.index == 2

    drive(app, keys, SIZE)


def test_a_step_switch_repaints_the_two_options_the_highlight_moves_between(
    tmp_path_factory, tmp_path, monkeypatch
):
    """The step list repaints the options the highlight leaves and lands on, each over all its
    lines (a long title wraps), and no other: the lines OptionList brought into view, kept from
    the move before."""
    long = "a title long enough to wrap under itself in the list"
    titles = ["One", f"Two, {long}", "Part II · Three", f"Four, {long}", "Five"]
    history = built_history(
        tmp_path_factory, "wrapped", [(t, "N.", {f"f{n}.py": "x\n"}) for n, t in enumerate(titles)]
    )
    app, _ = reader(history, tmp_path)
    asked: set[int] = set()  # lines of the list repainted
    render_line = StepList.render_line
    monkeypatch.setattr(
        StepList,
        "render_line",
        lambda self, y: asked.add(self.scroll_offset.y + y) or render_line(self, y),
    )

    async def keys(pilot):
        steps = app.query_one(StepList)

        def lines(step: int) -> set[int]:
            """The lines the step's option is drawn on: its number's, those its title wraps onto."""
            shown = [strip.text.rstrip() for strip in steps.render_lines(Region(0, 0, *steps.size))]
            first = next(
                y for y, text in enumerate(shown) if text.lstrip().startswith(f"{step + 1} ")
            )
            wrapped = itertools.takewhile(
                lambda y: shown[y].startswith("  "), range(first + 1, len(shown))
            )
            return {first, *wrapped}

        assert len(lines(1)) > 1 and len(lines(3)) > 1  # the long titles wrap
        # the first move: the lines of the option it leaves are not known yet
        await pilot.press("n")
        await pilot.pause()
        for key, before, after in [("n", 1, 2), ("n", 2, 3), ("p", 3, 2), ("G", 2, 4), ("g", 4, 0)]:
            asked.clear()
            await pilot.press(key)
            await pilot.pause()
            assert app.reader.nav.index == after and asked == lines(before) | lines(after)
        await pilot.press("G")
        width, at = steps.size.width, lines(4)
        # a narrower list: the long titles wrap onto more lines
        await pilot.resize_terminal(100, SIZE[1])
        await pilot.pause()
        assert steps.size.width < width and lines(4) != at
        asked.clear()
        await pilot.press("g")
        await pilot.pause()
        assert asked >= lines(4) | lines(0)

    drive(app, keys, SIZE)


def test_the_step_list_keeps_its_drawn_options_when_only_its_height_changes(
    demo_history, tmp_path, monkeypatch
):
    """The options are drawn at the list's width: a terminal made shorter or taller draws none of
    them again (each is a Rich table, drawn by its __rich_console__); one narrow enough for a
    narrower list draws them again."""
    from rich.table import Table

    app, _ = reader(demo_history, tmp_path)
    drawn: list[Table] = []
    draw = Table.__rich_console__
    monkeypatch.setattr(
        Table, "__rich_console__", lambda self, *a: drawn.append(self) or draw(self, *a)
    )

    async def keys(pilot):
        steps = app.query_one(StepList)
        width, shown = steps.size.width, steps.render_line(0).text
        drawn.clear()
        for size in [(SIZE[0], SIZE[1] - 10), SIZE]:
            await pilot.resize_terminal(*size)
            await pilot.pause()
            assert steps.size.width == width and steps.render_line(0).text == shown
        assert drawn == []
        await pilot.resize_terminal(100, SIZE[1])  # under 120 columns the list is narrower
        await pilot.pause()
        assert steps.size.width < width and len(drawn) >= len(app.reader.series.steps)

    drive(app, keys, SIZE)


def test_the_step_list_groups_the_parts_under_headings(run_history, tmp_path):
    """A title's "Part II · " is a heading above the part's first step, not a prefix taking the
    list's width."""
    app, _ = reader(run_history, tmp_path)

    async def keys(pilot):
        steps = app.query_one(StepList)
        lines = [
            strip.text.strip() for strip in steps.render_lines(Region(0, 0, steps.size.width, 5))
        ]
        assert lines == [
            "Part I",
            "1 A script that talks",
            "Part II",
            "2 A long wait",
            "3 A failure",
        ]
        steps.focus()
        await pilot.press("down")  # over the heading
        assert app.reader.nav.index == 1 and steps.step_at[steps.highlighted] == 1
        await pilot.press("up")
        assert app.reader.nav.index == 0

    drive(app, keys, SIZE)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_main_screen_snapshot(demo_history, tmp_path, snap_compare, size):
    app = WalkthroughApp(
        load_series(demo_history, HISTORY_RANGE), Bookmarks(tmp_path / "walkthrough.json")
    )
    assert snap_compare(app, press=["colon", "4", "enter"], terminal_size=size)


# ---- r: running a step's Try-it


@pytest.fixture(scope="module")
def run_history(tmp_path_factory) -> Path:
    return built_history(tmp_path_factory, "runs", RUN_STEPS)


def runner(history: Path, state: Path, own: bool = True) -> tuple[WalkthroughApp, list[str]]:
    app = WalkthroughApp(
        load_series(history, HISTORY_RANGE), Bookmarks(state / "walkthrough.json"), own_series=own
    )
    app.runs.root = state / "runs"
    notes: list[str] = []
    app.notify = lambda message, **_: notes.append(message)
    return app, notes


async def until(pilot, condition, what: str, seconds: float = 60) -> None:
    """Let the app work until `condition()` holds (a deadline against a hang, not a timing)."""
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"never happened: {what}")


def finished(app: WalkthroughApp, index: int):
    return lambda: (
        index in app.runs.records
        and not app.runs.records[index].running
        and app.runs.active is None
    )


def panel(app: WalkthroughApp) -> tuple[str, list[str], str]:
    run = app.query_one(RunPanel)
    return (
        str(run.query_one("#run-head").render()),
        run.lines,
        str(run.query_one("#run-foot").render()),
    )


def test_r_runs_the_try_it_in_a_clean_checkout_of_the_step_each_time(run_history, tmp_path):
    app, notes = runner(run_history, tmp_path)

    async def keys(pilot):
        await pilot.press("r")
        await until(pilot, finished(app, 0), "the first run ends")
        head, lines, foot = panel(app)
        assert app.query_one(RunPanel).display and not app.query_one(DiffView).display
        assert head.startswith("Try-it of step-01, in a new checkout: ") and head.endswith(
            "runs/step-01"
        )
        assert lines == [
            "$ python show.py hello",  # as typed, though the reader's own interpreter runs it
            "show.py says: hello",
            "GREETING is unset",
            "runs in this checkout: 1",
        ]
        assert foot.startswith("exit 0 · ") and "matches What you should see" in foot
        assert status(app) == "step-01 · run"
        folder = tmp_path / "runs" / "step-01"
        assert git(folder, "rev-parse", "HEAD").strip() == app.reader.series.steps[0].commit.sha
        # again: the same checkout, put back to the step's files (the first run's one gone)
        await pilot.press("r")
        await until(pilot, finished(app, 0), "the second run ends")
        head, lines, foot = panel(app)
        assert (
            "in its checkout, put back to the step's files" in head
            and lines[-1] == "runs in this checkout: 1"
        )
        assert foot.startswith("exit 0 · ")
        await pilot.press("n")  # a step without a run shows its diff; the run of step 1 is kept
        assert app.query_one(DiffView).display and not app.query_one(RunPanel).display
        await pilot.press("p")
        await pilot.pause()
        assert panel(app)[1][-1] == "runs in this checkout: 1"
        await pilot.press("escape")  # back to the diff
        assert app.query_one(DiffView).display and status(app) == "step-01 · unified"
        assert notes == []

    drive(app, keys, SIZE)


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (dead, waiting for a parent to read its status)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.parametrize("key", ["r", "escape"])
def test_a_long_run_is_stopped_with_its_whole_process_group(run_history, tmp_path, key):
    app, notes = runner(run_history, tmp_path)
    pids = []

    async def keys(pilot):
        await pilot.press("n", "r")
        await until(
            pilot,
            lambda: any(
                line.startswith("pids ")
                for line in (app.runs.records[1].lines if 1 in app.runs.records else [])
            ),
            "pids",
        )
        pids.extend(
            int(p)
            for p in next(x for x in app.runs.records[1].lines if x.startswith("pids ")).split()[1:]
        )
        assert app.runs.records[1].running and panel(app)[2].startswith("running · ")
        await pilot.press("p")  # the app goes on while it runs
        assert app.reader.nav.index == 0 and app.query_one(DiffView).display
        await pilot.press("n")
        assert panel(app)[1][-1].startswith("pids ")
        await pilot.press(key)
        await until(pilot, finished(app, 1), "the run stops")
        assert panel(app)[2].startswith("stopped · ")
        assert notes == ["Stopping the run of step 2."]

    drive(app, keys, SIZE)
    leader, child = pids
    assert _gone(leader) and _gone(child)  # the child it started went with it: no orphan
    # nothing of the group runs (a zombie waits only for init to reap it)
    assert _group(leader) <= {"Z"}


STAND_IN_STEP = (
    "A step that needs OpenAI's weights",
    "It loads gpt2.\n\n**Try it**\n\n```bash\npython show.py gpt2\n```\n\n"
    "**Stand-in** (what the checks run, offline): "
    "`gpt2` → `stand-ins/tiny-gpt2` (a random GPT-2)\n\n"
    "**What you should see** (stand-in output: a random GPT-2)\n\n"
    "```\nshow.py says: stand-ins/tiny-gpt2\n```\n",
    {"show.py": "import sys\nprint('show.py says:', *sys.argv[1:])\n"},
)


def test_r_offline_runs_the_stand_in_its_step_names_and_says_so(
    tmp_path_factory, tmp_path, monkeypatch
):
    pytest.importorskip("transformers")
    # as a machine without the network is (the suite's default too)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app, notes = runner(built_history(tmp_path_factory, "stand-in", [STAND_IN_STEP]), tmp_path)

    async def keys(pilot):
        await pilot.press("r")
        await until(pilot, finished(app, 0), "the run ends")
        foot = panel(app)[2]
        assert app.runs.records[0].lines == [
            "offline: run with the stand-ins its Stand-in line names",
            "$ python show.py stand-ins/tiny-gpt2",
            "show.py says: stand-ins/tiny-gpt2",
        ]
        assert (
            foot.startswith("exit 0 · ") and "matches What you should see" in foot and notes == []
        )
        assert (tmp_path / "runs" / "stand-ins" / "tiny-gpt2" / "config.json").is_file()

    drive(app, keys, SIZE)


def test_r_on_another_step_while_one_runs_says_what_it_does_first(run_history, tmp_path):
    app, notes = runner(run_history, tmp_path)

    async def keys(pilot):
        await pilot.press("n", "r")
        await until(
            pilot,
            lambda: 1 in app.runs.records and app.runs.records[1].lines[-1:] != [],
            "the run prints",
        )
        # on step 1, while step 2's run goes on: a word, nothing stopped
        await pilot.press("p", "r")
        assert app.runs.records[1].running and notes == [
            "Step 2's Try-it is running: r again stops it; then r runs this step's."
        ]
        await pilot.press("r")  # as announced
        await until(pilot, finished(app, 1), "the run stops")
        assert (
            app.runs.records[1].stopped
            and notes[-1] == "Stopping the run of step 2."
            and 0 not in app.runs.records
        )
        await pilot.press("r")
        await until(pilot, finished(app, 0), "this step's run ends")
        assert app.runs.records[0].status == 0

    drive(app, keys, SIZE)


def _group(pgid: int) -> set[str]:
    """The states of the processes in a process group."""
    states = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            states.add(fields[0])
    return states


def test_a_failing_try_it_shows_its_status(run_history, tmp_path):
    app, _ = runner(run_history, tmp_path)

    async def keys(pilot):
        await pilot.press("colon", "3", "enter", "r")
        await until(pilot, finished(app, 2), "the run ends")
        _, lines, foot = panel(app)
        assert lines[-1] == "about to fail" and foot.startswith("exit 3 · ")
        assert "What you should see" not in foot  # it promised exit 0: nothing to compare

    drive(app, keys, SIZE)


def test_shell_syntax_is_passed_as_text_or_not_run(run_history, tmp_path):
    app, _ = runner(run_history, tmp_path)

    async def keys(pilot):
        await pilot.press("G", "r")
        await until(pilot, finished(app, 3), "the run ends")
        lines = app.runs.records[3].lines
        # no glob, no tilde, no braces, quotes as one word
        assert "show.py says: * ~ {a,b} two words" in lines
        assert "GREETING is hi" in lines  # VAR=value before the second command of an &&
        assert "· needs a shell: not run: python show.py x; touch marker" in lines
        assert lines[-1] == "runs in this checkout: 3" and panel(app)[2].startswith("exit 0")

    drive(app, keys, SIZE)
    assert not list(tmp_path.rglob("marker"))  # what the shell would have run never ran


def test_y_copies_the_try_it_exactly(run_history, tmp_path, monkeypatch):
    for name in ("TMUX", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    app, notes = runner(run_history, tmp_path)

    async def keys(pilot):
        await pilot.press("y")
        assert app.clipboard == "python show.py hello"
        await pilot.press("G", "y")
        expected = "python show.py * ~ {a,b} 'two words' && GREETING=hi python show.py again\n"
        expected += f"python show.py x; touch marker\n{LONG_COMMAND}"
        assert app.clipboard == expected
        assert notes[-1] == f"Sent to the terminal's clipboard (if it accepts OSC 52): {expected}"
        monkeypatch.setenv("TMUX", "/tmp/tmux-0/default,1,0")
        await pilot.press("y")
        assert notes[-1].startswith(
            "Sent to the terminal's clipboard (in tmux only with `set -g set-clipboard on`)"
        )

    drive(app, keys, SIZE)


def test_other_histories_ask_before_running_once_per_step(run_history, tmp_path, odd_repo):
    app, notes = runner(run_history, tmp_path, own=False)

    async def keys(pilot):
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmRun)
        shown = str(app.screen.query_one("#confirm-argv").render())
        assert shown == repr([sys.executable, "show.py", "hello"])
        await pilot.press("escape")
        assert not isinstance(app.screen, ConfirmRun) and app.runs.records == {}
        await pilot.press("r", "enter")
        await until(pilot, finished(app, 0), "the run ends")
        await pilot.press("r")  # confirmed for this step: runs at once
        assert not isinstance(app.screen, ConfirmRun)
        await until(pilot, finished(app, 0), "the second run ends")
        assert app.runs.records[0].lines[-1] == "runs in this checkout: 1"  # a clean checkout again

    drive(app, keys, SIZE)
    app, notes = reader(odd_repo, tmp_path, "HEAD")  # commit messages without a Try-it

    async def nothing_to_run(pilot):
        await pilot.press("r")
        assert notes == ["This step's narration has no Try-it block: there is nothing to run."]
        assert not isinstance(app.screen, ConfirmRun)

    drive(app, nothing_to_run, SIZE)


def test_z_gives_the_diff_the_whole_width_and_back(run_history, tmp_path):
    app, _ = runner(run_history, tmp_path)

    async def keys(pilot):
        diff = app.query_one(DiffView)
        narrow = diff.size.width
        await pilot.press("z")
        assert not app.query_one(StepList).display_tree_visible if False else True
        assert (
            app.query_one(StepList).region.width == 0 and app.query_one(Narration).region.width == 0
        )
        assert diff.size.width == SIZE[0] and app.query_one("#title").region.height == 1
        await pilot.press("z")
        assert diff.size.width == narrow and app.query_one(StepList).region.width > 0
        assert app.query_one(Narration).region.width > 0

    drive(app, keys, SIZE)


def test_zooming_the_run_wraps_its_output_again_to_the_new_width(run_history, tmp_path):
    app, _ = runner(run_history, tmp_path)

    async def keys(pilot):
        await pilot.press("r")
        await until(pilot, finished(app, 0), "the run ends")
        run = app.query_one(RunPanel)
        run.append("x" * 150)  # a long line of output, as a run prints it
        await pilot.pause()
        narrow = [line for line in run.lines if line.startswith("x")]
        await pilot.press("z")
        await pilot.pause()
        wide = [line for line in run.lines if line.startswith("x")]
        assert "".join(narrow) == "".join(wide) == "x" * 150
        assert len(wide) < len(narrow) and max(map(len, wide)) > max(map(len, narrow))

    drive(app, keys, SIZE)


def test_a_long_try_it_wraps_in_full_at_80_columns(run_history, tmp_path):
    from textual.widgets.markdown import MarkdownFence

    app, _ = runner(run_history, tmp_path)

    async def keys(pilot):
        await pilot.press("G")
        await pilot.pause()
        fence = app.query_one(Narration).document.query(MarkdownFence).first()
        label = fence.query_one("Label")
        shown = " ".join(label.render_line(y).text.strip() for y in range(label.size.height))
        # nothing off the edge
        assert fence.virtual_size.width <= fence.size.width < len(LONG_COMMAND)
        assert LONG_COMMAND in shown

    drive(app, keys, (80, 24))


def test_the_prompt_shows_above_the_footer(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("slash", *"torch")
        prompt, footer = app.query_one("#prompt"), app.query_one("Footer")
        assert prompt.region.height == 1 and prompt.region.bottom <= footer.region.y
        assert prompt.value == "torch"

    drive(app, keys, (80, 24))


def test_help_lists_horizontal_scrolling_and_it_scrolls(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        assert any(
            keys.startswith("shift+") or "⇧" in keys
            for keys, _ in key_rows(app, ReaderScreen.BINDINGS)
        )
        await pilot.press("colon", "4", "enter", "shift+right")
        assert app.query_one(DiffView).scroll_offset.x == 8 and app.reader.nav.index == 3
        app.query_one(StepList).focus()  # from anywhere
        await pilot.press("shift+right")
        assert app.query_one(DiffView).scroll_offset.x == 16 and app.reader.nav.index == 3
        await pilot.press("shift+left")
        await pilot.press("shift+left")
        assert app.query_one(DiffView).scroll_offset.x == 0 and app.reader.nav.index == 3

    drive(app, keys, (60, 24))


def test_a_history_without_narration_collapses_the_pane(odd_repo, tmp_path):
    app, _ = reader(odd_repo, tmp_path, "HEAD")

    async def keys(pilot):
        assert app.query_one(Narration).region.width > 0  # "Add files" has a body
        await pilot.press("n")  # "Rename the script" is a subject line only
        assert (
            app.query_one(Narration).region.width == 0
            and app.query_one(Narration).region.height == 0
        )

    drive(app, keys, SIZE)


def test_e_opens_the_editor_at_the_line_in_view(demo_history, tmp_path, monkeypatch):
    record, editor = tmp_path / "argv.txt", tmp_path / "vim"
    editor.write_text(
        f"#!{sys.executable}\nimport sys, pathlib\n"
        f"pathlib.Path({str(record)!r}).write_text(repr(sys.argv[1:]))\n"
    )
    editor.chmod(0o755)
    monkeypatch.setenv("EDITOR", str(editor))
    monkeypatch.delenv("VISUAL", raising=False)
    app, notes = reader(demo_history, tmp_path)
    fake_suspend(app)

    async def keys(pilot):
        await pilot.press("colon", "4", "enter")
        app.query_one(DiffView).scroll_to(0, 20, animate=False)
        await pilot.pause()
        row = app.query_one(DiffView).rows[20]
        await pilot.press("e")
        argv = eval(record.read_text())
        assert (
            argv[0] == f"+{row.left.line.new}" and argv[1].endswith("train_gpt2.py") and notes == []
        )

    drive(app, keys, (80, 24))


def test_a_step_git_cannot_read_is_shown_and_the_app_goes_on(tmp_path):
    """A damaged clone: one blob gone. Showing that step, or searching every step, is a message, not
    a crash."""
    repo = make_damaged_source(tmp_path)
    blob = git(repo, "rev-parse", "HEAD~1:b.txt").strip()
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    app, notes = reader(repo, tmp_path, "HEAD")

    async def keys(pilot):
        await pilot.press("slash", *"needle", "enter")  # step 3's diff reads the lost blob
        assert app.reader.nav.index == 0 and status(app).endswith("match 1/2")
        await pilot.press("colon", "2", "enter")
        assert diff_lines(app)[0].startswith("git could not read this step: ")
        await pilot.press("n")
        assert app.reader.nav.index == 2 and diff_lines(app)[0].startswith(
            "git could not read this step"
        )
        await pilot.press("p", "p")
        assert app.reader.nav.index == 0 and diff_lines(app)[0].startswith("A a.txt")

    drive(app, keys, SIZE)


def make_damaged_source(tmp_path: Path) -> Path:
    from repos import commit

    source = tmp_path / "repo"
    source.mkdir()
    git(source, "init", "-q", "-b", "main")
    commit(source, "Add a\n\nThe needle is here.", {"a.txt": "needle\n"})
    commit(source, "Add b", {"b.txt": "b\n"})
    commit(source, "Change b", {"b.txt": "b, changed, with a needle\n"})
    return source


def test_after_a_run_the_footer_and_new_steps_still_show(run_history, tmp_path):
    """A run's end once set Textual's own `App._running` to None: nothing mounted after it started
    (the footer's keys, a step's narration), and the footer went blank."""
    app, _ = runner(run_history, tmp_path)

    async def keys(pilot):
        await pilot.press("r")
        await until(pilot, finished(app, 0), "the run ends")
        await pilot.press("escape", "n")
        await pilot.pause(0.3)
        footer_keys = [key for key in app.query("FooterKey") if key.is_mounted]
        assert {key.action for key in footer_keys} >= {"app.quit", "run"}
        narration = app.query_one(Narration).document
        assert narration is not None and narration.is_mounted and "ten minutes" in narration.source

    drive(app, keys, SIZE)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_run_panel_snapshot(run_history, tmp_path, snap_compare, size):
    app = WalkthroughApp(
        load_series(run_history, HISTORY_RANGE), Bookmarks(tmp_path / "b.json"), own_series=True
    )
    app.runs.root = Path("/tmp/walkthrough-snapshot-runs")
    shutil.rmtree(app.runs.root, ignore_errors=True)
    app.runs.clock = lambda: 100.0  # every run takes 0.0 s

    async def run_first_step(pilot):
        await pilot.press("r")
        await until(pilot, finished(app, 0), "the run ends")
        await pilot.pause(0.3)  # the footer follows the focus, now on the run's output

    assert snap_compare(app, run_before=run_first_step, terminal_size=size)
    shutil.rmtree(app.runs.root, ignore_errors=True)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_zoom_snapshot(demo_history, tmp_path, snap_compare, size):
    app = WalkthroughApp(
        load_series(demo_history, HISTORY_RANGE), Bookmarks(tmp_path / "walkthrough.json")
    )
    assert snap_compare(app, press=["colon", "4", "enter", "s", "z"], terminal_size=size)


# ---- a step switch made quick: each shortcut, and the mistake it could hide

NARRATIONS = [
    "One paragraph.\n\nAnother paragraph.",
    "## Try it\n\n```bash\npython a.py\n```\n\nA paragraph after.",
    # the same blocks, new text
    "## Try it\n\n```bash\npython b.py \\\n  --flag\n```\n\nAnother text after it.",
    "## Why\n\nBecause.\n\n- a list\n- of two",  # another heading, a list
    "",  # a subject line only: the pane steps aside
    "```python\nprint(1)\n```\n\n## What you should see\n\n1",
]


def shown_as(document) -> list[tuple[str, str, str | None]]:
    """What a Markdown document shows: each widget in it (its blocks and what they hold: a code
    block's label, a list's bullets), its kind, text and source. Public Textual API only."""
    from textual.content import Content
    from textual.widgets import Label
    from textual.widgets.markdown import MarkdownFence

    def text(widget) -> str:
        shown = widget.render()
        return str(shown) if isinstance(shown, (str, Content)) else type(shown).__name__

    for fence in document.query(MarkdownFence):
        assert text(fence.query_one(Label)) == fence.code
    return [
        (type(widget).__name__, text(widget), getattr(widget, "source", None))
        for widget in document.walk_children()
    ]


def test_each_step_shows_its_own_narration_made_ready_or_refilled(tmp_path_factory, tmp_path):
    """A step switch onto a step next to the one read shows the document made for it meanwhile;
    onto a far step, the document shown takes the new text. Either way each step must show its own
    narration as a new document would, in one document shown, never a block left from another
    step, and no more documents kept than the step shown and its neighbours."""
    from textual.widgets import Markdown

    history = built_history(
        tmp_path_factory,
        "narrations",
        [(f"N{n}", text, {"a.py": f"x = {n}\n"}) for n, text in enumerate(NARRATIONS)],
    )
    app, _ = reader(history, tmp_path)

    async def keys(pilot):
        narration = app.query_one(Narration)
        made_ready = 0
        for key in (
            ["n"] * 5 + ["p"] * 5 + ["G", "g", "colon", "4", "enter", "colon", "2", "enter", "n"]
        ):
            hidden = set(narration.query_children(Markdown))
            hidden.discard(narration.document)
            await pilot.press(key)
            await pilot.pause()  # the neighbours made ready after the frame
            if key in ("colon", "2", "4"):
                continue
            text = NARRATIONS[app.reader.nav.index].strip()
            if not text:
                assert narration.region.width == 0  # collapsed; what it holds is not shown
                continue
            document = narration.document
            made_ready += document in hidden
            documents = list(narration.query_children(Markdown))
            assert [shown for shown in documents if shown.display] == [document]
            assert len(documents) <= 3 and document.source == text
            fresh = Markdown(text)  # what a new document would show
            fresh.display = False
            await app.screen.mount(fresh)
            assert shown_as(document) == shown_as(fresh)
            await fresh.remove()
        assert made_ready >= 5  # most steps by n and p

    drive(app, keys, SIZE)


def test_the_prompt_hides_the_footer_keys_and_shows_them_again_without_making_any(
    demo_history, tmp_path
):
    """While the prompt is open every key is text, and the footer shows none, as Textual's own: here
    by hiding the keys' widgets instead of making them all again twice; moving between the panes
    changes nothing."""
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.pause(0.2)

        def shown():
            return [key.action for key in app.query("FooterKey") if key.display]

        made, before = set(app.query("FooterKey")), shown()
        assert {"next_step", "jump", "search", "app.quit"} <= set(before)
        await pilot.press("colon")
        await pilot.pause(0.2)
        assert shown() == []
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert shown() == before
        for _ in range(3):
            await pilot.press("tab")
        await pilot.pause(0.2)
        assert shown() == before and set(app.query("FooterKey")) == made

    drive(app, keys, SIZE)


def test_focus_moving_leaves_the_diff_pane_as_drawn(demo_history, tmp_path, monkeypatch):
    """DiffView skips Textual's restyle and redraw when focus comes or goes (each use of the
    prompt): right only while no style rule picks the pane, or its scrollbars, by :focus. The rows
    it drew are kept, and the screen asks the pane for none of them again; focus still comes and
    goes, and the pane's container hears of it."""
    from textual import events

    from walkthrough.change_pane import ChangePane

    app, _ = reader(demo_history, tmp_path)
    asked: list[int] = []  # rows the screen asked the pane to draw
    restyled: list[DiffView] = []
    heard: list[str] = []  # what the change pane heard of its descendants' focus
    render_line, update_node_styles = DiffView.render_line, DiffView.update_node_styles
    monkeypatch.setattr(
        DiffView, "render_line", lambda self, y: asked.append(y) or render_line(self, y)
    )
    monkeypatch.setattr(
        DiffView,
        "update_node_styles",
        lambda self, *a, **k: restyled.append(self) or update_node_styles(self, *a, **k),
    )

    def hearing(name: str):
        return lambda self, event: heard.append(f"{name} {type(event.widget).__name__}")

    for event in (events.DescendantFocus, events.DescendantBlur):
        monkeypatch.setattr(ChangePane, event.handler_name, hearing(event.__name__), raising=False)

    async def keys(pilot):
        await pilot.press("colon", "4", "enter")
        await pilot.pause()
        diff = app.query_one(DiffView)
        nodes = list(diff.walk_children(with_self=True))  # the pane and its scrollbars

        def styles():
            app.stylesheet.update_nodes(nodes)
            return [node.styles.get_rules() for node in nodes]

        assert app.focused is diff
        shown, drawn, focused = diff_lines(app), dict(diff._strips), styles()
        asked.clear()
        restyled.clear()
        heard.clear()
        await pilot.press("colon")
        await pilot.pause()
        assert not diff.has_focus and styles() == focused
        assert drawn and all(diff._strips.get(key) is strip for key, strip in drawn.items())
        await pilot.press("escape")
        await pilot.pause()
        assert asked == []  # Textual's own Focus and Blur handlers draw the pane again
        assert restyled == []  # and its watch_has_focus restyles it
        assert app.focused is diff and diff.has_focus and diff_lines(app) == shown
        assert heard == ["DescendantBlur DiffView", "DescendantFocus DiffView"]

    drive(app, keys, SIZE)


def test_the_diff_scrollbar_follows_each_steps_rows(tmp_path_factory, tmp_path):
    """The diff pane's scrollbars follow its rows, not its size: from a long step to a short one
    (the pane's size the same) the scrollbar must go, and come back; a layout of the screen with the
    same rows keeps it."""
    lines = "".join(f"x = {n}\n" for n in range(200))
    history = built_history(
        tmp_path_factory,
        "scrollbar",
        [
            ("Short", "Short.", {"a.py": "x\n"}),
            ("Long", "Long.", {"b.py": lines}),
            ("Short", "Short.", {"c": "y\n"}),
        ],
    )
    app, _ = reader(history, tmp_path)

    async def keys(pilot):
        diff = app.query_one(DiffView)

        def scrollbar():
            return diff.show_vertical_scrollbar, diff.vertical_scrollbar.window_virtual_size

        await pilot.press("n")
        size = diff.size
        assert scrollbar() == (True, len(diff.rows))
        await pilot.press("colon", "escape")  # the screen laid out again, the same rows
        assert scrollbar() == (True, len(diff.rows))
        await pilot.press("n")
        assert diff.size == size and not diff.show_vertical_scrollbar
        await pilot.press("p")
        assert scrollbar() == (True, len(diff.rows))

    drive(app, keys, SIZE)


def test_a_step_is_read_once_also_when_read_ahead(demo_history, tmp_path, monkeypatch):
    """A step's diff is read on a thread while the rest of the switch goes on (G), or as soon as its
    number is typed after `:` (once no digit more could make another step's number of it): what asks
    for the step before that read ends (Enter, a search) waits for it, so no step is read twice. The
    bookmark is written once the step is drawn."""
    import threading

    from walkthrough import history

    reads: list[tuple[str, str]] = []  # (commit, thread)

    def run_git(git, *args, **kwargs):
        if "diff-tree" in args:
            reads.append((args[-1], threading.current_thread().name))
            if threading.current_thread().name.startswith("walkthrough-diff"):
                # a slow disk: what asks for the step meanwhile must wait for this read
                time.sleep(0.8)
        return real_run_git(git, *args, **kwargs)

    real_run_git = history.run_git
    monkeypatch.setattr(history, "run_git", run_git)

    def read_by_the_loader(app: WalkthroughApp, index: int) -> bool:
        sha = app.reader.series.steps[index].commit.sha
        return any(
            commit == sha and thread.startswith("walkthrough-diff") for commit, thread in reads
        )

    app, _ = reader(demo_history, tmp_path)

    async def enter_during_the_read(pilot):
        await pilot.press("colon", "4")  # of five steps, "4" is step 4: read ahead
        await until(pilot, lambda: read_by_the_loader(app, 3), "the read ahead of step 4 starts")
        await pilot.press("enter")
        assert app.reader.nav.index == 3 and title(app) == "Step 4/5 · Causal self-attention"
        assert any("self.c_attn" in line for line in diff_lines(app))

    drive(app, enter_during_the_read, SIZE)
    assert max(Counter(commit for commit, _ in reads).values()) == 1
    reads.clear()
    app, _ = reader(demo_history, tmp_path / "again")

    async def search_during_the_read(pilot):
        await pilot.press("G")  # step 5, never read before
        assert app.reader.nav.index == 4
        await until(pilot, lambda: read_by_the_loader(app, 4), "step 5 read on the loader's thread")
        marks = Bookmarks(tmp_path / "again" / "walkthrough.json")
        await until(
            pilot,
            lambda: marks.recall(app.reader.series) == 4,
            "step 5's bookmark written once drawn",
        )
        await pilot.press("colon", "3", "escape")  # step 3 read ahead, not gone to
        await until(pilot, lambda: read_by_the_loader(app, 2), "the read ahead of step 3 starts")
        await pilot.press("slash", *"c_attn", "enter")  # a search reads every step itself, at once
        # none from step 5 on: the first
        assert app.reader.nav.index == 3 and status(app).endswith("match 1/3")

    drive(app, search_during_the_read, SIZE)
    assert max(Counter(commit for commit, _ in reads).values()) == 1


def test_syntax_colours_cover_every_line_once_in_any_order(monkeypatch):
    """Lines are coloured a chunk at a time from the first one asked for (scrolling up: upwards):
    whatever the order, every line is coloured once and shows its own text."""
    import random

    from walkthrough import diff_view
    from walkthrough.diff_view import Code

    lines = [f"value_{i} = {i}  # {'x' * (i % 7)}" for i in range(230)]
    coloured: list[int] = []

    def highlight(code, **kwargs):
        coloured.append(code.count("\n") + 1)
        return real_highlight(code, **kwargs)

    real_highlight = diff_view.highlight
    monkeypatch.setattr(diff_view, "highlight", highlight)
    shuffled = list(range(230))
    random.Random(7).shuffle(shuffled)
    for order in (
        range(230),
        range(229, -1, -1),
        [*range(120, 230), *range(119, -1, -1)],
        shuffled,
    ):
        coloured.clear()
        code = Code(lines, "a.py")
        assert [code[i].plain for i in order] == [lines[i] for i in order]
        assert sum(coloured) == len(lines) and max(coloured) <= Code.CHUNK


def test_x_gives_the_exercise_command_where_a_step_has_a_check(
    series_history, tmp_path, monkeypatch
):
    for name in ("TMUX", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    series = load_series(series_history, HISTORY_RANGE)
    tying = next(step.number for step in series.steps if step.slug == "tying")
    app = WalkthroughApp(series, Bookmarks(tmp_path / "walkthrough.json"), own_series=True)
    notes: list[str] = []
    app.notify = lambda message, **_: notes.append(message)

    async def keys(pilot):
        await pilot.press("colon", *str(tying), "enter")
        assert status(app).endswith(" · exercise") and title(app).startswith(f"Step {tying}/")
        await pilot.press("x")
        assert app.clipboard == f"walkthrough exercise {tying}"
        await pilot.press("G")  # Part II: no check
        assert "exercise" not in status(app)
        await pilot.press("x")
        last = len(series.steps)
        assert (
            notes[-1]
            == f"Step {last} has no exercise: the checks cover Part 0's and Part I's steps."
        )

    drive(app, keys, SIZE)


# ---- the keys at any size, and a screenshot


def test_S_saves_the_screen_as_an_svg_and_says_where(demo_history, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the folder the reader was started from
    app, notes = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("colon", "4", "enter", "S")

    drive(app, keys, SIZE)
    prefix = "Saved the screen as "
    assert len(notes) == 1 and notes[0].startswith(prefix)
    saved = Path(notes[0].removeprefix(prefix))
    assert saved.parent == tmp_path and saved.suffix == ".svg"
    svg = html.unescape(saved.read_text()).replace("\u00a0", " ")  # Textual writes spaces as &#160;
    assert svg.startswith("<svg") and "Step 4/5 · Causal self-attention" in svg


def test_a_narrow_footer_shows_whole_keys_from_help_on_and_a_wide_one_all(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)
    labels = [key.description for key in ReaderScreen.BINDINGS if key.show]

    def footer() -> list[str]:
        """The footer's labels on screen, each checked to be drawn whole inside the terminal."""
        keys = [key for key in app.screen.query("FooterKey") if key.display]
        assert all(key.region.right <= app.size.width for key in keys)
        return [key.description for key in keys]

    async def keys(pilot):
        narrow = footer()
        assert (
            narrow == labels[: len(narrow)]
            and 8 <= len(narrow) < len(labels)
            and narrow[0] == "Help"
        )
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        assert footer() == labels
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert footer() == narrow

    drive(app, keys, (80, 24))


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_help_snapshot(demo_history, tmp_path, snap_compare, size):
    app = WalkthroughApp(
        load_series(demo_history, HISTORY_RANGE), Bookmarks(tmp_path / "walkthrough.json")
    )
    assert snap_compare(app, press=["question_mark"], terminal_size=size)


def test_at_80x24_the_help_scrolls_to_every_key_under_its_closing_line(demo_history, tmp_path):
    app, _ = reader(demo_history, tmp_path)

    async def keys(pilot):
        await pilot.press("question_mark")
        await pilot.pause()
        box, hint = app.screen.query_one("#help"), app.screen.query_one("#help-hint", Static)
        assert str(hint.render()) == "esc, q or ? closes this · ↑ ↓ scroll"
        assert box.max_scroll_y > 0 and box.scroll_offset.y == 0  # more keys than lines: it scrolls
        shown = app.screen.find_widget(hint).region
        # inside the box, on screen
        assert box.region.contains_region(shown) and box.region.bottom <= 24
        await pilot.press("end")
        await pilot.pause()
        assert box.scroll_offset.y == box.max_scroll_y
        assert app.screen.find_widget(hint).region == shown  # docked: it stays where it was

    drive(app, keys, (80, 24))


def test_the_run_pane_shows_a_command_as_it_is_typed(tmp_path_factory, tmp_path):
    """As the Try-it has it: `python` (not the path of the reader's interpreter, which runs it),
    quoted as a person quotes it."""
    quoted = (
        "Quotes",
        "It prints a word.\n\n**Try it**\n\n```bash\npython -c \"print('micrograd', 1)\"\n```\n\n"
        "**What you should see**\n\n```\nmicrograd 1\n```\n",
        {"notes.txt": "quotes\n"},
    )
    app, _ = runner(built_history(tmp_path_factory, "quoted", [quoted]), tmp_path)

    async def keys(pilot):
        await pilot.press("r")
        await until(pilot, finished(app, 0), "the run ends")
        _, lines, foot = panel(app)
        assert lines[:2] == ["$ python -c \"print('micrograd', 1)\"", "micrograd 1"]  # not '"'"'
        assert "matches What you should see" in foot

    drive(app, keys, (160, 48))
