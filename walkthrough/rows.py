"""The diff pane's rows: a step's files (unified or side by side) or one whole file, cut off at MAX_ROWS.

Plain data, no Textual: the widget colours and draws the rows, the app uses `line_rows` to scroll to a search
match. A code row points at its line's place in a column of source text (a file's old side, its new side, or both
for a unified diff) because syntax colours are worked out a column at a time, as the text they belong to.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import NamedTuple

from .diff import FileDiff, Hunk, Line, shown, side_by_side

MAX_ROWS = 5_000  # the rest of a huge diff is for `git show`: the note at the end says so
SIDES = {"old": " -", "new": " +", "both": " +-"}  # the kinds of line each column of a file holds
STATUS_MARK = {"added": "A", "deleted": "D", "modified": "M", "renamed": "R", "copied": "C"}


class Cell(NamedTuple):  # a tuple, as Row: a 2,000-line diff makes thousands of them on each step switch
    line: Line
    file: FileDiff | None  # the file whose column holds the line; None in a whole-file layout (one column: text)
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
    line_rows: dict[int, int] = field(default_factory=dict)  # id(Line) -> its row, to scroll to a search match
    path: str = ""  # a whole file: its path, and its lines as shown
    text: list[str] = field(default_factory=list)


def columns(file: FileDiff) -> dict[str, list[str]]:
    """The text of each column of a file, in the order its cells count them."""
    lines = [line for hunk in file.hunks for line in hunk.lines]
    return {side: [line.text for line in lines if line.kind in kinds] for side, kinds in SIDES.items()}


def diff_layout(files: list[FileDiff], split: bool, rev: str) -> Layout:
    """A step's diff: a header row per file, then its hunks, unified or side by side. `rev` (the step's commit, as
    git takes it) goes into the command the cut-off note gives."""
    layout = Layout([], split)
    rows = layout.rows
    total = 0
    for file in files:
        layout.file_rows.append(len(rows))
        rows.append(Row("file", f"{STATUS_MARK[file.status]} {file.label}   +{file.added} −{file.removed}"))
        if file.binary:
            rows.append(Row("note", "binary file: not shown"))
        elif not file.hunks:
            rows.append(Row("note", "no change to the content"))
        at = {side: 0 for side in SIDES}
        for hunk in file.hunks:
            total += len(hunk.lines)
            if len(rows) >= MAX_ROWS:
                continue
            rows.append(Row("hunk", f"@@ -{hunk.old_start} +{hunk.new_start} @@ {hunk.header}".rstrip()))
            for row, lines in islice(_hunk_rows(file, hunk, split, at), MAX_ROWS - len(rows)):
                layout.line_rows.update((id(line), len(rows)) for line in lines)
                rows.append(row)
    if len(rows) >= MAX_ROWS:
        drawn = sum(row.kind == "code" for row in rows)
        whole = f"git show {shlex.quote(rev)}"
        rows.append(Row("note", f"… the diff is {total:,} lines; showing the first {drawn:,}. See it all: {whole}"))
    if not files:
        rows.append(Row("note", "this step changes no files"))
    numbers = (n for file in files for hunk in file.hunks for line in hunk.lines for n in (line.old, line.new))
    layout.last_number = max((n for n in numbers if n), default=0)
    return layout


def _hunk_rows(file: FileDiff, hunk: Hunk, split: bool, at: dict[str, int]) -> Iterator[tuple[Row, tuple[Line, ...]]]:
    """One hunk's rows, each with the diff lines it shows; `at` holds each column's next index and moves on."""

    def cell(line: Line | None, side: str) -> Cell | None:
        if line is None:
            return None
        at[side] += 1
        return Cell(line, file, side, at[side] - 1)

    if split:
        for a, b in side_by_side(hunk):
            lines = tuple(line for line in (a, b) if line is not None)
            if a is not None and a.kind == "\\":
                yield Row("note", a.text), lines
            else:  # a context line is the same Line on both sides, and has a place in both columns
                yield Row("code", left=cell(a, "old"), right=cell(b, "new")), lines
    else:
        for line in hunk.lines:
            if line.kind == "\\":
                yield Row("note", line.text), (line,)
            else:
                yield Row("code", left=cell(line, "both")), (line,)


def file_layout(path: str, data: bytes | None, ref: str, rev: str) -> Layout:
    """The whole file as it is after the step named `ref` on screen and `rev` to git."""
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
            Row("code", left=Cell(Line(" ", None, n, t), None, "both", n - 1)) for n, t in enumerate(layout.text, 1)
        ]
        if len(text) > MAX_ROWS:
            whole = shlex.quote(f"{rev}:{shown(path)}")
            rows.append(
                Row("note", f"… {len(text):,} lines; showing the first {MAX_ROWS:,}. See it all: git show {whole}")
            )
    layout.last_number = len(rows)
    return layout
