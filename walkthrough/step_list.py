"""The step list: each step's number and title, under a heading for each part of the series."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import events
from textual.reactive import reactive
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from .history import PART, Step, parts_of


class StepList(OptionList):
    """Step number and title; a long title wraps under itself, not under the number. The screen
    moves the highlight."""

    # a new highlight repaints the two options it moves between, not the whole list (OptionList
    # repaints all of it, a good part of a step switch's frame)
    highlighted: reactive[int | None] = reactive(None, repaint=False)

    def watch_highlighted(self, old: int | None, new: int | None) -> None:
        lines = self._line_cache
        for index in (old, new):
            if index is not None and index in lines.index_to_line:
                self.refresh_lines(lines.index_to_line[index], lines.heights.get(index, 1))
        super().watch_highlighted(new)

    _options_width: int | None = None  # the width the options were drawn at

    def _on_resize(self, event: events.Resize) -> None:
        """OptionList draws every option again on any resize; the drawings only depend on the width,
        and a change of height alone (the prompt opening or closing under the list) keeps them."""
        width = self.scrollable_content_region.width
        if width == self._options_width:
            event.prevent_default()
        self._options_width = width

    option_of: list[int] = []  # a step's option (its index in the list, headings counted)
    step_at: list[int | None] = []  # an option's step; None for a heading

    def show_steps(self, steps: list[Step]) -> None:
        """The steps under a heading for each part: a title's "Part II · " becomes the heading above
        the part's first step, so every title keeps the list's narrow width for its own words."""
        width = len(str(max((step.number for step in steps), default=0)))
        parts = parts_of([step.title for step in steps])
        options, self.option_of, self.step_at = [], [], []
        for index, (step, part) in enumerate(zip(steps, parts)):
            if part and (index == 0 or parts[index - 1] != part):
                options.append(Option(Text(part, style="bold reverse"), disabled=True))
                self.step_at.append(None)
            grid = Table.grid(padding=(0, 1))
            grid.add_column(width=width, justify="right", style="dim", no_wrap=True)
            grid.add_column(ratio=1)
            grid.add_row(str(step.number), PART.sub("", step.title))
            self.option_of.append(len(options))
            self.step_at.append(index)
            options.append(Option(grid))
        self.set_options(options)

    def point_at(self, step: int) -> None:
        """Highlight `step`'s option: the screen moved there, so no message says the reader did."""
        with self.prevent(OptionList.OptionHighlighted):
            self.highlighted = self.option_of[step]
