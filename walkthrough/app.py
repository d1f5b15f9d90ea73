"""The reader: step list, narration and diff side by side. The app holds the navigation state (which step, which
file, split or unified, the search) and pushes it down to widgets that only draw."""

from __future__ import annotations

import asyncio
import gc
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import Container, Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input, OptionList, Static

from .bookmark import Bookmarks
from .checks import CHECKS
from .diff import FileDiff, Line, shown
from .errors import WalkthroughError
from .history import Match, Series
from .rows import MAX_ROWS, Layout, Row, diff_layout, file_layout
from .runner import Record, Run, argv_here, describe_status, plan, runs_folder, verdict, with_stand_ins, worktree
from .widgets import (
    ConfirmRun,
    DiffView,
    FileList,
    HelpScreen,
    KeysFooter,
    Narration,
    Prompt,
    ReaderScreen,
    RunPanel,
    StepList,
)

PROJECT_HISTORY = Path(__file__).resolve().parent.parent / "history"  # this project's own series, built
# editors that open a file at a line with +N before its name
LINE_EDITORS = {"vi", "vim", "nvim", "view", "nano", "emacs", "emacsclient", "micro", "kak", "joe", "ne", "mg"}
CLIPBOARD_TOOLS = (("pbcopy",), ("wl-copy",), ("xclip", "-selection", "clipboard"), ("xsel", "--clipboard", "-i"))


class WalkthroughApp(App[None]):
    CSS_PATH = "walkthrough.tcss"
    TITLE = "walkthrough"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    # the one key table: the footer shows the labels, the help screen lists the tooltips. Help and Quit come first:
    # an 80-column footer cuts the last labels off, and those two must always show
    BINDINGS = [
        Binding("question_mark", "help", "Help", tooltip="this help", id="help"),
        Binding("q", "quit", "Quit", tooltip="quit (the step you are on is remembered)", id="quit"),
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
            "tab", "focus_next", "Focus", show=False, tooltip="move focus: steps, narration, files, diff", id="focus"
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
    ]

    def __init__(self, series: Series, bookmarks: Bookmarks, own_series: bool | None = None):
        super().__init__()
        assert series.steps, "a series has at least one step"
        self.series = series
        self.bookmarks = bookmarks
        # this project's own series runs its Try-its without asking; any other history's commands are confirmed
        if own_series is None:
            own_series = Path(series.repo.git_dir).resolve() == (PROJECT_HISTORY / ".git").resolve()
        self.own_series = own_series
        self.runs_root: Path | None = None  # where worktrees go (None: runner.runs_folder)
        self.clock = time.monotonic
        self.records: dict[int, Record] = {}  # the last run of each step
        self.active_run: Run | None = None  # the run going on now, if any
        # not `_running`: that is Textual's own flag for a running app (None there stops new widgets from starting)
        self._run_record: Record | None = None
        self._starting = False  # a run's checkout is being made
        self._warned_at: int | None = None  # the step where r was pressed while another step's run went on
        self.show_run = False  # the run panel instead of the diff, on steps that have a run
        self.zoomed = False
        self._confirmed: set[int] = set()
        self.index = 0
        self.path: str | None = None  # the file that f and e act on
        self.split = False
        self.whole_file = False
        self.matches: list[Match] = []
        self.match: int | None = None
        self._focus_before_prompt: Widget | None = None
        self._copies: Path | None = None  # where e writes the files it opens
        # steps' diffs read in the background (see _load): git runs in a process of its own, two at a time
        self._loader = ThreadPoolExecutor(max_workers=2, thread_name_prefix="walkthrough-diff")
        self._loads: dict[int, Future] = {}
        self._read: set[int] = set()  # steps Series.files has read (or failed to)
        self._bookmark_due = False  # a step shown whose bookmark is not written yet

    def get_default_screen(self) -> Screen:
        return ReaderScreen(id="_default")

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

    def on_unmount(self) -> None:
        self._remember()  # a quit that came before the last step switch's frame
        self._loader.shutdown(wait=False, cancel_futures=True)
        gc.unfreeze()  # the app is done: let its objects be collected again
        gc.enable()  # if a step switch had held collection off
        if self.active_run is not None:  # no process outlives the reader
            self.active_run.kill()
        if self._copies is not None:  # the copies e made
            shutil.rmtree(self._copies, ignore_errors=True)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool:
        """: and / are priority keys, handled as they arrive, so the keys typed right after them reach the prompt
        (a key is routed to whatever has focus when it is read). They open the prompt from the reader's screen only,
        and inside the prompt they are just text."""
        if action in ("jump", "search"):
            return self.screen is self.screen_stack[0] and not isinstance(self.focused, Prompt)
        return True

    @property
    def step_count(self) -> int:
        return len(self.series.steps)

    # ---- the one place navigation state changes and flows down

    async def go_to(self, index: int, line: Line | None = None, new_step: bool = False) -> None:
        """Show step `index`; with `line`, scroll the diff to that search match.

        One frame shows the whole change: no repaint while the step's narration is mounted (each would cost a
        frame of the old step, tens of ms), and no garbage collection until that frame is drawn."""
        _defer_collection(self)
        with self.batch_update():
            await self._go_to(index, line, new_step)

    async def _go_to(self, index: int, line: Line | None, new_step: bool) -> None:
        new_step = new_step or index != self.index
        self.index = index
        loading = self._load(index)  # git works on a new step's diff while the narration is filled in
        steps = self.query_one(StepList)
        with steps.prevent(OptionList.OptionHighlighted):
            steps.highlighted = steps.option_of[index]
        if new_step:
            # a commit with only a subject line has nothing to say beyond the title bar: the pane steps aside
            text = self.series.steps[index].narration.strip()
            self.screen.set_class(not text, "-no-narration")
            if text:
                await self.query_one(Narration).show(index, text)
            self._bookmark_due = True  # written once the step is drawn: a file, while nobody waits (or at quit)
            self.call_after_refresh(self._remember)
            self.call_after_refresh(self._prepare_neighbours)
        if loading is not None and not loading.done():
            await asyncio.wait([asyncio.wrap_future(loading)])
        files = self.files(index)
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

    def files(self, index: int) -> list[FileDiff]:
        """The step's files; none, and the reason kept for the diff pane, where git cannot read them (a missing
        object in a partial or damaged clone): one bad step does not stop the reader."""
        loading = self._loads.pop(index, None)
        if loading is not None:  # being read in the background: wait for it rather than read the step twice
            wait([loading])
        self._read.add(index)
        try:
            return self.series.files(index)
        except WalkthroughError:  # Series.errors has the reason
            return []

    def _load(self, index: int) -> Future | None:
        """Start reading step `index`'s diff (git, then parsing) on the loader thread, unless it has been read (None)
        or is on its way. Series.files keeps what it read; `files` waits for a read in progress, so a step is
        only read once."""
        if index in self._read:
            return None
        loading = self._loads.get(index)
        if loading is None:
            loading = self._loads[index] = self._loader.submit(self.series.files, index)
        return loading

    def _settle(self) -> None:
        """Wait for every read in progress (before a search reads all the steps itself)."""
        for index in list(self._loads):
            self.files(index)

    @on(Input.Changed, "#prompt")
    def _prompt_changed(self, event: Input.Changed) -> None:
        """A step number typed after `:`: its diff is read while Enter is on its way, once no digit more could make
        another step's number of it (of 30 steps, "2" may become 24, "24" is 24)."""
        text = event.value.strip()
        if self.query_one(Prompt).purpose == "jump" and text.isdigit():
            number, last = int(text), self.series.steps[-1].number
            if (index := self.series.index_of(number)) is not None and last < number * 10:
                self._load(index)

    async def _prepare_neighbours(self) -> None:
        """Make the next and previous steps' diffs ready while this one is read, so n and p are instant: read on
        the loader thread (keys are answered meanwhile), then their first screenful coloured."""
        neighbours = [index for index in (self.index + 1, self.index - 1) if 0 <= index < self.step_count]
        loading = [future for future in map(self._load, neighbours) if future is not None]
        if loading:
            await asyncio.wait([asyncio.wrap_future(future) for future in loading])
        for index in neighbours:
            self.query_one(DiffView).prepare(self.files(index))

    def _pick_path(self, files: list[FileDiff]) -> None:
        """Keep the current file if this step touches it, else take the step's first file (code comes first)."""
        if _position(files, self.path) is None:
            self.path = files[0].path if files else None

    def _show_change(self, files: list[FileDiff], line: Line | None = None) -> None:
        """Lay out the diff (or the whole file, or the step's run) and hand it to its widget; scroll to `line` or the
        current file."""
        step = self.series.steps[self.index]
        record = self.records.get(self.index) if self.show_run else None
        diff, panel, file_list = self.query_one(DiffView), self.query_one(RunPanel), self.query_one(FileList)
        had_focus = self.focused in (diff, panel.query_one("#run-log"))
        panel.display = record is not None
        diff.display = record is None
        if had_focus:  # keys keep scrolling what is shown
            (diff if record is None else panel.query_one("#run-log")).focus()
        file_list.display = record is None and len(files) > 1
        if record is not None:
            panel.show(self._run_head(record), record.lines, self._run_foot(record))
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
        if self.show_run and self.index in self.records:
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
        self.screen.set_class(self.split and not self.whole_file, "-split")
        self.screen.set_class(self.zoomed, "-zoom")

    # ---- messages from the widgets

    @on(OptionList.OptionHighlighted, "#steps")
    async def _step_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        step = self.query_one(StepList).step_at[event.option_index]
        if step is not None and step != self.index:
            await self.go_to(step)

    @on(OptionList.OptionHighlighted, "#files")
    def _file_chosen(self, event: OptionList.OptionHighlighted) -> None:
        files = self.files(self.index)
        self.path = files[event.option_index].path
        self._show_change(files)

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

    # ---- actions (see BINDINGS)

    async def action_next_step(self) -> None:
        if self.index + 1 < self.step_count:
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
        await self.go_to(self.step_count - 1)

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
        self._settle()
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
            file = self.files(match.step)[match.file]
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

    def action_toggle_split(self) -> None:
        self.split, self.whole_file = not self.split, False
        self._show_change(self.files(self.index))

    def action_toggle_file(self) -> None:
        if self.path is None:
            self.notify("This step changes no files.", severity="warning")
            return
        self.whole_file = not self.whole_file
        files = self.files(self.index)
        if not self.whole_file:  # the file followed across steps may not be in this one
            self._pick_path(files)
        self._show_change(files)

    def action_copy_checkout(self) -> None:
        self._copy_text(self.series.checkout(self.index))

    def action_copy_try_it(self) -> None:
        lines = [planned.text for planned in plan(self.series.steps[self.index].narration)]
        if not lines:
            self.notify("This step's narration has no Try-it command.", severity="warning")
            return
        self._copy_text("\n".join(lines))

    def has_exercise(self, step) -> bool:
        """Whether `walkthrough exercise N` works for this step: the project's own series, and a check for it."""
        return self.own_series and step.slug in CHECKS

    def action_exercise(self) -> None:
        step = self.series.steps[self.index]
        if not self.has_exercise(step):
            self.notify(
                f"Step {step.number} has no exercise: the checks cover Part 0's and Part I's steps.", severity="warning"
            )
            return
        self._copy_text(f"walkthrough exercise {step.number}")

    def _copy_text(self, text: str) -> None:
        """Copy through a clipboard program where there is one, and always send it to the terminal (OSC 52), then
        say which happened: a terminal may drop the request (tmux without `set-clipboard on`), and nothing says so."""
        tool = next((t for t in CLIPBOARD_TOOLS if _usable(t[0]) and shutil.which(t[0])), None)
        copied = False
        if tool is not None:
            try:
                copied = subprocess.run(list(tool), input=text.encode(), timeout=2, check=False).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                copied = False
        self.copy_to_clipboard(text)
        if copied:
            where = f"Copied with {tool[0]}"
        elif os.environ.get("TMUX"):
            where = "Sent to the terminal's clipboard (in tmux only with `set -g set-clipboard on`)"
        else:
            where = "Sent to the terminal's clipboard (if it accepts OSC 52)"
        self.notify(f"{where}: {text}", timeout=4, markup=False)

    # ---- running a step

    def action_run(self) -> None:
        if self.active_run is not None:
            running = self._run_record.index if self._run_record is not None else self.index
            if running != self.index and self._warned_at != self.index:  # say what r does here before it does it
                self._warned_at = self.index
                self.notify(
                    f"Step {self.series.steps[running].number}'s Try-it is running: r again stops it; "
                    "then r runs this step's.",
                    timeout=4,
                )
                return
            self._warned_at = None
            self._stop_run()
            return
        if self._starting:  # the checkout is being made
            return
        index = self.index
        narration = self.series.steps[index].narration
        planned = plan(narration)
        if not planned:
            self.notify("This step's narration has no Try-it block: there is nothing to run.", severity="warning")
            return
        if not self.own_series and index not in self._confirmed:
            argvs = [
                repr(argv_here(c.argv)) + (f"  with {c.env}" if c.env else "") for p in planned for c in p.commands
            ] + [f"(needs a shell, not run) {p.text}" for p in planned if p.refused]
            where = f"a checkout of {self.series.steps[index].ref}"

            def answered(yes: bool | None) -> None:
                if yes:
                    self._confirmed.add(index)
                    self.run_worker(self._start_run(index, planned), group="run")

            self.push_screen(ConfirmRun(where, argvs), answered)
            return
        # a worker, not an await here: the app keeps reading keys (r and esc stop the run) while it runs
        self.run_worker(self._start_run(index, planned), group="run")

    async def _start_run(self, index: int, planned) -> None:
        if self.active_run is not None or self._starting:
            return
        self._starting = True
        narration = self.series.steps[index].narration
        try:
            folder, new = await asyncio.to_thread(worktree, self.series, index, self.runs_root)
            runs = self.runs_root or runs_folder(self.series)
            if offline_note := await asyncio.to_thread(with_stand_ins, narration, folder, runs):
                planned = plan(narration, stand_ins=True)
        except WalkthroughError as error:
            self.notify(str(error), severity="error", markup=False)
            return
        finally:
            self._starting = False
        record = Record(index, folder, new, planned, started=self.clock())
        self.records[index] = record
        self._run_record = record

        def on_line(line: str) -> None:
            record.lines.append(line)
            if self.show_run and self.index == index:
                self.query_one(RunPanel).append(line)

        if offline_note:
            on_line(offline_note)
        self.active_run = Run(planned, folder, on_line, clock=self.clock)
        self.show_run = True
        if self.index == index:
            self._show_change(self.files(index))
            self.query_one(Narration).scroll_to_text("What you should see")
        ticker = self.set_interval(0.5, self._tick)
        status = 1  # if the runner itself fails
        try:
            status = await self.active_run.run()
        finally:
            ticker.stop()
            record.status = status
            record.stopped = self.active_run.stopped
            record.ended = self.clock()
            record.first_output = self.active_run.first_output
            if not record.stopped:
                record.verdict = verdict(narration, "\n".join(self.active_run.output), record.status)
            self.active_run, self._run_record = None, None
        if self.show_run and self.index == index:
            self.query_one(RunPanel).set_foot(self._run_foot(record))
            self._show_title()

    def _tick(self) -> None:
        record = self._run_record
        if record is not None and self.show_run and self.index == record.index:
            self.query_one(RunPanel).set_foot(self._run_foot(record))

    def _stop_run(self) -> None:
        if self.active_run is not None and self._run_record is not None:
            self.active_run.stop()
            self.notify(f"Stopping the run of step {self.series.steps[self._run_record.index].number}.", timeout=2)

    def _run_head(self, record: Record) -> str:
        checkout = "a new checkout" if record.new_checkout else "its checkout, put back to the step's files"
        return f"Try-it of {self.series.steps[record.index].ref}, in {checkout}: {record.folder}"

    def _run_foot(self, record: Record) -> str:
        seconds = f"{record.seconds(self.clock()):.1f} s"
        if record.running:
            return f"running · {seconds} · r or esc stops it"
        ended = "stopped" if record.stopped else describe_status(record.status)
        parts = [ended, seconds]
        if record.verdict:
            parts.append(record.verdict)
        return " · ".join(parts) + " · r runs it again, esc shows the diff"

    def action_stop(self) -> None:
        if self.active_run is not None:
            self._stop_run()
        elif self.show_run:
            self.show_run = False
            self._show_change(self.files(self.index))

    def action_zoom(self) -> None:
        self.zoomed = not self.zoomed
        self._show_title()
        if self.zoomed and isinstance(self.focused, (StepList, Narration)):  # hidden now
            self.query_one(RunPanel if self.query_one(RunPanel).display else DiffView).focus()

    def action_scroll_diff(self, columns: int) -> None:
        self.query_one(DiffView).scroll_relative(x=columns, animate=False)

    def action_edit(self) -> None:
        try:
            editor = shlex.split(os.environ.get("VISUAL") or os.environ.get("EDITOR") or "")
        except ValueError:  # an unclosed quote
            editor = []
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
            folder, copy = self._copy(data)
        except OSError as error:
            self.notify(f"Could not write a copy of {shown(self.path)}: {error}", severity="error", markup=False)
            return
        failure = None
        try:
            with self.suspend():
                # an exception escaping this block would skip Textual's resume and leave the app frozen: a failed
                # start is caught here, and reported once the app has the terminal back
                try:
                    subprocess.run([*editor, *self._line_argument(editor), str(copy)], check=False)
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

    def _line_argument(self, editor: list[str]) -> list[str]:
        """`+N` for editors that take it: the line of the file at the top of the diff pane (or of the whole file)."""
        if Path(editor[0]).name not in LINE_EDITORS:
            return []
        diff = self.query_one(DiffView)
        top = int(diff.scroll_offset.y)
        if self.whole_file:
            return [f"+{max(1, top)}"]
        for row in diff.rows[top:]:
            cells = [cell for cell in (row.left, row.right) if cell is not None]
            for cell in cells:
                if cell.file is not None and cell.file.path == self.path and cell.line.new is not None:
                    return [f"+{cell.line.new}"]
        return []

    def _copy(self, data: bytes) -> tuple[Path, Path]:
        """(a new folder under the app's copies folder, in it a read-only copy of the current file as it is at this
        step): editing the past changes nothing."""
        if self._copies is None:
            self._copies = Path(tempfile.mkdtemp(prefix="walkthrough-"))
        folder = Path(tempfile.mkdtemp(dir=self._copies))
        step = folder / self.series.steps[self.index].ref.replace("/", "-")
        copy = step / self.path
        if not copy.resolve().is_relative_to(step.resolve()):  # a crafted tree entry like ../x: keep the name
            copy = step / Path(self.path).name
        copy.parent.mkdir(parents=True)
        copy.write_bytes(data)
        copy.chmod(0o444)
        return folder, copy

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.key_rows()))

    def key_rows(self) -> list[tuple[str, str]]:
        """(keys, what they do) for each action in BINDINGS, in table order."""
        rows: dict[str, tuple[list[str], str]] = {}
        for binding in Binding.make_bindings(self.BINDINGS):
            keys, _ = rows.setdefault(binding.action, ([], binding.tooltip or binding.description))
            keys.append(self.get_key_display(binding))
        return [(" ".join(keys), text) for keys, text in rows.values()]


def _defer_collection(app: App) -> None:
    """No automatic garbage collection until the next frame has been drawn: a full collection in the middle of a
    step switch costs tens of ms, and after the frame nobody waits for it."""
    if gc.isenabled():
        gc.disable()
        app.call_after_refresh(gc.enable)


def _usable(tool: str) -> bool:
    """A clipboard program that can reach a clipboard here: X and Wayland tools need their display."""
    if tool in ("xclip", "xsel"):
        return bool(os.environ.get("DISPLAY"))
    if tool == "wl-copy":
        return bool(os.environ.get("WAYLAND_DISPLAY"))
    return True


def _position(files: list[FileDiff], path: str | None) -> int | None:
    """Where `path` is in a step's files, or None."""
    return next((i for i, file in enumerate(files) if file.path == path), None)
