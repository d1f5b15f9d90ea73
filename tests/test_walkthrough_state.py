"""What the reader's screen hands to plain objects: the bookmark written once a step is drawn, the
collector held off a step switch, the steps' files read ahead, the file `f` shows. No Textual."""

import asyncio
import gc
import subprocess
import sys

from helpers import ROOT
from walkthrough import gc_pause
from walkthrough.bookmark import Bookmarks
from walkthrough.history import load_series
from walkthrough.navigation import Navigation
from walkthrough.step_files import StepFiles


def test_these_modules_import_no_textual():
    code = (
        "import sys, walkthrough.gc_pause, walkthrough.bookmark, walkthrough.step_files,"
        " walkthrough.navigation;"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'textual'], 'textual imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_a_marked_step_is_written_once_at_the_next_write(odd_repo, tmp_path):
    series, path = load_series(odd_repo), tmp_path / "marks.json"
    marks = Bookmarks(path)
    marks.write()
    assert not path.exists()  # nothing marked: nothing to write
    marks.mark(series, 2)
    marks.mark(series, 4)  # a switch before the last one's frame: the later step wins
    assert not path.exists()
    marks.write()
    assert Bookmarks(path).recall(series) == 4
    path.unlink()
    marks.write()
    assert not path.exists()  # written already


def test_collection_is_held_until_the_frame_and_the_frozen_objects_thawed():
    later = []
    assert gc.isenabled()
    try:
        gc_pause.hold(later.append)
        assert not gc.isenabled() and later == [gc.enable]
        gc_pause.hold(later.append)  # a switch inside a switch: held already, one callback
        assert later == [gc.enable]
        later.pop()()
        assert gc.isenabled()
        gc_pause.freeze()
        assert gc.get_freeze_count() > 0
        gc.disable()  # as a switch would leave it, had the app quit before its frame
    finally:
        gc_pause.thaw()
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_files_are_ready_from_the_loader_and_a_search_waits_for_its_reads(odd_repo):
    series = load_series(odd_repo)
    files = StepFiles(series)
    try:
        assert files.load(1) is not None  # on its way
        ready = asyncio.run(files.ready([1, 2]))
        assert ready == [series.files(1), series.files(2)] and files.load(1) is None  # read once
        files.load(3)
        assert files.search("hello") == series.search("hello")
        assert files.load(3) is None  # the search waited for the read in progress
    finally:
        files.close()


def test_f_shows_the_whole_file_and_back_to_a_diff_that_may_not_touch_it(odd_repo):
    nav = Navigation(load_series(odd_repo))
    assert nav.path is None and not nav.toggle_file([]) and not nav.whole_file  # no file
    nav.path = "gone.py"
    assert nav.toggle_file([]) and nav.whole_file
    files = nav.series.files(nav.index)
    assert nav.toggle_file(files) and not nav.whole_file
    assert nav.path == (files[0].path if files else None)  # back: the step's first file
