"""Widgets that draw what the app hands them and post messages up; none of them holds navigation state."""

from __future__ import annotations

import re
from functools import lru_cache

from pygments.lexers import get_lexer_for_filename
from pygments.util import ClassNotFound
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.geometry import Size
from textual.highlight import highlight
from textual.message import Message
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.widgets import Input, Markdown, OptionList, RichLog, Static
from textual.widgets.option_list import Option

from .diff import FileDiff, Line
from .history import Step
from .rows import STATUS_MARK, Cell, Layout, Row, columns

# control characters would move the terminal's cursor: show their Unicode pictures instead
PRINTABLE = str.maketrans(
    {**{c: 0x2400 + c for c in range(32)}, 127: 0x2421, 0x85: 0xFFFD, 0x2028: 0xFFFD, 0x2029: 0xFFFD}
)


def printable(text: str) -> str:
    return text.expandtabs(4).translate(PRINTABLE)


@lru_cache(maxsize=512)
def language(path: str) -> str:
    try:
        return get_lexer_for_filename(path).aliases[0]
    except ClassNotFound:
        return "text"


PART = re.compile(r"^(Part [IVXLC]+) · ")  # "Part II · Exact resume": the series' second part starts here


class StepList(OptionList):
    """Step number and title; a long title wraps under itself, not under the number. The app moves the highlight."""

    # a new highlight repaints the two options it moves between, not the whole list (OptionList repaints all of it,
    # a good part of a step switch's frame)
    highlighted: reactive[int | None] = reactive(None, repaint=False)

    def watch_highlighted(self, old: int | None, new: int | None) -> None:
        lines = self._line_cache
        for index in (old, new):
            if index is not None and index in lines.index_to_line:
                self.refresh_lines(lines.index_to_line[index], lines.heights.get(index, 1))
        super().watch_highlighted(new)

    _options_width: int | None = None  # the width the options were drawn at

    def _on_resize(self, event: events.Resize) -> None:
        """OptionList draws every option again on any resize; the drawings only depend on the width, and a change
        of height alone (the prompt opening or closing under the list) keeps them."""
        width = self.scrollable_content_region.width
        if width == self._options_width:
            event.prevent_default()
        self._options_width = width

    def show_steps(self, steps: list[Step]) -> None:
        width = len(str(len(steps)))
        options = []
        for step in steps:
            title = Text(step.title)
            if part := PART.match(step.title):  # the first line of a part, marked
                title.stylize("bold reverse", 0, len(part.group(1)))
            grid = Table.grid(padding=(0, 1))
            grid.add_column(width=width, justify="right", style="dim", no_wrap=True)
            grid.add_column(ratio=1)
            grid.add_row(str(step.number), title)
            options.append(Option(grid))
        self.set_options(options)


class FileList(OptionList):
    """The files a step touches, when there is more than one."""

    def show_files(self, files: list[FileDiff]) -> None:
        self.set_options(
            Option(Content.assemble(f"{STATUS_MARK[f.status]} {f.label} ", (f"+{f.added} −{f.removed}", "dim")))
            for f in files
        )


class Narration(VerticalScroll):
    """One Markdown document per step, made once and then shown or hidden: a step seen before, or made ready
    while the previous one was read, appears without parsing or mounting anything."""

    KEEP = 32  # documents kept; the least recently shown goes first

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._documents: dict[int, Markdown] = {}

    @property
    def document(self) -> Markdown | None:
        return next((doc for doc in self._documents.values() if doc.display), None)

    async def prepare(self, key: int, markdown: str) -> Markdown:
        if key not in self._documents:
            document = self._documents[key] = Markdown(markdown)
            document.display = False
            await self.mount(document)
        return self._documents[key]

    async def show(self, key: int, markdown: str) -> None:
        document = await self.prepare(key, markdown)
        self._documents[key] = self._documents.pop(key)  # most recently shown last
        for other in self._documents.values():
            other.display = other is document
        while len(self._documents) > self.KEEP:
            self._documents.pop(next(iter(self._documents))).remove()
        self.scroll_home(animate=False)

    def scroll_to_text(self, text: str) -> None:
        """Bring the first block of the shown document that holds `text` to the top."""
        document = self.document
        if document is None:
            return
        for block in document.children:
            if text in (getattr(block, "source", None) or ""):
                self.scroll_to_widget(block, top=True, animate=False)
                return


class Code:
    """Syntax colours for a column of source lines, worked out CHUNK lines at a time as they come into view:
    a 2,000-line diff costs one chunk, not 2,000 lines, to show."""

    CHUNK = 50

    def __init__(self, lines: list[str], path: str):
        self.lines = lines
        self.language = language(path)
        self._chunks: dict[int, list[Content]] = {}

    def __getitem__(self, index: int) -> Content:
        start = index - index % self.CHUNK
        if start not in self._chunks:
            block = [printable(text) for text in self.lines[start : start + self.CHUNK]]
            lines = highlight("\n".join(block), language=self.language).split("\n", allow_blank=True)
            self._chunks[start] = lines + [Content()] * (len(block) - len(lines))  # highlight drops trailing blanks
        return self._chunks[start][index - start]


class DiffView(ScrollView, can_focus=True, inherit_bindings=False):
    """The rows of a Layout (a step's diff, unified or side by side, or one whole file), drawn a line at a time
    with the line API, so only the rows on screen cost anything."""

    # no left/right: those keys turn the page (step) everywhere in the app; shift+left/right (the app's table)
    # scroll the diff sideways
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
        self._codes: dict[int, tuple] = {}  # id(FileDiff) -> (the FileDiff, kept alive for its id; its Code columns)
        # drawn rows, by (row, scroll_x, width): a pane that is resized (the prompt opening) or scrolled back draws
        # them again without colouring anything
        self._strips: dict[tuple[int, int, int], Strip] = {}

    @property
    def rows(self) -> list[Row]:
        return self._layout.rows

    def show(self, layout: Layout) -> None:
        self._layout = layout
        self._strips.clear()
        self._file_code = Code(layout.text, layout.path) if layout.text else None
        self._digits = len(str(layout.last_number))
        self._current = None
        gutter = self._gutter_width()
        width = max((gutter + len(r.left.line.text) if r.left else len(r.text) for r in layout.rows), default=0)
        self.virtual_size = Size(0 if layout.split else width + 1, len(layout.rows))
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
            self._codes[id(file)] = (file, {side: Code(text, file.path) for side, text in columns(file).items()})
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

    def mark(self, row: int) -> None:
        """Scroll a search match into view and mark it."""
        self._current = row
        self._strips.clear()
        self.scroll_to(0, max(0, row - self.size.height // 3), animate=False)
        self.refresh()

    # ---- drawing

    def _gutter_width(self) -> int:
        return (self._digits + 1) * self._layout.numbers + (0 if self._layout.numbers == 1 else 2)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()  # a new theme: new colours

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        key = (scroll_y + y, scroll_x, self.size.width)
        strip = self._strips.get(key)
        if strip is None:
            if len(self._strips) > 2_000:  # a long scroll: start again
                self._strips.clear()
            strip = self._strips[key] = self._render_row(*key)
        return strip

    def _render_row(self, index: int, scroll_x: int, width: int) -> Strip:
        if index >= len(self._layout.rows):
            return Strip.blank(width, self.get_visual_style().rich_style)
        row = self._layout.rows[index]
        if row.kind != "code":
            style = self.get_visual_style(f"diff--{row.kind}")
            return Strip([Segment(printable(row.text), style.rich_style)]).crop_extend(
                scroll_x, scroll_x + width, style.rich_style
            )
        current = index == self._current
        if self._layout.split:
            half = (width - 1) // 2
            left = self._cell_strip(row.left, half, current, "old")
            right = self._cell_strip(row.right, width - half - 1, current, "new")
            return Strip.join([left, Strip([Segment("│", self.get_visual_style("diff--gutter").rich_style)]), right])
        strip = self._cell_strip(row.left, None, current, "both")
        return strip.crop_extend(scroll_x, scroll_x + width, self._line_style(row.left.line).rich_style)

    def _line_style(self, line: Line | None) -> VisualStyle:
        kind = {"+": "diff--added", "-": "diff--removed"}.get(line.kind if line else "")
        return self.get_visual_style(kind) if kind else self.get_visual_style()

    def _cell_strip(self, cell: Cell | None, width: int | None, current: bool, side: str) -> Strip:
        style = self._line_style(cell.line if cell else None)
        if cell is None:
            return Strip.blank(width or 0, self.get_visual_style("diff--note").rich_style)
        line, d = cell.line, self._digits
        if side == "both" and self._layout.numbers == 2:
            sign = line.kind if line.kind in "+-" else " "
            numbers = f"{line.old or '':>{d}} {line.new or '':>{d}} {sign} "
        else:
            number = line.old if side == "old" else line.new
            numbers = f"{number or '':>{d}} "
        # the gutter takes the row's tint, unless it marks the current search match
        gutter_style = (
            self.get_visual_style("diff--current") if current else self.get_visual_style("diff--gutter", partial=True)
        )
        content = self._content(cell)
        if self._query is not None:
            match_style = self.get_visual_style("diff--match")
            for match in self._query.finditer(content.plain):
                content = content.stylize(match_style, match.start(), match.end())
        segments = [Segment(numbers, (style + gutter_style).rich_style)]
        segments += [
            Segment(text, s.rich_style) for text, s in content.render(style, end="", parse_style=self._get_style)
        ]
        strip = Strip(segments)
        return strip if width is None else strip.crop_extend(0, width, style.rich_style)


class RunPanel(Vertical):
    """A step's run: the command and where it runs, its output as it comes, and how it ended. The app writes."""

    def compose(self) -> ComposeResult:
        yield Static(id="run-head", markup=False)
        yield RichLog(id="run-log", max_lines=20_000, wrap=True, min_width=20, markup=False, highlight=False)
        yield Static(id="run-foot", markup=False)

    def show(self, head: str, lines: list[str], foot: str) -> None:
        self.query_one("#run-head", Static).update(head)
        self.query_one(RichLog).clear()
        for line in lines:
            self.append(line)
        self.set_foot(foot)

    def append(self, line: str) -> None:
        # the width the log will have: a panel just made visible has not been laid out yet, and the log would
        # wrap at its minimum width; the column it fills (#change) has been
        width = (self.parent.content_size.width if self.parent else self.size.width) - 3  # padding, scrollbar
        self.query_one(RichLog).write(Text(printable(line)), width=max(20, width))

    def set_foot(self, foot: str) -> None:
        self.query_one("#run-foot", Static).update(foot)

    @property
    def lines(self) -> list[str]:
        """What the log shows, one screen line each (long lines wrap)."""
        return [strip.text.rstrip() for strip in self.query_one(RichLog).lines]


class ConfirmRun(ModalScreen[bool]):
    """Before a command from someone else's history runs: the exact argument lists, and a yes or no."""

    BINDINGS = [Binding("enter", "answer(True)", "Run"), Binding("escape,n", "answer(False)", "Don't run")]

    def __init__(self, where: str, argvs: list[str]):
        super().__init__()
        self.where, self.argvs = where, argvs

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="confirm"):
            yield Static("Run commands from this history?", id="confirm-title")
            yield Static(
                "They come from the commit message of a repository that is not this project's own series: "
                f"code from whoever wrote it. In {self.where}, as these argument lists (no shell):",
                markup=False,
            )
            yield Static("\n".join(self.argvs), id="confirm-argv", markup=False)
            yield Static("enter runs them, esc or n does not", id="confirm-hint")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class Prompt(Input):
    """One line at the bottom for a search or a step number; the app says what it is for."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", show=False)]

    class Cancelled(Message):
        pass

    purpose = ""

    def ask(self, purpose: str, placeholder: str) -> None:
        self.purpose, self.placeholder, self.value = purpose, placeholder, ""
        self.display = True
        self.screen.set_focus(self)  # now, not after the queue (focus() waits): keys typed fast land here

    def action_cancel(self) -> None:
        self.post_message(self.Cancelled())


class HelpScreen(ModalScreen[None]):
    """The keys, as the app's binding table lists them."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, rows: list[tuple[str, str]]):
        super().__init__()
        self.rows = rows

    def compose(self):
        width = max(len(keys) for keys, _ in self.rows)
        table = Content("\n").join(
            Content.assemble((f"{keys:>{width}}", "bold $accent"), f"  {text}") for keys, text in self.rows
        )
        with VerticalScroll(id="help"):
            yield Static("Keys", id="help-title")
            yield Static(table)
            yield Static("esc, q or ? closes this", id="help-hint")
