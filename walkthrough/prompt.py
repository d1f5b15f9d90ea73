"""The line at the bottom where `:` takes a step number and `/` a search."""

from __future__ import annotations

from textual import on
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Input


class Prompt(Input):
    """One line at the bottom for a search or a step number; the screen says what it is for. Enter
    or esc closes it, and focus goes back to where it was."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", show=False)]

    purpose = ""
    _before: Widget | None = None  # what had focus when the prompt opened

    def ask(self, purpose: str, placeholder: str) -> None:
        self.purpose, self.placeholder, self.value = purpose, placeholder, ""
        self._before = self.screen.focused
        self.display = True
        self.screen.set_focus(self)  # now, not after the queue (focus() waits): fast keys land here

    @on(Input.Submitted)  # closed before the screen reads what was typed, as the message bubbles up
    def close(self) -> None:
        self.display = False
        self.screen.set_focus(self._before)

    def action_cancel(self) -> None:
        self.close()
