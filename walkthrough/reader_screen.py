"""The reader's screen: step list, narration and diff side by side. It wires widgets that only draw
to the model: where the reader is (Navigation), the steps' files, the runs, the key table."""

from __future__ import annotations

from dataclasses import asdict
from functools import partial

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, Horizontal, Vertical
from textual.reactive import Reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input, OptionList

from . import gc_pause
from .bookmark import Bookmarks
from .change_pane import ChangePane
from .checks import CHECKS
from .confirm_screen import ConfirmRun
from .diff import Line
from .diff_view import DiffView
from .editor import Copies, prepare_edit
from .errors import WalkthroughError
from .history import Match, Series
from .keys import KEYS
from .keys_footer import KeysFooter
from .narration_view import Narration
from .navigation import Navigation, position
from .prompt import Prompt
from .run_control import Press, RunControl
from .run_panel import RunPanel
from .runner import Record, plan
from .step_files import StepFiles
from .step_list import StepList
from .title_bar import TitleBar


class ReaderScreen(Screen):
    BINDINGS = [Binding(**asdict(key)) for key in KEYS]

    # Textual draws the whole screen again whenever focus moves; nothing here looks different for it
    # (a pane repaints its own border), and the `:` and `/` prompt takes focus and gives it back
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)

    def __init__(self, series: Series, bookmarks: Bookmarks, runs: RunControl):
        super().__init__(id="_default")
        self.series, self.bookmarks, self.runs = series, bookmarks, runs
        self.nav = Navigation(series)
        self.files = StepFiles(series)
        self.copies = Copies()  # where e writes the files it opens
        own = runs.own_series  # `walkthrough exercise N` checks this project's own series
        self.exercises = {i for i, step in enumerate(series.steps) if own and step.slug in CHECKS}

    def compose(self) -> ComposeResult:
        yield TitleBar(id="top")
        with Horizontal(id="body"):
            yield StepList(id="steps")
            with Container(id="reading"):
                yield Narration(id="narration")
                yield ChangePane(id="change")
        with Vertical(id="bottom"):  # the prompt above the footer, never under it
            yield Prompt(id="prompt")
            yield KeysFooter(compact=True)

    async def on_mount(self) -> None:
        self.query_one(StepList).show_steps(self.series.steps)
        await self.go_to(self.bookmarks.recall(self.series), new_step=True)
        self.query_one(ChangePane).shown().focus()
        gc_pause.freeze()

    def close(self) -> None:
        """The app is done: the bookmark written, no run left going, the copies e made removed."""
        self.bookmarks.write()  # a quit that came before the last step switch's frame
        self.files.close()
        self.runs.close()
        self.copies.remove()
        gc_pause.thaw()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool:
        """: and / are priority keys, handled as they arrive, so the keys typed right after them
        reach the prompt (a key goes to whatever has focus when it is read). There they are text."""
        return action not in ("jump", "search") or not isinstance(self.focused, Prompt)

    # ---- the one place a step is shown

    async def go_to(self, index: int, line: Line | None = None, new_step: bool = False) -> None:
        """Show step `index` (with `line`, scrolled to that search match) in one frame: no repaint
        while its narration is mounted (each would cost a frame of the old step), and no garbage
        collection until that frame is drawn."""
        gc_pause.hold(self.call_after_refresh)
        new_step = new_step or index != self.nav.index
        with self.app.batch_update():
            self.nav.index = index
            self.files.load(index)  # git reads the diff while the narration fills in
            self.query_one(StepList).point_at(index)
            if new_step:
                await self.query_one(Narration).show(index, self.series.steps[index].narration)
                self.bookmarks.mark(self.series, index)
                self.call_after_refresh(self.bookmarks.write)
                self.call_after_refresh(self._prepare_neighbours)
            [files] = await self.files.ready([index])
            if new_step and not self.nav.whole_file:
                self.nav.follow(files)
            change = self.query_one(ChangePane)
            change.list_files(files if new_step else None, position(files, self.nav.path))
            self._show_change(line)

    async def _prepare_neighbours(self) -> None:
        """Make the next and previous steps ready while this one is read, so n and p are instant:
        their diffs read on the loader's threads, then their first screenful coloured; their
        narrations' documents made, hidden."""
        neighbours = self.nav.neighbours()
        for files in await self.files.ready(neighbours):
            self.query_one(DiffView).prepare(files)
        steps = self.series.steps
        await self.query_one(Narration).prepare({i: steps[i].narration for i in neighbours})

    def _show_change(self, line: Line | None = None) -> None:
        """Hand the change pane what it shows: the step's run, or Navigation's layout scrolled to
        `line` or the current file."""
        files = self.files.of(self.nav.index)  # read by now: the step is shown
        record = self.runs.records.get(self.nav.index) if self.nav.show_run else None
        change = self.query_one(ChangePane)
        if record is not None:
            head, foot = self.runs.head(record), partial(self.runs.foot, record)
            change.show_run(record, head, record.lines, foot)
        elif not change.show_diff(self.nav.layout(files), line, position(files, self.nav.path)):
            self.notify(self.nav.past_the_rows(), severity="warning", markup=False)
        self._show_title()

    def _show_title(self) -> None:
        nav = self.nav
        running = nav.show_run and nav.index in self.runs.records
        self.query_one(TitleBar).show(nav.title(), nav.status(running, nav.index in self.exercises))
        self.set_class(nav.split and not nav.whole_file, "-split")
        self.set_class(nav.zoomed, "-zoom")

    # ---- messages from the widgets

    @on(OptionList.OptionHighlighted, "#steps")
    async def _step_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        step = self.query_one(StepList).step_at[event.option_index]
        if step is not None and step != self.nav.index:
            await self.go_to(step)

    @on(OptionList.OptionHighlighted, "#files")
    def _file_chosen(self, event: OptionList.OptionHighlighted) -> None:
        self.nav.path = self.files.of(self.nav.index)[event.option_index].path
        self._show_change()

    @on(Input.Changed, "#prompt")
    def _prompt_changed(self, event: Input.Changed) -> None:
        typed = self.nav.surely_typed(event.value.strip())
        if self.query_one(Prompt).purpose == "jump" and typed is not None:
            self.files.load(typed)

    @on(Input.Submitted, "#prompt")
    async def _prompt_submitted(self, event: Input.Submitted) -> None:
        purpose, text = self.query_one(Prompt).purpose, event.value.strip()
        await (self._jump(text) if purpose == "jump" else self._search(text))

    # ---- moving through the series (see keys.py)

    async def action_next_step(self) -> None:
        await self._step_by(1, "This is the last step.")

    async def action_previous_step(self) -> None:
        await self._step_by(-1, "This is the first step.")

    async def _step_by(self, delta: int, at_the_end: str) -> None:
        index = self.nav.step_by(delta)
        if index is None:
            self.notify(at_the_end, timeout=2)
        else:
            await self.go_to(index)

    async def action_go_to_end(self, end: int) -> None:
        """The first step (0) or the last (-1), counted as a list counts."""
        await self.go_to(range(len(self.series.steps))[end])

    def action_jump(self) -> None:
        self.query_one(Prompt).ask("jump", f"Step number ({self.nav.numbers()}), then Enter")

    def action_search(self) -> None:
        hint = "Search narration and diffs, then Enter; N and P for the next and previous match"
        self.query_one(Prompt).ask("search", hint)

    async def _jump(self, text: str) -> None:
        index = self.nav.typed(text)
        if index is None:
            why = f"enter a number from {self.nav.numbers(' to ')}"
            self.notify(f"No step {text!r}: {why}.", severity="error", markup=False)
        else:
            await self.go_to(index)

    async def _search(self, text: str) -> None:
        match = self.nav.search.start(self.files.search(text) if text else [], self.nav.index)
        self.query_one(DiffView).set_query(text)
        if match is not None:
            await self._show_match(match)
            return
        self._show_title()
        if text:
            self.notify(f"No match for {text!r}.", severity="warning", markup=False)

    async def _show_match(self, match: Match) -> None:
        line = self.nav.at_match(match, self.files.of(match.step))
        await self.go_to(match.step, line)

    async def action_move_match(self, delta: int) -> None:
        match = self.nav.search.move(delta)
        if match is None:
            self.notify("No search yet: press / to search.", severity="warning")
        else:
            await self._show_match(match)

    # ---- what the change pane shows

    def action_toggle_split(self) -> None:
        self.nav.split, self.nav.whole_file = not self.nav.split, False
        self._show_change()

    def action_toggle_file(self) -> None:
        if self.nav.toggle_file(self.files.of(self.nav.index)):
            self._show_change()
        else:
            self.notify("This step changes no files.", severity="warning")

    def action_zoom(self) -> None:
        self.nav.zoomed = not self.nav.zoomed
        self._show_title()
        if self.nav.zoomed and isinstance(self.focused, (StepList, Narration)):  # hidden now
            self.query_one(ChangePane).shown().focus()

    def action_scroll_diff(self, columns: int) -> None:
        self.query_one(DiffView).scroll_relative(x=columns, animate=False)

    # ---- handing the terminal a command to paste, or a file to edit

    def action_copy_checkout(self) -> None:
        self.app.copy(self.series.checkout(self.nav.index))

    def action_copy_try_it(self) -> None:
        lines = [planned.text for planned in plan(self.series.steps[self.nav.index].narration)]
        if lines:
            self.app.copy("\n".join(lines))
        else:
            self.notify("This step's narration has no Try-it command.", severity="warning")

    def action_exercise(self) -> None:
        number = self.series.steps[self.nav.index].number
        if self.nav.index in self.exercises:
            self.app.copy(f"walkthrough exercise {number}")
        else:
            why = "the checks cover Part 0's and Part I's steps"
            self.notify(f"Step {number} has no exercise: {why}.", severity="warning")

    # ---- running a step's Try-it: RunControl decides, the run panel shows

    def action_run(self) -> None:
        press = self.runs.press(self.nav.index)
        if press.text:
            severity = "warning" if press.warning else "information"
            self.notify(press.text, severity=severity, timeout=4)
        if press.do != "say":
            # a worker, not an await: the app keeps reading keys (r and esc stop the run) meanwhile
            self.run_worker(self._run(self.nav.index, press), group="run")

    async def _run(self, index: int, press: Press) -> None:
        if press.do == "ask":
            if not await self.app.push_screen_wait(ConfirmRun(press.text, list(press.argvs))):
                return
            self.runs.confirm(index)
        panel = self.query_one(RunPanel)
        try:
            await self.runs.run(index, press.planned, self._run_started, panel.add)
        except WalkthroughError as error:
            self.notify(str(error), severity="error", markup=False)
            return
        panel.update_foot()  # how it ended, at once

    def _run_started(self, record: Record) -> None:
        self.nav.show_run = True
        if self.nav.index == record.index:
            self._show_change()
            self.query_one(Narration).scroll_to_text("What you should see")

    def action_stop(self) -> None:
        if stopping := self.runs.stop():
            self.notify(stopping, timeout=2)
        elif self.nav.show_run:
            self.nav.show_run = False
            self._show_change()

    def action_edit(self) -> None:
        line = self.query_one(DiffView).line_in_view(self.nav.path)
        edit = prepare_edit(self.series, self.nav.index, self.nav.path, self.copies, line)
        if isinstance(edit, str):
            self.notify(edit, severity="warning", markup=False)
        else:
            self.app.edit(edit)
