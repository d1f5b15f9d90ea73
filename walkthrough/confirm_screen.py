"""Asked before a command from someone else's history runs."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmRun(ModalScreen[bool]):
    """Before a command from someone else's history runs: the exact argument lists, yes or no."""

    BINDINGS = [
        Binding("enter", "answer(True)", "Run"),
        Binding("escape,n", "answer(False)", "Don't run"),
    ]

    def __init__(self, where: str, argvs: list[str]):
        super().__init__()
        self.where, self.argvs = where, argvs

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="confirm"):
            yield Static("Run commands from this history?", id="confirm-title")
            yield Static(
                "They come from the commit message of a repository that is not this project's "
                f"own series: code from whoever wrote it. In {self.where}, as these argument lists "
                "(no shell):",
                markup=False,
            )
            yield Static("\n".join(self.argvs), id="confirm-argv", markup=False)
            yield Static("enter runs them, esc or n does not", id="confirm-hint")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
