"""The reader: an app that wires its screens to the model layer, and owns what belongs to the whole
terminal (the clipboard, handing it to an editor, a screenshot). The reader's screen draws where the
reader is; the state itself (Navigation, RunControl, the key table) knows nothing of Textual."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from textual.app import App, SuspendNotSupported
from textual.screen import Screen

from .bookmark import Bookmarks
from .clipboard import copy_with_a_tool, where_it_went
from .editor import Edit, run_editor
from .help_screen import HelpScreen
from .history import Series
from .reader_screen import ReaderScreen
from .run_control import RunControl

# this project's own series, built
PROJECT_HISTORY = Path(__file__).resolve().parent.parent / "history"


class WalkthroughApp(App[None]):
    CSS_PATH = "walkthrough.tcss"
    TITLE = "walkthrough"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide"), (150, "-wider")]

    def __init__(self, series: Series, bookmarks: Bookmarks, own_series: bool | None = None):
        super().__init__()
        assert series.steps, "a series has at least one step"
        # this project's own series runs its Try-its without asking; another history's are confirmed
        if own_series is None:
            own_series = Path(series.repo.git_dir).resolve() == (PROJECT_HISTORY / ".git").resolve()
        self.runs = RunControl(series, own_series)
        self.reader = ReaderScreen(series, bookmarks, self.runs)

    def get_default_screen(self) -> Screen:
        return self.reader

    def on_unmount(self) -> None:
        self.reader.close()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.reader.BINDINGS))

    def action_screenshot(self) -> None:
        """An SVG of the screen as it is, in the folder the reader was started from (Textual's own
        default, the Downloads folder, may not exist on a server), and where it went, on screen."""
        path = self.save_screenshot(path=os.getcwd())
        self.notify(f"Saved the screen as {path}", timeout=6, markup=False)

    def copy(self, text: str) -> None:
        """Through a clipboard program where there is one, and always to the terminal (OSC 52), then
        say which happened: a terminal may drop the request, and nothing says so."""
        tool = copy_with_a_tool(text)
        self.copy_to_clipboard(text)
        self.notify(f"{where_it_went(tool)}: {text}", timeout=4, markup=False)

    def edit(self, edit: Edit) -> None:
        """Hand the terminal to the editor on `e`'s copy of a file, and take it back."""
        try:
            with self.suspend():  # run_editor raises nothing, which would skip the resume
                failure = run_editor(edit.argv)
        except SuspendNotSupported:
            why = "This terminal can't hand over to an editor"
            self.notify(f"{why}; the copy is at {edit.copy}", severity="warning", markup=False)
            return  # the copy stays until the app exits
        # the copy was for this editor; one that returns at once (code without --wait) finds it gone
        shutil.rmtree(edit.folder, ignore_errors=True)
        if failure:
            self.notify(failure, severity="error", markup=False)
