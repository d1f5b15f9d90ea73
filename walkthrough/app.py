"""The reader: an app that wires its screens to the model layer. The reader's screen holds the navigation state
and the key table; the runs live in RunControl, which knows nothing of Textual."""

from __future__ import annotations

import os
from pathlib import Path

from textual.app import App
from textual.screen import Screen

from .bookmark import Bookmarks
from .help_screen import HelpScreen
from .history import Series
from .reader_screen import ReaderScreen
from .run_control import RunControl

PROJECT_HISTORY = Path(__file__).resolve().parent.parent / "history"  # this project's own series, built


class WalkthroughApp(App[None]):
    CSS_PATH = "walkthrough.tcss"
    TITLE = "walkthrough"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide"), (150, "-wider")]

    def __init__(self, series: Series, bookmarks: Bookmarks, own_series: bool | None = None):
        super().__init__()
        assert series.steps, "a series has at least one step"
        # this project's own series runs its Try-its without asking; any other history's commands are confirmed
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
        """An SVG of the screen as it is, in the folder the reader was started from (Textual's own default, the
        Downloads folder, may not exist on a server), and where it went, on screen."""
        path = self.save_screenshot(path=os.getcwd())
        self.notify(f"Saved the screen as {path}", timeout=6, markup=False)
