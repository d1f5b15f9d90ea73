"""Copying a command for the user: a clipboard program where one can reach a clipboard, and words
that say where the text went. The app also sends the text to the terminal (OSC 52), which may drop
it without a word."""

from __future__ import annotations

import os
import shutil
import subprocess

TOOLS = (
    ("pbcopy",),
    ("wl-copy",),
    ("xclip", "-selection", "clipboard"),
    ("xsel", "--clipboard", "-i"),
)


def copy_with_a_tool(text: str) -> str | None:
    """The name of the clipboard program that took `text`, or None."""
    tool = next((t for t in TOOLS if _usable(t[0]) and shutil.which(t[0])), None)
    if tool is None:
        return None
    try:
        done = (
            subprocess.run(list(tool), input=text.encode(), timeout=2, check=False).returncode == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return tool[0] if done else None


def where_it_went(tool: str | None) -> str:
    if tool is not None:
        return f"Copied with {tool}"
    if os.environ.get("TMUX"):  # tmux drops OSC 52 unless told otherwise
        return "Sent to the terminal's clipboard (in tmux only with `set -g set-clipboard on`)"
    return "Sent to the terminal's clipboard (if it accepts OSC 52)"


def _usable(tool: str) -> bool:
    """A clipboard program that can reach a clipboard here (X and Wayland tools need a display)."""
    if tool in ("xclip", "xsel"):
        return bool(os.environ.get("DISPLAY"))
    if tool == "wl-copy":
        return bool(os.environ.get("WAYLAND_DISPLAY"))
    return True
