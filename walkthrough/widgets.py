"""Widgets that draw what the app hands them and post messages up; none of them holds navigation state."""

from __future__ import annotations

import re
import textwrap
from functools import lru_cache

from markdown_it import MarkdownIt
from pygments.lexers import get_lexer_for_filename
from pygments.util import ClassNotFound
from rich.cells import cell_len
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
from textual.reactive import Reactive, reactive
from textual.screen import ModalScreen, Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.widget import Widget
from textual.widgets import Footer, Input, Markdown, OptionList, RichLog, Static
from textual.widgets._footer import FooterKey
from textual.widgets._markdown import MarkdownBlock, MarkdownFence, MarkdownHeader, MarkdownParagraph
from textual.widgets.option_list import Option

from .diff import FileDiff, Line
from .history import PART, Step, parts_of
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

    option_of: list[int] = []  # a step's option (its index in the list, headings counted)
    step_at: list[int | None] = []  # an option's step; None for a heading

    def show_steps(self, steps: list[Step]) -> None:
        """The steps under a heading for each part: a title's "Part II · " becomes the heading above the part's
        first step, so every title keeps the list's narrow width for its own words."""
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


class ReaderScreen(Screen):
    """The reader's screen. Textual draws the whole screen again whenever focus moves; nothing here looks
    different for it (the pane that gains or loses focus repaints its own border and scrollbars), and the `:` and
    `/` prompt moves focus there and back on every use."""

    focused: Reactive[Widget | None] = Reactive(None, repaint=False)


class KeysFooter(Footer):
    """The footer, made again only when the keys it shows change, and then only when it must. Textual's own makes
    a widget per key again twice for each move of focus, though moving between the panes changes none of them;
    the `:` and `/` prompt, where every key is text, only hides the keys and shows them again: here by hiding
    their widgets."""

    _shown: tuple | None = None  # the keys shown now: (action, key, description, enabled, tooltip) each
    _made: tuple | None = None  # the keys the footer's widgets were made for
    _pending = False  # a remake is on its way

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus or not self.is_attached or screen is not self.screen or self._pending:
            return
        self._pending = True
        self.call_after_refresh(self._remake)

    def _keys(self) -> tuple:
        """What Footer.compose shows: a key per action (the first of its bindings), in the bindings' order."""
        keys: dict[str, tuple] = {}
        for _, binding, enabled, tooltip in self.screen.active_bindings.values():
            if binding.show and binding.action not in keys:
                keys[binding.action] = (binding.action, binding.key, binding.description, enabled, tooltip)
        return tuple(keys.values())

    async def _remake(self) -> None:
        self._pending = False
        shown = self._keys()
        if shown == self._shown:
            return
        self._shown = shown
        widgets = {key.action: key for key in self.query_children(FooterKey)}
        made = self._made or ()
        if tuple(widgets) == tuple(key[0] for key in made) and shown == tuple(key for key in made if key in shown):
            for action, widget in widgets.items():  # some of the keys made, as they were made
                widget.display = any(key[0] == action for key in shown)
            return
        self._made = shown
        await self.recompose()


class FileList(OptionList):
    """The files a step touches, when there is more than one."""

    def show_files(self, files: list[FileDiff]) -> None:
        self.set_options(
            Option(Content.assemble(f"{STATUS_MARK[f.status]} {f.label} ", (f"+{f.added} −{f.removed}", "dim")))
            for f in files
        )


class Narration(VerticalScroll):
    """The narration of the step shown: one Markdown document, refilled in place from step to step (see
    NarrationDocument), so a step switch mounts nothing but the blocks whose kind changed."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._key: object = None  # what the document shows

    @property
    def document(self) -> NarrationDocument | None:
        return next(iter(self.query_children(NarrationDocument)), None)

    async def show(self, key: object, markdown: str) -> None:
        document = self.document
        if document is None:
            await self.mount(NarrationDocument(markdown, parser_factory=_markdown_parser))
        elif key != self._key:
            await document.refill(markdown)
        self._key = key
        self.scroll_home(animate=False)

    def scroll_to_text(self, text: str) -> None:
        """Bring the first block of the document that holds `text` to the top."""
        document = self.document
        if document is None:
            return
        for block in document.children:
            if text in (getattr(block, "source", None) or ""):
                self.scroll_to_widget(block, top=True, animate=False)
                return


class NarrationDocument(Markdown):
    """A Markdown document that takes new text without being made again: a new document (or Markdown.update)
    mounts a widget per block, and mounting is most of a step switch's cost. Here each block keeps its widget
    where the new text has a block of the same kind in the same place (a paragraph, a code block, the same
    heading), which takes the new content the way Markdown.append refills its last block; from the first block
    that differs on, the old blocks go and the new ones are mounted."""

    async def refill(self, markdown: str) -> None:
        async with self.lock:  # as Markdown.update: one change at a time
            blocks = self._build_from_source(markdown)
            shown = [child for child in self.children if isinstance(child, MarkdownBlock)]
            self._markdown = markdown  # the source that the blocks' source ranges index
            self._table_of_contents = None
            kept = 0
            for old, new in zip(shown, blocks, strict=False):
                if not _refillable(old, new):
                    break
                old.source_range = new.source_range
                if isinstance(old, MarkdownHeader):  # the same text: only its place in the source moves
                    old._copy_context(new)
                else:
                    await old._update_from_block(new)
                kept += 1
            if shown[kept:]:
                await self.remove_children(shown[kept:])
            if blocks[kept:]:
                await self.mount_all(blocks[kept:])


@lru_cache(maxsize=1)
def _markdown_parser() -> MarkdownIt:
    """Markdown's own parser, made once: making one is a good part of parsing a short narration."""
    return MarkdownIt("gfm-like")


def _refillable(old: MarkdownBlock, new: MarkdownBlock) -> bool:
    """Whether `old` can show `new` as it is: a block without blocks inside it, of the same kind, and a heading
    only with the same text (its id, which links go to, is made from the text)."""
    if type(old) is not type(new) or new._blocks:
        return False
    if isinstance(old, MarkdownHeader):
        return old._content.plain == new._content.plain
    return isinstance(old, (MarkdownParagraph, MarkdownFence))


class Code:
    """Syntax colours for a column of source lines, worked out as they come into view, CHUNK lines at a time: a
    2,000-line diff costs a screenful, not 2,000 lines, to show. A chunk starts at the first line asked for (the
    pane's top row) and runs down to the next coloured line; scrolling up, it ends at the coloured line below."""

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
        self._drawn_colours: tuple[VisualStyle, ...] | None = None  # the styles the kept rows were drawn with
        self._styles: dict[tuple, VisualStyle] = {}  # see _style
        self._scrolled_for: Size | None = None  # the virtual size the scrollbars were last set for

    @property
    def rows(self) -> list[Row]:
        return self._layout.rows

    # The pane looks the same with focus or without: no style rule picks it by :focus (a test holds the stylesheet
    # to that). Textual restyles a widget and its scrollbars, and draws it all again, whenever focus comes or goes;
    # here that would be twice for each use of the `:` or `/` prompt. These do what Widget's do, without either.

    def watch_has_focus(self, has_focus: bool) -> None:
        pass

    # Textual's compositor hands a ScrollView its region's size as the virtual size, never the view's own (the
    # rows), so ScrollView updates and draws its scrollbars again on every layout of the screen (the prompt
    # opening, a footer key hidden): only when the rows changed since the scrollbars were set is that needed.

    def _scroll_update(self, virtual_size: Size) -> None:
        self._scrolled_for = virtual_size
        super()._scroll_update(virtual_size)

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        if self.virtual_size == self._scrolled_for:
            virtual_size = self.virtual_size  # nothing new for the scrollbars
        return super()._size_updated(size, virtual_size, container_size, layout)

    def _on_focus(self, event: events.Focus) -> None:
        event.prevent_default()
        self.has_focus = True
        if self.parent is not None:
            self.parent.post_message(events.DescendantFocus(self))

    def _on_blur(self, event: events.Blur) -> None:
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
        if layout.split:  # each side scrolls under its own numbers: room for the longest line of either side
            longest = max((len(c.line.text) for r in layout.rows for c in (r.left, r.right) if c), default=0)
            width = 2 * (self._digits + 1 + longest + 1)
        else:
            width = max((gutter + len(r.left.line.text) if r.left else len(r.text) for r in layout.rows), default=0)
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

    def _colours(self) -> tuple[VisualStyle, ...]:
        """Every style a row is drawn with: the rows drawn so far hold these."""
        kinds = sorted(self.COMPONENT_CLASSES)
        return (
            self.get_visual_style(),
            self.get_visual_style("diff--gutter", partial=True),
            *(self.get_visual_style(kind) for kind in kinds),
        )

    def notify_style_update(self) -> None:
        """A new theme means new colours, and the drawn rows go. A class set on the screen (zoom, side by side, a
        step without narration) restyles the pane too, mostly with the same colours: then the rows are kept."""
        super().notify_style_update()
        self._styles.clear()
        if self._strips and self._colours() != self._drawn_colours:
            self._strips.clear()

    def _style(self, *classes: str, partial: bool = False) -> VisualStyle:
        """get_visual_style, remembered until the styles change: a row asks for three or four, and Textual's own
        cache works out the widget's pseudo-classes on every call."""
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
            return Strip.join([left, Strip([Segment("│", self._style("diff--gutter").rich_style)]), right])
        return self._cell_strip(row.left, width, current, "both", scroll_x)

    def _line_style(self, line: Line | None) -> VisualStyle:
        kind = {"+": "diff--added", "-": "diff--removed"}.get(line.kind if line else "")
        return self._style(kind) if kind else self._style()

    def _cell_strip(self, cell: Cell | None, width: int, current: bool, side: str, scroll_x: int) -> Strip:
        """One side's line in `width` cells: its numbers where they are, its text from column scroll_x."""
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
        gutter_style = self._style("diff--current") if current else self._style("diff--gutter", partial=True)
        content = self._content(cell)
        if self._query is not None:
            match_style = self._style("diff--match")
            for match in self._query.finditer(content.plain):
                content = content.stylize(match_style, match.start(), match.end())
        gutter = Strip([Segment(numbers, (style + gutter_style).rich_style)]).crop(0, width)
        body = Strip(
            [Segment(text, s.rich_style) for text, s in content.render(style, end="", parse_style=self._get_style)]
        )
        room = max(0, width - len(numbers))
        return Strip.join([gutter, body.crop_extend(scroll_x, scroll_x + room, style.rich_style)])


class RunPanel(Vertical):
    """A step's run: the command and where it runs, its output as it comes, and how it ended. The app writes."""

    def compose(self) -> ComposeResult:
        yield Static(id="run-head", markup=False)
        yield RichLog(id="run-log", max_lines=20_000, wrap=True, min_width=20, markup=False, highlight=False)
        yield Static(id="run-foot", markup=False)

    _output: list[str] = []  # the lines shown, as the run printed them: wrapped again when the width changes
    _wrapped_at = 0  # the width they were wrapped at

    def show(self, head: str, lines: list[str], foot: str) -> None:
        self.query_one("#run-head", Static).update(head)
        self._output = []
        self._rewrap(lines)
        self.set_foot(foot)

    def _rewrap(self, lines: list[str]) -> None:
        self.query_one(RichLog).clear()
        for line in lines:
            self.append(line)

    def _width(self) -> int:
        # the width the log will have: a panel just made visible has not been laid out yet, and the log would
        # wrap at its minimum width; the column it fills (#change) has been. 3: the padding and the scrollbar
        return max(20, (self.parent.content_size.width if self.parent else self.size.width) - 3)

    def append(self, line: str) -> None:
        self._wrapped_at = width = self._width()
        self._output.append(line)
        self.query_one(RichLog).write(Text(printable(line)), width=width)

    def on_resize(self, event: events.Resize) -> None:
        """A new width (the pane zoomed, the terminal resized): the output wraps again to fill it."""
        if self._output and self._width() != self._wrapped_at:
            lines, self._output = self._output, []
            self._rewrap(lines)

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


NBSP = "\u00a0"


class HelpScreen(ModalScreen[None]):
    """The keys, as the app's binding table lists them."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, rows: list[tuple[str, str]]):
        super().__init__()
        self.rows = rows

    def compose(self):
        width = max(cell_len(keys) for keys, _ in self.rows)  # cells, not characters: an arrow can take two
        # each description wraps under itself, inside the box's 90% of the screen (its border, padding and scrollbar);
        # indents are no-break spaces, which a line's wrapping keeps
        room = max(20, int(0.9 * self.app.size.width) - 8 - width - 2)
        lines = []
        for keys, text in self.rows:
            first, *more = textwrap.wrap(text, room) or [""]
            pad = NBSP * (width - cell_len(keys))
            lines.append(Content.assemble(pad, (keys, "bold $accent"), NBSP * 2 + first))
            lines += [Content(NBSP * (width + 2) + line) for line in more]
        table = Content("\n").join(lines)
        with VerticalScroll(id="help"):
            yield Static("Keys", id="help-title")
            yield Static(table)
            yield Static("esc, q or ? closes this", id="help-hint")
