"""The diff pane: a step's diff, unified or side by side, or one whole file, with syntax colours."""

from __future__ import annotations

import re
from functools import lru_cache

from pygments.lexers import get_lexer_for_filename
from pygments.util import ClassNotFound
from rich.segment import Segment
from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.geometry import Size
from textual.highlight import highlight
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.style import Style as VisualStyle

from .diff import FileDiff, Line
from .rows import Cell, Layout, Row, columns, printable


@lru_cache(maxsize=512)
def language(path: str) -> str:
    try:
        return get_lexer_for_filename(path).aliases[0]
    except ClassNotFound:
        return "text"


class Code:
    """Syntax colours for a column of source lines, worked out as they come into view, CHUNK lines
    at a time: a 2,000-line diff costs a screenful, not 2,000 lines, to show. A chunk starts at the
    first line asked for (the pane's top row) and runs down to the next coloured line; scrolling up,
    it ends at the coloured line below."""

    CHUNK = 50

    def __init__(self, lines: list[str], path: str):
        self.lines = lines
        self.language = language(path)
        self._coloured: dict[int, Content] = {}

    def __getitem__(self, index: int) -> Content:
        content = self._coloured.get(index)
        if content is None:
            self._colour(index)
            content = self._coloured[index]
        return content

    def _colour(self, index: int) -> None:
        coloured, chunk = self._coloured, self.CHUNK
        if index + 1 in coloured:  # scrolling up
            start, end = index, index + 1
            while start > 0 and end - start < chunk and start - 1 not in coloured:
                start -= 1
        else:
            start, end = index, index + 1
            while end < len(self.lines) and end - start < chunk and end not in coloured:
                end += 1
        block = [printable(text) for text in self.lines[start:end]]
        lines = highlight("\n".join(block), language=self.language).split("\n", allow_blank=True)
        lines += [Content()] * (len(block) - len(lines))  # highlight drops trailing blanks
        coloured.update(zip(range(start, end), lines))


class DiffView(ScrollView, can_focus=True, inherit_bindings=False):
    """The rows of a Layout (a step's diff, unified or side by side, or one whole file), drawn a
    line at a time with the line API, so only the rows on screen cost anything."""

    # no left/right: those keys turn the page (step) everywhere in the app; shift+left/right (the
    # app's table) scroll the diff sideways
    BINDINGS = [
        Binding("up", "scroll_up", "Up", show=False),
        Binding("down", "scroll_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown,space", "page_down", "Page down", show=False),
        Binding("home", "scroll_home", "Top", show=False),
        Binding("end", "scroll_end", "Bottom", show=False),
    ]
    COMPONENT_CLASSES = {
        "diff--file",
        "diff--hunk",
        "diff--note",
        "diff--added",
        "diff--removed",
        "diff--gutter",
        "diff--current",
        "diff--match",
    }

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._layout = Layout([])
        self._file_code: Code | None = None  # a whole file's one column
        self._digits = 1
        self._query: re.Pattern | None = None
        self._current: int | None = None  # the row of the current search match
        # id(FileDiff) -> (the FileDiff, kept alive for its id; its Code columns)
        self._codes: dict[int, tuple] = {}
        # drawn rows, by (row, scroll_x, width): a pane that is resized (the prompt opening) or
        # scrolled back draws them again without colouring anything
        self._strips: dict[tuple[int, int, int], Strip] = {}
        # the styles the kept rows were drawn with
        self._drawn_colours: tuple[VisualStyle, ...] | None = None
        self._styles: dict[tuple, VisualStyle] = {}  # see _style

    @property
    def rows(self) -> list[Row]:
        return self._layout.rows

    # The pane looks the same with focus or without: no style rule picks it by :focus (a test holds
    # the stylesheet to that). Textual restyles a widget and its scrollbars (watch_has_focus), and
    # draws it all again (Widget's own Focus and Blur handlers), whenever focus comes or goes; here
    # that would be twice for each use of the `:` or `/` prompt. These handlers do what Widget's do,
    # without either: prevent_default keeps Widget's from running after them.

    def watch_has_focus(self, has_focus: bool) -> None:
        pass

    def on_focus(self, event: events.Focus) -> None:
        event.prevent_default()
        self.has_focus = True
        if self.parent is not None:
            self.parent.post_message(events.DescendantFocus(self))

    def on_blur(self, event: events.Blur) -> None:
        event.prevent_default()
        self.has_focus = False
        if self.parent is not None:
            self.parent.post_message(events.DescendantBlur(self))

    def show(self, layout: Layout) -> None:
        self._layout = layout
        self._strips.clear()
        self._file_code = Code(layout.text, layout.path) if layout.text else None
        self._digits = len(str(layout.last_number))
        self._current = None
        gutter = self._gutter_width()
        # each side scrolls under its own numbers: room for the longest line of either side
        if layout.split:
            longest = max(
                (len(c.line.text) for r in layout.rows for c in (r.left, r.right) if c), default=0
            )
            width = 2 * (self._digits + 1 + longest + 1)
        else:
            width = max(
                (gutter + len(r.left.line.text) if r.left else len(r.text) for r in layout.rows),
                default=0,
            )
        self.virtual_size = Size(width + 1, len(layout.rows))
        self.scroll_to(0, 0, animate=False)
        self.refresh()

    def prepare(self, files: list[FileDiff]) -> None:
        """Colour the first screenful of a step ahead of time."""
        rows = 0
        for file in files:
            if rows >= self.size.height:
                break
            both = self._code(file)["both"]
            if both.lines:
                both[0]  # colours the first chunk, which Code keeps
            rows += len(both.lines) + len(file.hunks) + 1

    def _code(self, file: FileDiff) -> dict[str, Code]:
        """The file's columns, kept so a step seen again is not coloured again."""
        if id(file) not in self._codes:
            self._codes[id(file)] = (
                file,
                {side: Code(text, file.path) for side, text in columns(file).items()},
            )
        return self._codes[id(file)][1]

    def _content(self, cell: Cell) -> Content:
        code = self._file_code if cell.file is None else self._code(cell.file)[cell.side]
        return code[cell.index]

    def set_query(self, query: str) -> None:
        self._query = re.compile(re.escape(query), re.IGNORECASE) if query else None
        self._strips.clear()
        self.refresh()

    def scroll_to_row(self, row: int) -> None:
        self.scroll_to(0, row, animate=False)

    def line_in_view(self, path: str | None) -> int | None:
        """For `e`: the number of the first line of `path` from the top of the pane down (in a
        whole file: the top row's), or None."""
        top = int(self.scroll_offset.y)
        if self._layout.path:  # a whole file: under its name (row 0), row N is line N
            return max(1, top)
        for row in self.rows[top:]:
            for cell in (row.left, row.right):
                if (
                    cell is not None
                    and cell.file is not None
                    and cell.file.path == path
                    and cell.line.new is not None
                ):
                    return cell.line.new
        return None

    def mark(self, row: int) -> None:
        """Scroll a search match into view and mark it."""
        self._current = row
        self._strips.clear()
        self.scroll_to(0, max(0, row - self.size.height // 3), animate=False)
        self.refresh()

    # ---- drawing

    def _gutter_width(self) -> int:
        return (self._digits + 1) * self._layout.numbers + (0 if self._layout.numbers == 1 else 2)

    def _colours(self) -> tuple[VisualStyle, ...]:
        """Every style a row is drawn with: the rows drawn so far hold these."""
        kinds = sorted(self.COMPONENT_CLASSES)
        return (
            self.get_visual_style(),
            self.get_visual_style("diff--gutter", partial=True),
            *(self.get_visual_style(kind) for kind in kinds),
        )

    def notify_style_update(self) -> None:
        """A new theme means new colours, and the drawn rows go. A class set on the screen (zoom,
        side by side, a step without narration) restyles the pane too, mostly with the same colours:
        then the rows are kept."""
        super().notify_style_update()
        self._styles.clear()
        if self._strips and self._colours() != self._drawn_colours:
            self._strips.clear()

    def _style(self, *classes: str, partial: bool = False) -> VisualStyle:
        """get_visual_style, remembered until the styles change: a row asks for three or four, and
        Textual's own cache works out the widget's pseudo-classes on every call."""
        key = (classes, partial)
        style = self._styles.get(key)
        if style is None:
            style = self._styles[key] = self.get_visual_style(*classes, partial=partial)
        return style

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        key = (scroll_y + y, scroll_x, self.size.width)
        strip = self._strips.get(key)
        if strip is None:
            if len(self._strips) > 2_000:  # a long scroll: start again
                self._strips.clear()
            if not self._strips:
                self._drawn_colours = self._colours()
            strip = self._strips[key] = self._render_row(*key)
        return strip

    def _render_row(self, index: int, scroll_x: int, width: int) -> Strip:
        if index >= len(self._layout.rows):
            return Strip.blank(width, self._style().rich_style)
        row = self._layout.rows[index]
        if row.kind != "code":
            style = self._style(f"diff--{row.kind}")
            return Strip([Segment(printable(row.text), style.rich_style)]).crop_extend(
                scroll_x, scroll_x + width, style.rich_style
            )
        current = index == self._current
        if self._layout.split:
            half = (width - 1) // 2
            left = self._cell_strip(row.left, half, current, "old", scroll_x)
            right = self._cell_strip(row.right, width - half - 1, current, "new", scroll_x)
            return Strip.join(
                [left, Strip([Segment("│", self._style("diff--gutter").rich_style)]), right]
            )
        return self._cell_strip(row.left, width, current, "both", scroll_x)

    def _line_style(self, line: Line | None) -> VisualStyle:
        kind = {"+": "diff--added", "-": "diff--removed"}.get(line.kind if line else "")
        return self._style(kind) if kind else self._style()

    def _cell_strip(
        self, cell: Cell | None, width: int, current: bool, side: str, scroll_x: int
    ) -> Strip:
        """One side's line in `width` cells: its numbers in place, its text from scroll_x on."""
        style = self._line_style(cell.line if cell else None)
        if cell is None:
            return Strip.blank(width, self._style("diff--note").rich_style)
        line, d = cell.line, self._digits
        if side == "both" and self._layout.numbers == 2:
            sign = line.kind if line.kind in "+-" else " "
            numbers = f"{line.old or '':>{d}} {line.new or '':>{d}} {sign} "
        else:
            number = line.old if side == "old" else line.new
            numbers = f"{number or '':>{d}} "
        # the gutter takes the row's tint, unless it marks the current search match
        gutter_style = (
            self._style("diff--current") if current else self._style("diff--gutter", partial=True)
        )
        content = self._content(cell)
        if self._query is not None:
            match_style = self._style("diff--match")
            for match in self._query.finditer(content.plain):
                content = content.stylize(match_style, match.start(), match.end())
        gutter = Strip([Segment(numbers, (style + gutter_style).rich_style)]).crop(0, width)
        # the app's parser resolves the $variables (the theme's) in the colours' styles
        parse = self.app.stylesheet.parse_style
        body = Strip(
            [
                Segment(text, s.rich_style)
                for text, s in content.render(style, end="", parse_style=parse)
            ]
        )
        room = max(0, width - len(numbers))
        return Strip.join([gutter, body.crop_extend(scroll_x, scroll_x + room, style.rich_style)])
