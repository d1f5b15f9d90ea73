"""The line at the bottom where `:` takes a step number and `/` a search."""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message
from textual.widgets import Input


class Prompt(Input):
    """One line at the bottom for a search or a step number; the app says what it is for."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", show=False)]

    class Cancelled(Message):
        pass

    purpose = ""

    def ask(self, purpose: str, placeholder: str) -> None:
        self.purpose, self.placeholder, self.value = purpose, placeholder, ""
        self.display = True
        self.screen.set_focus(self)  # now, not after the queue (focus() waits): keys typed fast land here

    def action_cancel(self) -> None:
        self.post_message(self.Cancelled())
