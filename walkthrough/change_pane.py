"""The change pane: the files a step touches, their diff, and in the diff's place the step's run."""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import OptionList, RichLog

from .diff import FileDiff, Line
from .diff_view import DiffView
from .file_list import FileList
from .rows import Layout
from .run_panel import RunPanel


class ChangePane(Vertical):
    """A file list (when a step touches more than one file) over the diff, or the step's run in the
    diff's place. The screen says what to show; the pane swaps its parts, and the keys that scrolled
    the one hidden go on scrolling the one shown."""

    def compose(self) -> ComposeResult:
        yield FileList(id="files")
        yield DiffView(id="diff")
        yield RunPanel(id="run")

    def list_files(self, files: list[FileDiff] | None, highlighted: int | None) -> None:
        """A step's files (None: the ones listed already) and the one to highlight. The screen chose
        it, so no message says the reader did."""
        file_list = self.query_one(FileList)
        with file_list.prevent(OptionList.OptionHighlighted):
            if files is not None:
                file_list.show_files(files)
            file_list.highlighted = highlighted

    def show_run(self, run: object, head: str, lines: list[str], foot: Callable[[], str]) -> None:
        self._swap(run=True)
        self.query_one(RunPanel).show(run, head, lines, foot)

    def show_diff(self, layout: Layout, line: Line | None = None, file: int | None = None) -> bool:
        """The diff laid out, scrolled to `line` (a search match) or else to the top of `file` (one
        of several); False if `line` is past the rows the layout keeps."""
        self._swap(run=False)
        diff = self.query_one(DiffView)
        diff.show(layout)
        row = layout.line_rows.get(id(line)) if line is not None else None
        if row is not None:
            diff.mark(row)
        elif line is not None:
            return False
        elif not layout.path and file is not None:
            diff.scroll_to_row(layout.file_rows[file])
        return True

    def shown(self) -> Widget:
        """What the keys scroll: the diff, or the run's output."""
        run = self.query_one(RunPanel)
        return run.query_one(RichLog) if run.display else self.query_one(DiffView)

    def _swap(self, run: bool) -> None:
        diff, panel = self.query_one(DiffView), self.query_one(RunPanel)
        had_focus = self.screen.focused in (diff, panel.query_one(RichLog))
        panel.display, diff.display = run, not run
        if had_focus:  # the keys that scrolled the one hidden scroll the one shown
            self.shown().focus()
        file_list = self.query_one(FileList)
        file_list.display = not run and file_list.option_count > 1
