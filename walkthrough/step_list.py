"""The step list: each step's number and title, under a heading for each part of the series."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import events
from textual.geometry import Offset, Region
from textual.reactive import reactive
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from .history import PART, Step, parts_of


class StepList(OptionList):
    """Step number and title; a long title wraps under itself, not under the number. The screen
    moves the highlight."""

    # A new highlight repaints the two options it moves between, not the whole list (OptionList
    # repaints all of it, a good part of a step switch's frame). Where an option's lines are is
    # OptionList's to work out: it hands them to scroll_to_region when it brings the highlighted
    # option into view, and the list keeps them (with the width and padding they hold for) to
    # repaint that option when the highlight leaves it. Lines not known (the first move, a new
    # width): the whole list, as OptionList does.
    highlighted: reactive[int | None] = reactive(None, repaint=False)
    # (geometry, the highlighted option's lines)
    _highlight_lines: tuple[tuple, Region] | None = None
    _moving = False  # inside watch_highlighted

    def watch_highlighted(self, old: int | None, new: int | None) -> None:
        before, self._highlight_lines = self._highlight_lines, None
        self._moving = True
        try:
            super().watch_highlighted(new)  # scrolls to the new option: see scroll_to_region
        finally:
            self._moving = False
        now = self._highlight_lines
        if before is None or now is None or before[0] != now[0]:
            self.refresh()
            return
        for lines in {before[1], now[1]}:
            self.refresh_lines(lines.y, lines.height)

    def scroll_to_region(self, region: Region, **kwargs) -> Offset:
        if self._moving:
            self._highlight_lines = self._geometry(), region
        return super().scroll_to_region(region, **kwargs)

    def _geometry(self) -> tuple:
        """What an option's lines depend on, besides the options themselves."""
        padding = self.get_component_styles("option-list--option").padding
        return self.scrollable_content_region.width, padding

    _options_width: int | None = None  # the width the options were drawn at

    def on_resize(self, event: events.Resize) -> None:
        """OptionList draws every option again on any resize; the drawings only depend on the width,
        and a change of height alone (a terminal made taller or shorter) keeps them:
        prevent_default keeps OptionList's own handler from running after this one."""
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
