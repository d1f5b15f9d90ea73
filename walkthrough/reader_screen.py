"""The reader's screen: step list, narration and diff side by side. It holds the navigation state (which step, which
file, split or unified, the search) and pushes it down to widgets that only draw; the model layer (the series, the
steps' files, the runs) comes from the app."""

from __future__ import annotations

import asyncio
import gc
import shlex
import shutil
import subprocess

from textual import on
from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import Container, Horizontal, Vertical
from textual.content import Content
from textual.reactive import Reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input, OptionList, Static

from .bookmark import Bookmarks
from .checks import CHECKS
from .clipboard import copy_with_a_tool, where_it_went
from .confirm_screen import ConfirmRun
from .diff import FileDiff, Line, shown
from .diff_view import DiffView
from .editor import Copies, editor_command, line_argument
from .errors import WalkthroughError
from .file_list import FileList
from .history import Match, Series
from .keys_footer import KeysFooter
from .narration_view import Narration
from .prompt import Prompt
from .rows import MAX_ROWS, Layout, Row, diff_layout, file_layout
from .run_control import RunControl
from .run_panel import RunPanel
from .runner import Record, plan
from .step_files import StepFiles
from .step_list import StepList


class ReaderScreen(Screen):
    # the one key table: the footer shows the labels, the help screen lists the tooltips. Help and Quit come first:
    # an 80-column footer cuts the last labels off, and those two must always show
    BINDINGS = [
        Binding("question_mark", "app.help", "Help", tooltip="this help", id="help"),
        Binding("q", "app.quit", "Quit", tooltip="quit (the step you are on is remembered)", id="quit"),
        Binding("n,right", "next_step", "Next", tooltip="next step", id="next_step"),
        Binding("p,left", "previous_step", "Prev", tooltip="previous step", id="previous_step"),
        Binding("g", "first_step", "First", show=False, tooltip="first step", id="first_step"),
        Binding("G", "last_step", "Last", show=False, tooltip="last step", id="last_step"),
        Binding("colon", "jump", "Jump", tooltip="jump to a step by its number", id="jump", priority=True),
        Binding(
            "slash",
            "search",
            "Search",
            tooltip="search the narration and diffs of all steps",
            id="search",
            priority=True,
        ),
        Binding("N", "next_match", "Next match", show=False, tooltip="next search match", id="next_match"),
        Binding("P", "previous_match", "Prev match", show=False, tooltip="previous search match", id="previous_match"),
        Binding(
            "tab",
            "app.focus_next",
            "Focus",
            show=False,
            tooltip="move focus: steps, narration, files, diff",
            id="focus",
        ),
        Binding("s", "toggle_split", "Split", tooltip="unified or side-by-side diff", id="toggle_split"),
        Binding(
            "f", "toggle_file", "File", tooltip="the whole file at this step, or back to the diff", id="toggle_file"
        ),
        Binding(
            "r",
            "run",
            "Run",
            tooltip="run this step's Try-it in a checkout of the step; again to stop it",
            id="run",
        ),
        Binding("escape", "stop", "Stop", show=False, tooltip="stop the run, or back to the diff", id="stop"),
        Binding("z", "zoom", "Zoom", tooltip="the diff (or run) at full width, and back", id="zoom"),
        Binding(
            "shift+left",
            "scroll_diff(-8)",
            "Scroll",
            show=False,
            tooltip="scroll the diff left (shift+→: right)",
            id="scroll_left",
        ),
        Binding("shift+right", "scroll_diff(8)", "", show=False, tooltip="scroll the diff right", id="scroll_right"),
        Binding(
            "c", "copy_checkout", "Copy", tooltip="copy `git -C HISTORY checkout` for this step", id="copy_checkout"
        ),
        Binding("y", "copy_try_it", "Copy Try-it", tooltip="copy this step's Try-it command", id="copy_try_it"),
        Binding(
            "x",
            "exercise",
            "Exercise",
            tooltip="copy the command that makes this step an exercise: rebuild it yourself, then --check",
            id="exercise",
        ),
        Binding("e", "edit", "Edit", tooltip="open the file at this step in $EDITOR (a copy)", id="edit"),
        Binding("S", "app.screenshot", "Screenshot", tooltip="save the screen as an SVG file", id="screenshot"),
    ]

    # Textual draws the whole screen again whenever focus moves; nothing here looks different for it (the pane that
    # gains or loses focus repaints its own border and scrollbars), and the `:` and `/` prompt moves focus there and
    # back on every use
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)

    def __init__(self, series: Series, bookmarks: Bookmarks, runs: RunControl):
        super().__init__(id="_default")
        self.series, self.bookmarks, self.runs = series, bookmarks, runs
        self.files = StepFiles(series)
        self.copies = Copies()  # where e writes the files it opens
        self.index = 0
        self.path: str | None = None  # the file that f and e act on
        self.split = False
        self.whole_file = False
        self.show_run = False  # the run panel instead of the diff, on steps that have a run
        self.zoomed = False
        self.matches: list[Match] = []
        self.match: int | None = None
        self._focus_before_prompt: Widget | None = None
        self._bookmark_due = False  # a step shown whose bookmark is not written yet

    def compose(self) -> ComposeResult:
        with Horizontal(id="top"):
            yield Static(id="title")
            yield Static(id="status")
        with Horizontal(id="body"):
            yield StepList(id="steps")
            with Container(id="reading"):
                yield Narration(id="narration")
                with Vertical(id="change"):
                    yield FileList(id="files")
                    yield DiffView(id="diff")
                    yield RunPanel(id="run")
        with Vertical(id="bottom"):  # the prompt above the footer, never under it
            yield Prompt(id="prompt")
            yield KeysFooter(compact=True)

    async def on_mount(self) -> None:
        self.query_one(StepList).show_steps(self.series.steps)
        await self.go_to(self.bookmarks.recall(self.series), new_step=True)
        self.query_one(DiffView).focus()
        # what exists now (Textual, the series) lives as long as the app: freezing it spares the garbage
        # collector from walking it all again in the middle of a step switch (tens of ms each time)
        gc.freeze()

    def close(self) -> None:
        """The app is done: the bookmark written, no run left going, the copies e made removed."""
        self._remember()  # a quit that came before the last step switch's frame
        self.files.close()
        self.runs.close()
        self.copies.remove()
        gc.unfreeze()  # let the app's objects be collected again
        gc.enable()  # if a step switch had held collection off

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool:
        """: and / are priority keys, handled as they arrive, so the keys typed right after them reach the prompt
        (a key is routed to whatever has focus when it is read). Inside the prompt they are just text."""
        if action in ("jump", "search"):
            return not isinstance(self.focused, Prompt)
        return True

    # ---- the one place navigation state changes and flows down

    async def go_to(self, index: int, line: Line | None = None, new_step: bool = False) -> None:
        """Show step `index`; with `line`, scroll the diff to that search match.

        One frame shows the whole change: no repaint while the step's narration is mounted (each would cost a
        frame of the old step, tens of ms), and no garbage collection until that frame is drawn."""
        if gc.isenabled():
            gc.disable()
            self.call_after_refresh(gc.enable)
        with self.app.batch_update():
            await self._go_to(index, line, new_step)

    async def _go_to(self, index: int, line: Line | None, new_step: bool) -> None:
        new_step = new_step or index != self.index
        self.index = index
        loading = self.files.load(index)  # git works on a new step's diff while the narration is filled in
        steps = self.query_one(StepList)
        with steps.prevent(OptionList.OptionHighlighted):
            steps.highlighted = steps.option_of[index]
        if new_step:
            # a commit with only a subject line has nothing to say beyond the title bar: the pane steps aside
            text = self.series.steps[index].narration.strip()
            self.set_class(not text, "-no-narration")
            if text:
                await self.query_one(Narration).show(index, text)
            self._bookmark_due = True  # written once the step is drawn: a file, while nobody waits (or at quit)
            self.call_after_refresh(self._remember)
            self.call_after_refresh(self._prepare_neighbours)
        if loading is not None and not loading.done():
            await asyncio.wait([asyncio.wrap_future(loading)])
        files = self.files.of(index)
        if new_step and not self.whole_file:
            self._pick_path(files)
        file_list = self.query_one(FileList)
        with file_list.prevent(OptionList.OptionHighlighted):
            if new_step:
                file_list.show_files(files)
            file_list.highlighted = _position(files, self.path)
        self._show_change(files, line)

    def _remember(self) -> None:
        if self._bookmark_due:
            self._bookmark_due = False
            self.bookmarks.remember(self.series, self.index)

    async def _prepare_neighbours(self) -> None:
        """Make the next and previous steps' diffs ready while this one is read, so n and p are instant: read on
        the loader's threads (keys are answered meanwhile), then their first screenful coloured."""
        neighbours = [index for index in (self.index + 1, self.index - 1) if 0 <= index < len(self.series.steps)]
        loading = [future for future in map(self.files.load, neighbours) if future is not None]
        if loading:
            await asyncio.wait([asyncio.wrap_future(future) for future in loading])
        for index in neighbours:
            self.query_one(DiffView).prepare(self.files.of(index))

    def _pick_path(self, files: list[FileDiff]) -> None:
        """Keep the current file if this step touches it, else take the step's first file (code comes first)."""
        if _position(files, self.path) is None:
            self.path = files[0].path if files else None

    def _show_change(self, files: list[FileDiff], line: Line | None = None) -> None:
        """Lay out the diff (or the whole file, or the step's run) and hand it to its widget; scroll to `line` or the
        current file."""
        step = self.series.steps[self.index]
        record = self.runs.records.get(self.index) if self.show_run else None
        diff, panel, file_list = self.query_one(DiffView), self.query_one(RunPanel), self.query_one(FileList)
        had_focus = self.focused in (diff, panel.query_one("#run-log"))
        panel.display = record is not None
        diff.display = record is None
        if had_focus:  # keys keep scrolling what is shown
            (diff if record is None else panel.query_one("#run-log")).focus()
        file_list.display = record is None and len(files) > 1
        if record is not None:
            panel.show(self.runs.head(record), record.lines, self.runs.foot(record))
        elif self.index in self.series.errors:
            diff.show(Layout([Row("note", f"git could not read this step: {self.series.errors[self.index]}")]))
        elif self.whole_file and self.path is not None:
            try:
                data = self.series.file_at(self.index, self.path)
            except WalkthroughError as error:
                diff.show(Layout([Row("note", f"git could not read {shown(self.path)}: {error}")]))
            else:
                diff.show(file_layout(self.path, data, step.ref, step.rev, self.series.git()))
        else:
            layout = diff_layout(files, self.split, step.rev, self.series.git())
            diff.show(layout)
            file = _position(files, self.path)
            if line is not None:
                row = layout.line_rows.get(id(line))
                if row is None:
                    command = f"{self.series.git()} show {shlex.quote(step.rev)}"
                    self.notify(
                        f"This match is past the first {MAX_ROWS:,} rows shown: {command} shows it all.",
                        severity="warning",
                        markup=False,
                    )
                else:
                    diff.mark(row)
            elif file is not None:
                diff.scroll_to_row(layout.file_rows[file])
        self._show_title()

    def _show_title(self) -> None:
        step = self.series.steps[self.index]
        last = self.series.steps[-1].number  # out of how many; not for --compare's versions of one step
        count = f"/{last}" if last != self.series.steps[0].number else ""
        self.query_one("#title", Static).update(Content(f"Step {step.number}{count} · {step.title}"))
        if self.show_run and self.index in self.runs.records:
            mode = "run"
        elif self.whole_file:
            mode = f"file {shown(self.path)}"
        else:
            mode = "side by side" if self.split else "unified"
        parts = [step.ref, mode]
        if self.has_exercise(step):
            parts.append("exercise")
        if self.match is not None and self.matches[self.match].step == self.index:  # on the match's step only; N, P
            parts.append(f"match {self.match + 1}/{len(self.matches)}")  # go on from it wherever you are
        if self.zoomed:
            parts.append("zoom")
        self.query_one("#status", Static).update(Content(" · ".join(parts)))
        self.set_class(self.split and not self.whole_file, "-split")
        self.set_class(self.zoomed, "-zoom")

    # ---- messages from the widgets

    @on(OptionList.OptionHighlighted, "#steps")
    async def _step_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        step = self.query_one(StepList).step_at[event.option_index]
        if step is not None and step != self.index:
            await self.go_to(step)

    @on(OptionList.OptionHighlighted, "#files")
    def _file_chosen(self, event: OptionList.OptionHighlighted) -> None:
        files = self.files.of(self.index)
        self.path = files[event.option_index].path
        self._show_change(files)

    @on(Input.Changed, "#prompt")
    def _prompt_changed(self, event: Input.Changed) -> None:
        """A step number typed after `:`: its diff is read while Enter is on its way, once no digit more could make
        another step's number of it (of 30 steps, "2" may become 24, "24" is 24)."""
        text = event.value.strip()
        if self.query_one(Prompt).purpose == "jump" and text.isdigit():
            number, last = int(text), self.series.steps[-1].number
            if (index := self.series.index_of(number)) is not None and last < number * 10:
                self.files.load(index)

    @on(Input.Submitted, "#prompt")
    async def _prompt_submitted(self, event: Input.Submitted) -> None:
        purpose = self.query_one(Prompt).purpose
        self._close_prompt()
        if purpose == "jump":
            await self._jump(event.value.strip())
        else:
            await self._search(event.value.strip())

    @on(Prompt.Cancelled)
    def _close_prompt(self) -> None:
        self.query_one(Prompt).display = False
        (self._focus_before_prompt or self.query_one(DiffView)).focus()

    # ---- moving through the series (see BINDINGS)

    async def action_next_step(self) -> None:
        if self.index + 1 < len(self.series.steps):
            await self.go_to(self.index + 1)
        else:
            self.notify("This is the last step.", timeout=2)

    async def action_previous_step(self) -> None:
        if self.index > 0:
            await self.go_to(self.index - 1)
        else:
            self.notify("This is the first step.", timeout=2)

    async def action_first_step(self) -> None:
        await self.go_to(0)

    async def action_last_step(self) -> None:
        await self.go_to(len(self.series.steps) - 1)

    def _ask(self, purpose: str, placeholder: str) -> None:
        self._focus_before_prompt = self.focused
        self.query_one(Prompt).ask(purpose, placeholder)

    def action_jump(self) -> None:
        self._ask("jump", f"Step number ({self._numbers()}), then Enter")

    def action_search(self) -> None:
        self._ask("search", "Search narration and diffs, then Enter; N and P for the next and previous match")

    async def _jump(self, text: str) -> None:
        index = self.series.index_of(int(text)) if text.isdigit() else None
        if index is None:
            self.notify(
                f"No step {text!r}: enter a number from {self._numbers(' to ')}.", severity="error", markup=False
            )
            return
        await self.go_to(index)

    def _numbers(self, between: str = "-") -> str:
        return f"{self.series.steps[0].number}{between}{self.series.steps[-1].number}"

    async def _search(self, text: str) -> None:
        self.files.settle()
        self.matches = self.series.search(text) if text else []
        self.query_one(DiffView).set_query(text)
        if not self.matches:
            self.match = None
            self._show_title()
            if text:
                self.notify(f"No match for {text!r}.", severity="warning", markup=False)
            return
        # the first match from the step you are on
        self.match = next((i for i, m in enumerate(self.matches) if m.step >= self.index), 0)
        await self._show_match()

    async def _show_match(self) -> None:
        match = self.matches[self.match]
        line = None
        if match.file is not None:
            file = self.files.of(match.step)[match.file]
            line = file.hunks[match.hunk].lines[match.line]
            self.path, self.whole_file = file.path, False
        await self.go_to(match.step, line)

    async def _step_match(self, delta: int) -> None:
        if self.match is None:
            self.notify("No search yet: press / to search.", severity="warning")
            return
        self.match = (self.match + delta) % len(self.matches)
        await self._show_match()

    async def action_next_match(self) -> None:
        await self._step_match(1)

    async def action_previous_match(self) -> None:
        await self._step_match(-1)

    # ---- what the change pane shows

    def action_toggle_split(self) -> None:
        self.split, self.whole_file = not self.split, False
        self._show_change(self.files.of(self.index))

    def action_toggle_file(self) -> None:
        if self.path is None:
            self.notify("This step changes no files.", severity="warning")
            return
        self.whole_file = not self.whole_file
        files = self.files.of(self.index)
        if not self.whole_file:  # the file followed across steps may not be in this one
            self._pick_path(files)
        self._show_change(files)

    def action_zoom(self) -> None:
        self.zoomed = not self.zoomed
        self._show_title()
        if self.zoomed and isinstance(self.focused, (StepList, Narration)):  # hidden now
            self.query_one(RunPanel if self.query_one(RunPanel).display else DiffView).focus()

    def action_scroll_diff(self, columns: int) -> None:
        self.query_one(DiffView).scroll_relative(x=columns, animate=False)

    # ---- copying a command

    def action_copy_checkout(self) -> None:
        self._copy(self.series.checkout(self.index))

    def action_copy_try_it(self) -> None:
        lines = [planned.text for planned in plan(self.series.steps[self.index].narration)]
        if not lines:
            self.notify("This step's narration has no Try-it command.", severity="warning")
            return
        self._copy("\n".join(lines))

    def has_exercise(self, step) -> bool:
        """Whether `walkthrough exercise N` works for this step: the project's own series, and a check for it."""
        return self.runs.own_series and step.slug in CHECKS

    def action_exercise(self) -> None:
        step = self.series.steps[self.index]
        if not self.has_exercise(step):
            self.notify(
                f"Step {step.number} has no exercise: the checks cover Part 0's and Part I's steps.", severity="warning"
            )
            return
        self._copy(f"walkthrough exercise {step.number}")

    def _copy(self, text: str) -> None:
        """Through a clipboard program where there is one, and always to the terminal (OSC 52), then say which
        happened: a terminal may drop the request, and nothing says so."""
        tool = copy_with_a_tool(text)
        self.app.copy_to_clipboard(text)
        self.notify(f"{where_it_went(tool)}: {text}", timeout=4, markup=False)

    # ---- running a step's Try-it

    def action_run(self) -> None:
        index = self.index
        press = self.runs.press(index)
        if press.text:
            self.notify(press.text, severity="warning" if press.warning else "information", timeout=4)
        if press.do == "ask":

            def answered(yes: bool | None) -> None:
                if yes:
                    self.runs.confirm(index)
                    self.run_worker(self._run(index, press.planned), group="run")

            self.app.push_screen(ConfirmRun(press.text, list(press.argvs)), answered)
        elif press.do == "run":
            # a worker, not an await here: the app keeps reading keys (r and esc stop the run) while it runs
            self.run_worker(self._run(index, press.planned), group="run")

    async def _run(self, index: int, planned) -> None:
        ticker = self.set_interval(0.5, self._tick)  # the foot's seconds
        try:
            record = await self.runs.run(index, planned, self._run_started, self._run_line)
        except WalkthroughError as error:
            self.notify(str(error), severity="error", markup=False)
            return
        finally:
            ticker.stop()
        if record is not None and self.show_run and self.index == index:
            self.query_one(RunPanel).set_foot(self.runs.foot(record))
            self._show_title()

    def _run_started(self, record: Record) -> None:
        self.show_run = True
        if self.index == record.index:
            self._show_change(self.files.of(record.index))
            self.query_one(Narration).scroll_to_text("What you should see")

    def _run_line(self, record: Record, line: str) -> None:
        if self.show_run and self.index == record.index:
            self.query_one(RunPanel).append(line)

    def _tick(self) -> None:
        record = self.runs.current
        if record is not None and self.show_run and self.index == record.index:
            self.query_one(RunPanel).set_foot(self.runs.foot(record))

    def action_stop(self) -> None:
        if stopping := self.runs.stop():
            self.notify(stopping, timeout=2)
        elif self.show_run:
            self.show_run = False
            self._show_change(self.files.of(self.index))

    # ---- e: the file in $EDITOR

    def action_edit(self) -> None:
        editor = editor_command()
        if not editor:
            self.notify("Set $EDITOR (or $VISUAL) to a command to open files.", severity="warning")
            return
        if self.path is None:
            self.notify("This step changes no files.", severity="warning")
            return
        try:
            data = self.series.file_at(self.index, self.path)
        except WalkthroughError as error:  # a submodule, or a history rebuilt under the reader
            self.notify(str(error), severity="warning", markup=False)
            return
        if data is None:
            self.notify(f"{shown(self.path)} is deleted at this step.", severity="warning", markup=False)
            return
        try:
            folder, copy = self.copies.write(self.series.steps[self.index].ref, self.path, data)
        except OSError as error:
            self.notify(f"Could not write a copy of {shown(self.path)}: {error}", severity="error", markup=False)
            return
        argv = [*editor, *line_argument(editor, self.query_one(DiffView).line_in_view(self.path)), str(copy)]
        failure = None
        try:
            with self.app.suspend():
                # an exception escaping this block would skip Textual's resume and leave the app frozen: a failed
                # start is caught here, and reported once the app has the terminal back
                try:
                    subprocess.run(argv, check=False)
                except OSError as error:  # not found, a folder, not executable
                    failure = f"Could not start the editor {editor[0]!r}: {error.strerror or error}"
        except SuspendNotSupported:
            self.notify(
                f"This terminal can't hand over to an editor; the copy is at {copy}", severity="warning", markup=False
            )
            return  # the copy stays until the app exits
        # the copy was for this editor; one that returns at once (code without --wait) finds it gone
        shutil.rmtree(folder, ignore_errors=True)
        if failure:
            self.notify(failure, severity="error", markup=False)


def _position(files: list[FileDiff], path: str | None) -> int | None:
    """Where `path` is in a step's files, or None."""
    return next((i for i, file in enumerate(files) if file.path == path), None)
