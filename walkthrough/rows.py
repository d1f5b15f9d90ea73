"""The diff pane's rows: a step's files (unified or side by side) or one whole file, up to MAX_ROWS.

Plain data, no Textual: the widget colours and draws the rows, the app uses `line_rows` to scroll to
a search match. A code row points at its line's place in a column of source text (a file's old side,
its new side, or both for a unified diff) because syntax colours are worked out a column at a time,
as the text they belong to.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import NamedTuple

from .diff import FileDiff, Hunk, Line, shown, side_by_side

MAX_ROWS = 5_000  # the rest of a huge diff is for `git show`: the note at the end says so
SIDES = {"old": " -", "new": " +", "both": " +-"}  # the kinds of line each column of a file holds
# control characters would move the terminal's cursor: show their Unicode pictures instead
PRINTABLE = str.maketrans(
    {
        **{c: 0x2400 + c for c in range(32)},
        127: 0x2421,
        0x85: 0xFFFD,
        0x2028: 0xFFFD,
        0x2029: 0xFFFD,
    }
)
STATUS_MARK = {"added": "A", "deleted": "D", "modified": "M", "renamed": "R", "copied": "C"}


# a tuple, as Row: a 2,000-line diff makes thousands of them on each step switch
class Cell(NamedTuple):
    line: Line
    # the file whose column holds the line; None in a whole-file layout (one column: text)
    file: FileDiff | None
    side: str  # "old", "new" or "both"
    index: int  # the line's place in that column


class Row(NamedTuple):
    kind: str  # file, hunk, note or code
    text: str = ""  # file, hunk and note rows
    left: Cell | None = None  # code rows: the line (unified, whole file), or the old side (split)
    right: Cell | None = None  # split code rows: the new side


@dataclass
class Layout:
    rows: list[Row]
    split: bool = False
    numbers: int = 2  # line-number columns in the gutter: old and new, or one for a whole file
    last_number: int = 0  # the largest line number, for the gutter's width
    file_rows: list[int] = field(default_factory=list)  # the header row of each file
    path: str = ""  # a whole file: its path, and its lines as shown
    text: list[str] = field(default_factory=list)
    # row -> the "\\ No newline" line that note row shows
    notes: dict[int, Line] = field(default_factory=dict)
    _line_rows: dict[int, int] | None = field(default=None, init=False, repr=False)

    @property
    def line_rows(self) -> dict[int, int]:
        """id(Line) -> its row, to scroll to a search match: worked out when a search first asks,
        not on every step switch (for a 2,000-line diff, the dictionary is a good part of the
        layout's time)."""
        if self._line_rows is None:
            rows: dict[int, int] = {}
            for number, row in enumerate(self.rows):
                if row.left is not None:
                    rows[id(row.left.line)] = number
                if row.right is not None:
                    rows[id(row.right.line)] = number
            rows.update((id(line), number) for number, line in self.notes.items())
            self._line_rows = rows
        return self._line_rows


def columns(file: FileDiff) -> dict[str, list[str]]:
    """The text of each column of a file, in the order its cells count them."""
    lines = [line for hunk in file.hunks for line in hunk.lines]
    return {
        side: [line.text for line in lines if line.kind in kinds] for side, kinds in SIDES.items()
    }


def diff_layout(files: list[FileDiff], split: bool, rev: str, git: str = "git") -> Layout:
    """A step's diff: a header row per file, then its hunks, unified or side by side. `rev` (the
    step's commit, as git takes it) goes into the command the cut-off note gives, which starts with
    `git` (`git -C <history>`, so that it works wherever the learner stands)."""
    layout = Layout([], split)
    rows = layout.rows
    total = 0
    for file in files:
        layout.file_rows.append(len(rows))
        rows.append(
            Row("file", f"{STATUS_MARK[file.status]} {file.label}   +{file.added} −{file.removed}")
        )
        if file.binary:
            rows.append(Row("note", "binary file: not shown"))
        elif not file.hunks:
            rows.append(Row("note", "no change to the content"))
        at = dict.fromkeys(SIDES, 0)
        for hunk in file.hunks:
            total += len(hunk.lines)
            if len(rows) >= MAX_ROWS:
                continue
            rows.append(
                Row("hunk", f"@@ -{hunk.old_start} +{hunk.new_start} @@ {hunk.header}".rstrip())
            )
            if split:
                _split_rows(layout, file, side_by_side(hunk)[: MAX_ROWS - len(rows)], at)
            else:
                _unified_rows(layout, file, hunk.lines[: MAX_ROWS - len(rows)], at)
    if len(rows) >= MAX_ROWS:
        drawn = sum(row.kind == "code" for row in rows)
        whole = f"{git} show {shlex.quote(rev)}"
        rows.append(
            Row(
                "note",
                f"… the diff is {total:,} lines; showing the first {drawn:,}. See it all: {whole}",
            )
        )
    if not files:
        rows.append(Row("note", "this step changes no files"))
    layout.last_number = max(
        (_last_number(hunk) for file in files for hunk in file.hunks), default=0
    )
    return layout


# A 2,000-line diff is laid out on every step switch onto it: the rows are made in plain loops, with
# the tuples' fields in order (no generators, no keywords), and each cell's column index counted as
# it goes.


def _unified_rows(layout: Layout, file: FileDiff, lines: list[Line], at: dict[str, int]) -> None:
    rows, index = layout.rows, at["both"]
    for line in lines:
        if line.kind == "\\":
            layout.notes[len(rows)] = line
            rows.append(Row("note", line.text))
        else:
            rows.append(Row("code", "", Cell(line, file, "both", index), None))
            index += 1
    at["both"] = index


def _split_rows(
    layout: Layout, file: FileDiff, pairs: list[tuple[Line | None, Line | None]], at: dict[str, int]
):
    """Side by side: a context line is the same Line on both sides, with a place in both columns."""
    rows, old, new = layout.rows, at["old"], at["new"]
    for a, b in pairs:
        if a is not None and a.kind == "\\":
            layout.notes[len(rows)] = a
            rows.append(Row("note", a.text))
            continue
        left = right = None
        if a is not None:
            left, old = Cell(a, file, "old", old), old + 1
        if b is not None:
            right, new = Cell(b, file, "new", new), new + 1
        rows.append(Row("code", "", left, right))
    at["old"], at["new"] = old, new


def _last_number(hunk: Hunk) -> int:
    """A hunk's largest line number: numbers only grow down a hunk, so its last old or new one."""
    old = new = 0
    for line in reversed(hunk.lines):
        old, new = old or line.old or 0, new or line.new or 0
        if old and new:
            break
    return max(old, new)


def file_layout(path: str, data: bytes | None, ref: str, rev: str, git: str = "git") -> Layout:
    """The whole file as it is after the step named `ref` on screen and `rev` to git (`git` starts
    the command the cut-off note gives)."""
    layout = Layout([Row("file", f"{shown(path)} at {ref}")], numbers=1, file_rows=[0], path=path)
    rows = layout.rows
    if data is None:
        rows.append(Row("note", "not in the repository at this step"))
    elif b"\0" in data[:8000]:
        rows.append(Row("note", f"binary file: {len(data):,} bytes"))
    else:
        text = data.decode("utf-8", errors="replace").splitlines()
        layout.text = text[:MAX_ROWS]
        rows += [
            Row("code", left=Cell(Line(" ", None, n, t), None, "both", n - 1))
            for n, t in enumerate(layout.text, 1)
        ]
        if len(text) > MAX_ROWS:
            whole = f"{git} show {shlex.quote(f'{rev}:{shown(path)}')}"
            rows.append(
                Row(
                    "note",
                    f"… {len(text):,} lines; showing the first {MAX_ROWS:,}. See it all: {whole}",
                )
            )
    layout.last_number = len(rows)
    return layout


def printable(text: str) -> str:
    return text.expandtabs(4).translate(PRINTABLE)
