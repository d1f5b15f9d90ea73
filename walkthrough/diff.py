"""Parse `git diff` output into files, hunks and lines, and pair lines for a side-by-side view.

Works on bytes: a diff may hold any encoding, so each line is decoded on its own and bad bytes
become U+FFFD instead of an exception. Paths are kept whole instead: a name that is not UTF-8
decodes with surrogate escapes, so it goes back to git as the same bytes, and `shown` escapes it for
the screen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from itertools import zip_longest
from typing import NamedTuple

HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")
# C-style escapes git uses in quoted paths ("a/caf\303\251.txt")
ESCAPES = {b"a": 7, b"b": 8, b"t": 9, b"n": 10, b"v": 11, b"f": 12, b"r": 13, b'"': 34, b"\\": 92}


# a tuple of plain values: quick to make by the thousand, and no work for the collector
class Line(NamedTuple):
    kind: str  # " " context, "+" added, "-" removed, "\\" the "No newline at end of file" marker
    old: int | None  # line number on the old side, None for an added line
    new: int | None  # line number on the new side, None for a removed line
    text: str


@dataclass
class Hunk:
    header: str  # the text after the second @@: git's guess at the enclosing function
    old_start: int
    new_start: int
    lines: list[Line] = field(default_factory=list)


@dataclass
class FileDiff:
    old_path: str | None  # None when the file is added
    new_path: str | None  # None when the file is deleted
    status: str = "modified"  # added, deleted, modified, renamed, copied
    binary: bool = False
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""

    @property
    def label(self) -> str:
        if self.status in ("renamed", "copied"):
            return f"{shown(self.old_path)} → {shown(self.new_path)}"
        return shown(self.path)

    # counted once, when first asked (the step's file list and the diff's file header both show
    # them): a file's hunks are complete by then, and nothing changes them after parse_diff
    @cached_property
    def added(self) -> int:
        return sum(line.kind == "+" for hunk in self.hunks for line in hunk.lines)

    @cached_property
    def removed(self) -> int:
        return sum(line.kind == "-" for hunk in self.hunks for line in hunk.lines)


DATA_SUFFIXES = {
    ".txt",
    ".csv",
    ".tsv",
    ".json",
    ".jsonl",
    ".npy",
    ".npz",
    ".bin",
    ".pt",
    ".parquet",
    ".lock",
}


def is_data(file: FileDiff) -> bool:
    """A data file (text, tables, tensors, anything binary) rather than code: shown after the code a
    step changes."""
    name = file.path.rsplit("/", 1)[-1]
    return file.binary or ("." in name and "." + name.rsplit(".", 1)[-1].lower() in DATA_SUFFIXES)


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def decode_path(raw: bytes) -> str:
    """A path from git, whatever its bytes: encode_path gives them back."""
    return raw.decode("utf-8", errors="surrogateescape")


def encode_path(path: str) -> bytes:
    return path.encode("utf-8", errors="surrogateescape")


def shown(path: str | None) -> str:
    """A path for the screen: the bytes that are not UTF-8 as \\xNN escapes."""
    return encode_path(path or "").decode("utf-8", errors="backslashreplace")


def unquote(raw: bytes) -> str:
    """A path as git prints it: plain, or in double quotes with C escapes for unusual bytes."""
    if not (raw.startswith(b'"') and raw.endswith(b'"') and len(raw) >= 2):
        return decode_path(raw)
    out, body, i = bytearray(), raw[1:-1], 0
    while i < len(body):
        if body[i : i + 1] == b"\\" and i + 1 < len(body):
            nxt = body[i + 1 : i + 2]
            if nxt.isdigit():
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
            out.append(ESCAPES.get(nxt, nxt[0]))
            i += 2
            continue
        out.append(body[i])
        i += 1
    return decode_path(bytes(out))


def _side_path(raw: bytes) -> str | None:
    """The path on a ---/+++ line, without its a/ or b/ prefix; None for /dev/null."""
    raw = raw.rstrip(b"\t")  # git ends a path that contains spaces with a tab
    if raw == b"/dev/null":
        return None
    return _strip_prefix(unquote(raw))


def _strip_prefix(path: str) -> str:
    return path[2:] if path[:2] in ("a/", "b/") else path


def _header_paths(rest: bytes) -> tuple[str, str]:
    """Both paths of a `diff --git a/X b/X` line. Only used when the paths are equal (no rename), so
    when unquoted the split falls in the middle."""
    if rest.startswith(b'"'):
        end = rest.index(b'" ', 1) + 1
        return _strip_prefix(unquote(rest[:end])), _strip_prefix(unquote(rest[end + 1 :]))
    middle = len(rest) // 2
    return _strip_prefix(decode_path(rest[:middle])), _strip_prefix(decode_path(rest[middle + 1 :]))


def parse_diff(data: bytes) -> list[FileDiff]:
    files: list[FileDiff] = []
    current: FileDiff | None = None
    hunk: Hunk | None = None
    lines: list[Line] = []  # the current hunk's
    old_left = new_left = 0  # lines still expected in the current hunk
    old_no = new_no = 0
    for raw in data.split(b"\n"):
        # a hunk's lines, the bulk of a diff, on the shortest path: the first byte says the kind
        if hunk is not None and (old_left > 0 or new_left > 0 or raw[:1] == b"\\"):
            first = raw[:1]
            if first == b"+":
                lines.append(Line("+", None, new_no, raw[1:].decode("utf-8", "replace")))
                new_no, new_left = new_no + 1, new_left - 1
            elif first == b"-":
                lines.append(Line("-", old_no, None, raw[1:].decode("utf-8", "replace")))
                old_no, old_left = old_no + 1, old_left - 1
            elif first == b"\\":
                lines.append(Line("\\", None, None, raw[2:].decode("utf-8", "replace")))
            elif first == b" " or not raw:  # context (an empty line in a hunk is one too)
                lines.append(Line(" ", old_no, new_no, raw[1:].decode("utf-8", "replace")))
                old_no, old_left, new_no, new_left = (
                    old_no + 1,
                    old_left - 1,
                    new_no + 1,
                    new_left - 1,
                )
            else:  # not a diff line (git writes none): kept as it is, on neither side
                lines.append(Line(decode(first), None, None, raw[1:].decode("utf-8", "replace")))
            continue
        hunk = None
        if raw.startswith(b"diff --git "):
            old_path, new_path = _header_paths(raw[len(b"diff --git ") :])
            current = FileDiff(old_path, new_path)
            files.append(current)
        elif current is None:
            continue
        elif raw.startswith(b"new file mode"):
            current.status, current.old_path = "added", None
        elif raw.startswith(b"deleted file mode"):
            current.status, current.new_path = "deleted", None
        elif raw.startswith((b"rename from ", b"copy from ")):
            current.old_path = unquote(raw.split(b" ", 2)[2])
            current.status = "renamed" if raw.startswith(b"rename") else "copied"
        elif raw.startswith((b"rename to ", b"copy to ")):
            current.new_path = unquote(raw.split(b" ", 2)[2])
        elif raw.startswith((b"Binary files ", b"GIT binary patch")):
            current.binary = True
        elif raw.startswith(b"--- "):
            current.old_path = _side_path(raw[4:])
        elif raw.startswith(b"+++ "):
            current.new_path = _side_path(raw[4:])
        elif match := HUNK_HEADER.match(raw):
            old_start, old_count, new_start, new_count, header = match.groups()
            hunk = Hunk(decode(header), int(old_start), int(new_start))
            lines = hunk.lines
            current.hunks.append(hunk)
            old_left = 1 if old_count is None else int(old_count)
            new_left = 1 if new_count is None else int(new_count)
            old_no, new_no = int(old_start), int(new_start)
    return files


def side_by_side(hunk: Hunk) -> list[tuple[Line | None, Line | None]]:
    """Rows of (old, new): context on both sides, each run of removed lines beside the added lines
    that replace it."""
    rows: list[tuple[Line | None, Line | None]] = []
    removed: list[Line] = []
    added: list[Line] = []

    def flush() -> None:
        rows.extend(zip_longest(removed, added))
        removed.clear()
        added.clear()

    for line in hunk.lines:
        if line.kind == "-":
            if added:  # a removal after additions starts a new change block
                flush()
            removed.append(line)
        elif line.kind == "+":
            added.append(line)
        else:
            flush()
            rows.append((line, line))
    flush()
    return rows
