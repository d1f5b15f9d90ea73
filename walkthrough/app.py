"""The reader: step list, narration and diff side by side. The app holds the navigation state (which step, which
file, split or unified, the search) and pushes it down to widgets that only draw."""

from __future__ import annotations

import gc
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import Container, Horizontal, Vertical
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Footer, Input, OptionList, Static

from .bookmark import Bookmarks
from .diff import FileDiff, Line, shown
from .history import Match, Series
from .rows import MAX_ROWS, diff_layout, file_layout
from .widgets import DiffView, FileList, HelpScreen, Narration, Prompt, StepList


class WalkthroughApp(App[None]):
    CSS_PATH = "walkthrough.tcss"
    TITLE = "walkthrough"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    # the one key table: the footer shows the labels, the help screen lists the tooltips
    BINDINGS = [
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
        Binding("c", "copy_checkout", "Copy", tooltip="copy `git checkout` for this step", id="copy_checkout"),
        Binding("e", "edit", "Edit", tooltip="open the file at this step in $EDITOR (a copy)", id="edit"),
        Binding("question_mark", "help", "Help", tooltip="this help", id="help"),
        Binding("q", "quit", "Quit", tooltip="quit (the step you are on is remembered)", id="quit"),
    ]

    def __init__(self, series: Series, bookmarks: Bookmarks):
        super().__init__()
        assert series.steps, "a series has at least one step"
        self.series = series
        self.bookmarks = bookmarks
        self.index = 0
        self.path: str | None = None  # the file that f and e act on
        self.split = False
        self.whole_file = False
        self.matches: list[Match] = []
        self.match: int | None = None
        self._focus_before_prompt: Widget | None = None
        self._copies: Path | None = None  # where e writes the files it opens

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
        yield Prompt(id="prompt")
        yield Footer(compact=True)

    async def on_mount(self) -> None:
        self.query_one(StepList).show_steps(self.series.steps)
        await self.go_to(self.bookmarks.recall(self.series), new_step=True)
        self.query_one(DiffView).focus()
        # what exists now (Textual, the series) lives as long as the app: freezing it spares the garbage
        # collector from walking it all again in the middle of a step switch (tens of ms each time)
        gc.freeze()

    def on_unmount(self) -> None:
        gc.unfreeze()  # the app is done: let its objects be collected again
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
        """Show step `index`; with `line`, scroll the diff to that search match."""
        new_step = new_step or index != self.index
        self.index = index
        files = self.series.files(index)
        if new_step and not self.whole_file:
            self._pick_path(files)
        steps = self.query_one(StepList)
        with steps.prevent(OptionList.OptionHighlighted):
            steps.highlighted = index
        file_list = self.query_one(FileList)
        file_list.display = len(files) > 1
        with file_list.prevent(OptionList.OptionHighlighted):
            if new_step:
                file_list.show_files(files)
            file_list.highlighted = _position(files, self.path)
        if new_step:
            await self.query_one(Narration).show(index, self._narration(index))
            self.bookmarks.remember(self.series, index)
            self.call_after_refresh(self._prepare_neighbours)
        self._show_change(files, line)

    def _narration(self, index: int) -> str:
        return self.series.steps[index].narration or "*No narration: this commit's message is only a subject line.*"

    async def _prepare_neighbours(self) -> None:
        """Make the next and previous steps ready while this one is read, so n and p are instant."""
        for index in (self.index + 1, self.index - 1):
            if 0 <= index < self.step_count:
                self.query_one(DiffView).prepare(self.series.files(index))
                await self.query_one(Narration).prepare(index, self._narration(index))

    def _pick_path(self, files: list[FileDiff]) -> None:
        """Keep the current file if this step touches it, else take the step's first file."""
        if _position(files, self.path) is None:
            self.path = files[0].path if files else None

    def _show_change(self, files: list[FileDiff], line: Line | None = None) -> None:
        """Lay out the diff (or the whole file) and hand it to the DiffView; scroll to `line` or the current file."""
        step = self.series.steps[self.index]
        diff = self.query_one(DiffView)
        if self.whole_file and self.path is not None:
            diff.show(file_layout(self.path, self.series.file_at(self.index, self.path), step.ref, step.rev))
        else:
            layout = diff_layout(files, self.split, step.rev)
            diff.show(layout)
            file = _position(files, self.path)
            if line is not None:
                row = layout.line_rows.get(id(line))
                if row is None:
                    command = f"git show {shlex.quote(step.rev)}"
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
        self.query_one("#title", Static).update(Content(f"Step {step.number}/{self.step_count} · {step.title}"))
        mode = f"file {shown(self.path)}" if self.whole_file else ("side by side" if self.split else "unified")
        parts = [step.ref, mode]
        if self.match is not None:
            parts.append(f"match {self.match + 1}/{len(self.matches)}")
        self.query_one("#status", Static).update(Content(" · ".join(parts)))

    # ---- messages from the widgets

    @on(OptionList.OptionHighlighted, "#steps")
    async def _step_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_index != self.index:
            await self.go_to(event.option_index)

    @on(OptionList.OptionHighlighted, "#files")
    def _file_chosen(self, event: OptionList.OptionHighlighted) -> None:
        files = self.series.files(self.index)
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
        self._ask("jump", f"Step number (1-{self.step_count}), then Enter")

    def action_search(self) -> None:
        self._ask("search", "Search narration and diffs, then Enter; N and P for the next and previous match")

    async def _jump(self, text: str) -> None:
        if not (text.isdigit() and 1 <= int(text) <= self.step_count):
            self.notify(
                f"No step {text!r}: enter a number from 1 to {self.step_count}.", severity="error", markup=False
            )
            return
        await self.go_to(int(text) - 1)

    async def _search(self, text: str) -> None:
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
            file = self.series.files(match.step)[match.file]
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
        self._show_change(self.series.files(self.index))

    def action_toggle_file(self) -> None:
        if self.path is None:
            self.notify("This step changes no files.", severity="warning")
            return
        self.whole_file = not self.whole_file
        files = self.series.files(self.index)
        if not self.whole_file:  # the file followed across steps may not be in this one
            self._pick_path(files)
        self._show_change(files)

    def action_copy_checkout(self) -> None:
        command = self.series.steps[self.index].checkout
        self.copy_to_clipboard(command)
        self.notify(f"Copied: {command}", timeout=3, markup=False)

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
        data = self.series.file_at(self.index, self.path)
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
                    subprocess.run([*editor, str(copy)], check=False)
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


def _position(files: list[FileDiff], path: str | None) -> int | None:
    """Where `path` is in a step's files, or None."""
    return next((i for i, file in enumerate(files) if file.path == path), None)
