"""`e`: the file as it is at a step, as a read-only copy for the user's $EDITOR (editing the past
changes nothing). No Textual here: the reader's screen hands the terminal over and back."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .diff import shown
from .errors import WalkthroughError
from .history import Series

# editors that open a file at a line with +N before its name
LINE_EDITORS = {
    *("vi", "vim", "nvim", "view", "nano", "emacs", "emacsclient"),
    *("micro", "kak", "joe", "ne", "mg"),
}


@dataclass(frozen=True)
class Edit:
    argv: list[str]  # the editor, at the line in view where it takes one, on the copy
    folder: Path  # the copy's own folder: removed once the editor returns
    copy: Path


def editor_command() -> list[str]:
    """$VISUAL or $EDITOR as an argument list; [] when neither is set (or has an unclosed quote)."""
    try:
        return shlex.split(os.environ.get("VISUAL") or os.environ.get("EDITOR") or "")
    except ValueError:
        return []


def line_argument(editor: list[str], line: int | None) -> list[str]:
    """`+N` for editors that take it."""
    if line is None or Path(editor[0]).name not in LINE_EDITORS:
        return []
    return [f"+{line}"]


class Copies:
    """The copies `e` writes, in one folder made on first use and removed by `remove`."""

    def __init__(self):
        self.root: Path | None = None

    def write(self, ref: str, path: str, data: bytes) -> tuple[Path, Path]:
        """(a new folder, in it a read-only copy of `path` as `data`, in a folder named for the
        step)."""
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="walkthrough-"))
        folder = Path(tempfile.mkdtemp(dir=self.root))
        step = folder / ref.replace("/", "-")
        copy = step / path
        # a crafted tree entry like ../x: keep the name, not the climb
        if not copy.resolve().is_relative_to(step.resolve()):
            copy = step / Path(path).name
        copy.parent.mkdir(parents=True)
        copy.write_bytes(data)
        copy.chmod(0o444)
        return folder, copy

    def remove(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


def prepare_edit(
    series: Series,
    index: int,
    path: str | None,
    copies: Copies,
    line: int | None,
) -> Edit | str:
    """What `e` opens at step `index`: the editor on a copy of `path`, at `line`; or why not."""
    editor = editor_command()
    if not editor:
        return "Set $EDITOR (or $VISUAL) to a command to open files."
    if path is None:
        return "This step changes no files."
    try:
        data = series.file_at(index, path)
    except WalkthroughError as error:  # a submodule, or a history rebuilt under the reader
        return str(error)
    if data is None:
        return f"{shown(path)} is deleted at this step."
    try:
        folder, copy = copies.write(series.steps[index].ref, path, data)
    except OSError as error:
        return f"Could not write a copy of {shown(path)}: {error}"
    return Edit([*editor, *line_argument(editor, line), str(copy)], folder, copy)


def run_editor(argv: list[str]) -> str:
    """Run the editor in this terminal and wait for it; why it could not start, or "". Nothing is
    raised: the caller has handed the terminal over, and an exception would skip taking it back."""
    try:
        subprocess.run(argv, check=False)
    except OSError as error:  # not found, a folder, not executable
        return f"Could not start the editor {argv[0]!r}: {error.strerror or error}"
    return ""
