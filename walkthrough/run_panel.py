"""The run pane: a step's Try-it as it runs, in place of the diff."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import RichLog, Static

from .rows import printable


class RunPanel(Vertical):
    """A step's run: the command and where it runs, its output as it comes, and how it ended. The
    screen hands it a run and the run's lines as they come; the foot keeps itself current."""

    def compose(self) -> ComposeResult:
        yield Static(id="run-head", markup=False)
        yield RichLog(
            id="run-log",
            max_lines=20_000,
            wrap=True,
            min_width=20,
            markup=False,
            highlight=False,
        )
        yield Static(id="run-foot", markup=False)

    _output: list[str] = []  # the lines shown, as printed: wrapped again on a new width
    _wrapped_at = 0  # the width they were wrapped at
    _foot: Callable[[], str] = str  # how the run shown stands, asked again as time goes by
    _run: object = None  # which run it is

    def on_mount(self) -> None:
        self.set_interval(0.5, self.update_foot)  # a running run's seconds count up

    def show(self, run: object, head: str, lines: list[str], foot: Callable[[], str]) -> None:
        self._run = run
        self.query_one("#run-head", Static).update(head)
        self._output = []
        self._rewrap(lines)
        self._foot = foot
        self.update_foot()

    def update_foot(self) -> None:
        """The foot as the run stands now; an ended run's stays as it is, and is not drawn again."""
        foot = self.query_one("#run-foot", Static)
        if self.display and (text := self._foot()) != foot.content:
            foot.update(text)

    def _rewrap(self, lines: list[str]) -> None:
        self.query_one(RichLog).clear()
        for line in lines:
            self.append(line)

    def _width(self) -> int:
        # the width the log will have: a panel just made visible has not been laid out yet, and the
        # log would wrap at its minimum width; the column it fills (#change) has been. 3: the
        # padding and the scrollbar
        return max(20, (self.parent.content_size.width if self.parent else self.size.width) - 3)

    def add(self, run: object, line: str) -> None:
        """A line `run` printed: shown if the panel shows that run."""
        if self.display and run is self._run:
            self.append(line)

    def append(self, line: str) -> None:
        self._wrapped_at = width = self._width()
        self._output.append(line)
        self.query_one(RichLog).write(Text(printable(line)), width=width)

    def on_resize(self, event: events.Resize) -> None:
        """A new width (the pane zoomed, the terminal resized): the output wraps again to fit."""
        if self._output and self._width() != self._wrapped_at:
            lines, self._output = self._output, []
            self._rewrap(lines)

    @property
    def lines(self) -> list[str]:
        """What the log shows, one screen line each (long lines wrap)."""
        return [strip.text.rstrip() for strip in self.query_one(RichLog).lines]
