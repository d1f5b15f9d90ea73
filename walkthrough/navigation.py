"""Where the reader is in a series: the step, the file followed from step to step, how the change
pane shows it, and the last search. The reader's screen keeps one Navigation, changes it on a key
and draws what it says; no Textual here, so the tests drive it directly."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from .diff import FileDiff, Line, shown
from .errors import WalkthroughError
from .history import Match, Series
from .rows import MAX_ROWS, Layout, Row, diff_layout, file_layout


@dataclass
class Search:
    """The last `/` search: its matches in the whole series, and which one N and P go on from."""

    matches: list[Match] = field(default_factory=list)
    current: int | None = None  # None: no search, or one without a match

    def start(self, matches: list[Match], index: int) -> Match | None:
        """A new search from step `index`: its first match from there on (else the first)."""
        self.matches, self.current = matches, None
        if not matches:
            return None
        self.current = next((i for i, match in enumerate(matches) if match.step >= index), 0)
        return matches[self.current]

    def move(self, delta: int) -> Match | None:
        """The next (+1) or previous (-1) match, round the series; None before any search."""
        if self.current is None:
            return None
        self.current = (self.current + delta) % len(self.matches)
        return self.matches[self.current]

    def counter(self, index: int) -> str:
        """ "match 2/5" on the current match's step only: elsewhere N and P still go on from it."""
        if self.current is None or self.matches[self.current].step != index:
            return ""
        return f"match {self.current + 1}/{len(self.matches)}"


class Navigation:
    def __init__(self, series: Series):
        self.series = series
        self.index = 0  # into series.steps
        self.path: str | None = None  # the file that f and e act on, kept while the steps touch it
        self.split = False  # side by side
        self.whole_file = False  # the file at this step rather than its diff
        self.show_run = False  # the run panel instead of the diff, on steps that have a run
        self.zoomed = False  # the change pane at full width
        self.search = Search()

    # ---- which step

    def step_by(self, delta: int) -> int | None:
        """The step `delta` away from this one, or None past either end."""
        index = self.index + delta
        return index if 0 <= index < len(self.series.steps) else None

    def neighbours(self) -> list[int]:
        return [i for i in (self.step_by(1), self.step_by(-1)) if i is not None]

    def numbers(self, between: str = "-") -> str:
        """The step numbers there are: "1-30"."""
        return f"{self.series.steps[0].number}{between}{self.series.steps[-1].number}"

    def typed(self, text: str) -> int | None:
        """The step whose number is `text` (typed after `:`), or None."""
        return self.series.index_of(int(text)) if text.isdigit() else None

    def surely_typed(self, text: str) -> int | None:
        """The step being typed after `:`, once no digit more could make another step's number
        of it (of 30 steps, "2" may become 24, "24" is 24): its diff is read while Enter is on its
        way."""
        index = self.typed(text)
        if index is None or self.series.steps[-1].number >= int(text) * 10:
            return None
        return index

    # ---- which file

    def follow(self, files: list[FileDiff]) -> None:
        """Keep the current file if this step touches it, else take its first (code comes first)."""
        if position(files, self.path) is None:
            self.path = files[0].path if files else None

    def toggle_file(self, files: list[FileDiff]) -> bool:
        """The whole current file, or back to the step's diff (`files`), which may not touch the
        file followed so far; False if the step changes no files."""
        if self.path is None:
            return False
        self.whole_file = not self.whole_file
        if not self.whole_file:
            self.follow(files)
        return True

    def at_match(self, match: Match, files: list[FileDiff]) -> Line | None:
        """Go to a search match, given its step's files: the line it is on (None: the narration)."""
        self.index = match.step
        if match.file is None:
            return None
        file = files[match.file]
        self.path, self.whole_file = file.path, False
        return file.hunks[match.hunk].lines[match.line]

    # ---- what the change pane and the title bar say

    def layout(self, files: list[FileDiff]) -> Layout:
        """The step's diff, unified or side by side, or the whole current file; or a note: git
        could not read it."""
        step, git = self.series.steps[self.index], self.series.git()
        if self.index in self.series.errors:
            return note(f"git could not read this step: {self.series.errors[self.index]}")
        if self.whole_file and self.path is not None:
            try:
                data = self.series.file_at(self.index, self.path)
            except WalkthroughError as error:
                return note(f"git could not read {shown(self.path)}: {error}")
            return file_layout(self.path, data, step.ref, step.rev, git)
        return diff_layout(files, self.split, step.rev, git)

    def past_the_rows(self) -> str:
        """What to say of a match the diff pane does not reach."""
        command = f"{self.series.git()} show {shlex.quote(self.series.steps[self.index].rev)}"
        return f"This match is past the first {MAX_ROWS:,} rows shown: {command} shows it all."

    def title(self) -> str:
        step, last = self.series.steps[self.index], self.series.steps[-1].number
        # out of how many; not for --compare's versions of one step
        count = f"/{last}" if last != self.series.steps[0].number else ""
        return f"Step {step.number}{count} · {step.title}"

    def status(self, running: bool, exercise: bool) -> str:
        """The ref, how the change is shown (`running`: the step's run is), then what else holds."""
        if running:
            mode = "run"
        elif self.whole_file:
            mode = f"file {shown(self.path)}"
        else:
            mode = "side by side" if self.split else "unified"
        parts = [self.series.steps[self.index].ref, mode, "exercise" if exercise else ""]
        parts += [self.search.counter(self.index), "zoom" if self.zoomed else ""]
        return " · ".join(part for part in parts if part)


def position(files: list[FileDiff], path: str | None) -> int | None:
    """Where `path` is in a step's files, or None."""
    return next((i for i, file in enumerate(files) if file.path == path), None)


def note(text: str) -> Layout:
    return Layout([Row("note", text)])
