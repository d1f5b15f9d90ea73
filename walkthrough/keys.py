"""The reader's keys, in one table: the footer shows their labels, the help screen their help, and
the reader's screen turns each into a Textual binding. No Textual here: the table is data, tested as
such."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    """A row of the table, in the words of Textual's Binding: `Binding(**asdict(key))` makes one."""

    key: str  # Textual's key names, comma-separated: the first is the one shown
    action: str  # the screen's action_NAME, or app.NAME
    description: str  # its label in the footer
    tooltip: str  # its line in the help screen
    id: str  # a name to remap the key by
    priority: bool = False  # handled as it arrives, before the widget with focus sees it
    show: bool = True  # in the footer (the help screen lists every key)


# A key's place is its importance: a narrow footer shows as many as fit, whole, from the top. `?`
# leads, so the help screen (every key, in this order) is always one key away.
KEYS = (
    Key("question_mark", "app.help", "Help", "this help", "help"),
    Key("q", "app.quit", "Quit", "quit (the step you are on is remembered)", "quit"),
    Key("n,right", "next_step", "Next", "next step", "next_step"),
    Key("p,left", "previous_step", "Prev", "previous step", "previous_step"),
    Key("g", "go_to_end(0)", "First", "first step", "first_step", show=False),
    Key("G", "go_to_end(-1)", "Last", "last step", "last_step", show=False),
    Key("colon", "jump", "Jump", "jump to a step by its number", "jump", priority=True),
    Key(
        "slash",
        "search",
        "Search",
        "search the narration and diffs of all steps",
        "search",
        priority=True,
    ),
    Key("N", "move_match(1)", "Next match", "next search match", "next_match", show=False),
    Key("P", "move_match(-1)", "Prev match", "previous search match", "previous_match", show=False),
    Key(
        "tab",
        "app.focus_next",
        "Focus",
        "move focus: steps, narration, files, diff",
        "focus",
        show=False,
    ),
    Key("s", "toggle_split", "Split", "unified or side-by-side diff", "toggle_split"),
    Key(
        "f",
        "toggle_file",
        "File",
        "the whole file at this step, or back to the diff",
        "toggle_file",
    ),
    Key(
        "r",
        "run",
        "Run",
        "run this step's Try-it in a checkout of the step; again to stop it",
        "run",
    ),
    Key("escape", "stop", "Stop", "stop the run, or back to the diff", "stop", show=False),
    Key("z", "zoom", "Zoom", "the diff (or run) at full width, and back", "zoom"),
    Key(
        "shift+left", "scroll_diff(-8)", "Scroll", "scroll the diff left", "scroll_left", show=False
    ),
    Key("shift+right", "scroll_diff(8)", "", "scroll the diff right", "scroll_right", show=False),
    Key(
        "c",
        "copy_checkout",
        "Copy",
        "copy `git -C HISTORY checkout` for this step",
        "copy_checkout",
    ),
    Key("y", "copy_try_it", "Copy Try-it", "copy this step's Try-it command", "copy_try_it"),
    Key(
        "x",
        "exercise",
        "Exercise",
        "copy the command that makes this step an exercise: rebuild it yourself, then --check",
        "exercise",
    ),
    Key("e", "edit", "Edit", "open the file at this step in $EDITOR (a copy)", "edit"),
    Key("S", "app.screenshot", "Screenshot", "save the screen as an SVG file", "screenshot"),
)


def fitting(widths: list[int], room: int) -> int:
    """How many keys, from the first, fit in `room` columns: a key is shown whole or not at all."""
    used = 0
    for count, width in enumerate(widths):
        used += width
        if used > room:
            return count
    return len(widths)
