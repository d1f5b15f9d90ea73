"""The title bar: the step's number and title, and on the right how it is shown."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Static


class TitleBar(Horizontal):
    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield Static(id="status")

    def show(self, title: str, status: str) -> None:
        # Content, not markup: a step's title is the author's text, brackets and all
        self.query_one("#title", Static).update(Content(title))
        self.query_one("#status", Static).update(Content(status))
