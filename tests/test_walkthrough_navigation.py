"""The reader's state without its screen: where it is in a series (Navigation, Search), the key
table, and what `e` opens. Plain objects on the seven odd steps of repos.make_odd_repo, no Textual.
"""

import os
import stat
import sys

import pytest

from repos import BIG_LINES
from walkthrough.editor import Copies, Edit, prepare_edit, run_editor
from walkthrough.history import Match, load_series
from walkthrough.keys import KEYS, fitting
from walkthrough.navigation import Navigation, Search
from walkthrough.rows import MAX_ROWS


@pytest.fixture
def nav(odd_repo) -> Navigation:
    return Navigation(load_series(odd_repo))


# ---- the search


def test_a_search_starts_from_the_step_you_are_on_and_goes_round():
    search = Search()
    assert search.move(1) is None and search.counter(0) == ""  # N before any search
    matches = [Match(0), Match(2, 0), Match(2, 1), Match(5)]
    assert search.start(matches, 1) == Match(2, 0)
    assert search.counter(2) == "match 2/4" and search.counter(1) == ""  # only on its step
    assert [search.move(1), search.move(1), search.move(-1)] == [Match(2, 1), Match(5), Match(2, 1)]
    search.start(matches, 6)  # past the last match: from the first
    assert search.counter(0) == "match 1/4" and search.move(-1) == Match(5)
    assert search.start([], 0) is None and search.current is None and search.move(1) is None


def test_going_to_a_match_follows_its_file(nav):
    series = nav.series
    (match,) = series.search("hello")  # step 5's `print('hello')`
    nav.whole_file = True
    line = nav.at_match(match, series.files(match.step))
    assert nav.index == 4 and nav.path == "b.py" and not nav.whole_file
    assert line.text == "print('hello')" and line.kind == "+"
    nav.path = "a.py"
    assert nav.at_match(Match(0), series.files(0)) is None and nav.path == "a.py"  # the narration


# ---- steps and files


def test_steps_by_delta_stop_at_both_ends(nav):
    assert nav.step_by(-1) is None and nav.step_by(1) == 1 and nav.neighbours() == [1]
    nav.index = 6
    assert nav.step_by(1) is None and nav.neighbours() == [5]
    nav.index = 3
    assert nav.neighbours() == [4, 2] and nav.numbers() == "1-7" and nav.numbers(" to ") == "1 to 7"


def test_a_typed_step_number(nav):
    assert [nav.typed(text) for text in ("1", "7", "8", "0", "x", "")] == [
        0,
        6,
        None,
        None,
        None,
        None,
    ]
    # of 7 steps, no digit more makes another step of "1": it is read while Enter is on its way
    assert nav.surely_typed("1") == 0 and nav.surely_typed("9") is None


def test_the_file_followed_stays_while_steps_touch_it(nav):
    files = nav.series.files
    nav.follow(files(0))
    assert nav.path == "a.py"  # the first file of the step
    nav.follow(files(1))
    assert nav.path == "b.py"  # a.py is gone: the step's first file
    nav.path = "notes.txt"
    nav.follow(files(3))
    assert nav.path == "notes.txt"
    nav.follow([])
    assert nav.path is None


# ---- what the panes say


def test_title_and_status(nav):
    nav.index = 4
    ref = nav.series.steps[4].ref
    assert nav.title() == "Step 5/7 · Main work"
    assert nav.status(running=False, exercise=False) == f"{ref} · unified"
    nav.split, nav.zoomed = True, True
    nav.search.start(nav.series.search("hello"), 0)
    assert nav.status(False, True) == f"{ref} · side by side · exercise · match 1/1 · zoom"
    nav.path, nav.whole_file = "b.py", True
    assert nav.status(False, False).startswith(f"{ref} · file b.py ·")
    assert nav.status(True, False).startswith(f"{ref} · run ·")


def test_the_change_pane_layout(nav):
    nav.index, nav.path = 4, "b.py"
    diff = nav.layout(nav.series.files(4))
    assert diff.file_rows == [0] and not diff.path and not diff.split
    nav.split = True
    assert nav.layout(nav.series.files(4)).split
    nav.whole_file = True
    whole = nav.layout(nav.series.files(4))
    assert whole.path == "b.py" and whole.text == ["print('hello')", "x = 1"]
    nav.series.errors[4] = "missing object"  # a step git cannot read says so, whatever the mode
    (row,) = nav.layout([]).rows
    assert row.kind == "note" and row.text == "git could not read this step: missing object"


def test_a_match_past_the_rows_names_the_command_that_shows_it(nav):
    nav.index = 6
    (big,) = nav.series.files(6)  # BIG_LINES lines, more than the pane lays out
    assert len(big.hunks[-1].lines) == BIG_LINES > MAX_ROWS
    assert id(big.hunks[-1].lines[-1]) not in nav.layout([big]).line_rows
    text = nav.past_the_rows()
    assert f"past the first {MAX_ROWS:,} rows" in text
    assert text.endswith(f"show {nav.series.steps[6].rev} shows it all.")


# ---- the key table


def test_the_key_table():
    assert len({key.id for key in KEYS}) == len(KEYS) and len({key.action for key in KEYS}) == len(
        KEYS
    )
    assert all(key.tooltip for key in KEYS)
    footer = [key for key in KEYS if key.show]
    assert footer[0].action == "app.help"  # a cut footer keeps the key to the rest
    assert all(key.description for key in footer)


def test_footer_keys_fit_whole_from_the_first():
    assert fitting([7, 7, 9], 23) == 3
    assert fitting([7, 7, 9], 22) == 2  # the third would be cut: it is left out
    assert fitting([7, 7, 9], 6) == 0 and fitting([], 80) == 0


# ---- e: a copy for $EDITOR


def test_prepare_edit_opens_a_read_only_copy_at_the_line(nav, tmp_path, monkeypatch):
    copies = Copies()
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    assert (
        prepare_edit(nav.series, 4, "b.py", copies, 2)
        == "Set $EDITOR (or $VISUAL) to a command to open files."
    )
    monkeypatch.setenv("EDITOR", "vim -R")
    assert prepare_edit(nav.series, 3, None, copies, None) == "This step changes no files."
    assert (
        prepare_edit(nav.series, 2, "logo.bin", copies, None) == "logo.bin is deleted at this step."
    )
    edit = prepare_edit(nav.series, 4, "b.py", copies, 2)
    assert isinstance(edit, Edit) and edit.argv == ["vim", "-R", "+2", str(edit.copy)]
    assert edit.copy.read_text() == "print('hello')\nx = 1\n" and edit.copy.is_relative_to(
        edit.folder
    )
    assert not os.stat(edit.copy).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    copies.remove()
    assert not edit.folder.exists()


def test_run_editor_says_why_an_editor_did_not_start(tmp_path):
    assert run_editor([sys.executable, "-c", "pass"]) == ""
    missing = str(tmp_path / "no-such-editor")
    assert run_editor([missing]).startswith(f"Could not start the editor {missing!r}: ")
