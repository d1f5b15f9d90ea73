"""`?`: the keys, from the reader's binding table."""

from __future__ import annotations

import textwrap

from rich.cells import cell_len
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

NBSP = "\u00a0"


class HelpScreen(ModalScreen[None]):
    """The keys, as a binding table lists them."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, bindings: list[Binding]):
        super().__init__()
        self.bindings = bindings

    def compose(self) -> ComposeResult:
        rows = key_rows(self.app, self.bindings)
        # cells, not characters: an arrow can take two
        width = max(cell_len(keys) for keys, _ in rows)
        # each description wraps under itself, inside the box's 90% of the screen (its border,
        # padding and scrollbar); indents are no-break spaces, which a line's wrapping keeps
        room = max(20, int(0.9 * self.app.size.width) - 8 - width - 2)
        lines = []
        for keys, text in rows:
            first, *more = textwrap.wrap(text, room) or [""]
            pad = NBSP * (width - cell_len(keys))
            lines.append(Content.assemble(pad, (keys, "bold $accent"), NBSP * 2 + first))
            lines += [Content(NBSP * (width + 2) + line) for line in more]
        # the box's 90% of the screen less its border and the title's and the hint's two lines each
        scrolls = len(lines) > int(0.9 * self.app.size.height) - 6
        with VerticalScroll(id="help"):
            yield Static("Keys", id="help-title")
            yield Static(Content("\n").join(lines), id="help-keys")
            yield Static(
                "esc, q or ? closes this" + (" · ↑ ↓ scroll" if scrolls else ""), id="help-hint"
            )


def key_rows(app: App, bindings: list[Binding]) -> list[tuple[str, str]]:
    """(keys, what they do) for each action in a binding table, in table order."""
    rows: dict[str, tuple[list[str], str]] = {}
    for binding in Binding.make_bindings(bindings):
        keys, _ = rows.setdefault(binding.action, ([], binding.tooltip or binding.description))
        keys.append(app.get_key_display(binding))
    return [(" ".join(keys), text) for keys, text in rows.values()]
