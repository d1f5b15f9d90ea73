"""Where you left off: the last step read in each series, in a small JSON file under
$XDG_STATE_HOME."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .history import Series


def default_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(state, "build-gpt2", "walkthrough.json")


class Bookmarks:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._due: tuple[Series, int] | None = None  # a step marked, not written yet

    def mark(self, series: Series, index: int) -> None:
        """Step `index` to remember at the next `write`: a step switch marks, and writes once its
        frame is drawn (or at quit), so the file costs the switch nothing."""
        self._due = (series, index)

    def write(self) -> None:
        if self._due is not None:
            due, self._due = self._due, None
            self.remember(*due)

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):  # none yet, or unreadable: start from the first step
            return {}
        return data if isinstance(data, dict) else {}

    def recall(self, series: Series) -> int:
        """The index of the step last read: found by commit id, else by number (the series was
        rebuilt)."""
        mark = self._load().get(series.key)
        if not isinstance(mark, dict):
            return 0
        for index, step in enumerate(series.steps):
            if step.commit.sha == mark.get("sha"):
                return index
        number = mark.get("number")
        if not isinstance(number, int):
            return 0
        return min(max(number - series.steps[0].number, 0), len(series.steps) - 1)

    def remember(self, series: Series, index: int) -> None:
        step = series.steps[index]
        data = self._load()
        data[series.key] = {"sha": step.commit.sha, "number": step.number}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(data, indent=1) + "\n")
        except OSError:  # a read-only home must not stop anyone reading
            pass
