"""Garbage collection kept out of a step switch's frame: a collection in the middle of one costs
tens of milliseconds. No Textual here."""

from __future__ import annotations

import gc
from collections.abc import Callable


def freeze() -> None:
    """What exists now (Textual, the series) lives as long as the reader: frozen, the collector
    does not walk it all again on every collection."""
    gc.freeze()


def hold(until: Callable[[Callable[[], None]], object]) -> None:
    """No collection until `until` calls back (after the switch's frame is drawn)."""
    if gc.isenabled():  # a switch in the middle of another is held already
        gc.disable()
        until(gc.enable)


def thaw() -> None:
    """The reader is done: its objects can be collected again, and collection is on."""
    gc.unfreeze()
    gc.enable()
