"""`e`: the file as it is at a step, as a read-only copy for the user's $EDITOR (editing the past changes nothing).
No Textual here: the app hands the terminal over and back."""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from pathlib import Path

# editors that open a file at a line with +N before its name
LINE_EDITORS = {"vi", "vim", "nvim", "view", "nano", "emacs", "emacsclient", "micro", "kak", "joe", "ne", "mg"}


def editor_command() -> list[str]:
    """$VISUAL or $EDITOR as an argument list; [] when neither is set (or one has an unclosed quote)."""
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
        """(a new folder, in it a read-only copy of `path` as `data`, under a folder named for the step)."""
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="walkthrough-"))
        folder = Path(tempfile.mkdtemp(dir=self.root))
        step = folder / ref.replace("/", "-")
        copy = step / path
        if not copy.resolve().is_relative_to(step.resolve()):  # a crafted tree entry like ../x: keep the name
            copy = step / Path(path).name
        copy.parent.mkdir(parents=True)
        copy.write_bytes(data)
        copy.chmod(0o444)
        return folder, copy

    def remove(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
