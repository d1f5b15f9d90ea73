"""The footer: the keys of the app's binding table, with their labels, as many as fit whole."""

from __future__ import annotations

from rich.cells import cell_len
from textual.widgets import Footer

from .keys import fitting


class KeysFooter(Footer):
    """The footer, made again only when the keys it shows change, and then only when it must.
    Textual's own makes a widget per key again twice for each move of focus, though moving between
    the panes changes none of them; the `:` and `/` prompt, where every key is text, only hides the
    keys and shows them again: here by hiding their widgets. Where the screen is too narrow for them
    all, the last keys are hidden whole, never cut mid-label: the first, `?`, lists them all."""

    _shown: tuple | None = None  # the keys shown now: (action, key, label, enabled, tooltip) each
    _made: tuple | None = None  # the keys the footer's widgets were made for
    _pending = False  # a remake is on its way

    async def recompose(self) -> None:
        """Footer asks for this after every change of the screen's bindings (each move of focus):
        the keys are made again only when those shown change."""
        await self._remake()

    def on_resize(self) -> None:
        self._remake_soon()

    def _remake_soon(self) -> None:
        if not self._pending:
            self._pending = True
            self.call_after_refresh(self._remake)

    def _keys(self) -> tuple:
        """What Footer.compose shows: a key per action (the first of its bindings), in the bindings'
        order."""
        keys: dict[str, tuple] = {}
        for _, binding, enabled, tooltip in self.screen.active_bindings.values():
            if binding.show and binding.action not in keys:
                key = self.app.get_key_display(binding)
                keys[binding.action] = (binding.action, key, binding.description, enabled, tooltip)
        return tuple(keys.values())

    def _fitting(self, keys: tuple) -> tuple:
        """The first keys that fit the footer's width, each as the compact footer draws it: the key,
        a space, the label, a space."""
        widths = [cell_len(key) + 1 + cell_len(label) + 1 for _, key, label, _, _ in keys]
        return keys[: fitting(widths, self.size.width)]

    async def _remake(self) -> None:
        self._pending = False
        keys = self._keys()
        shown = self._fitting(keys)
        if shown == self._shown:
            return
        self._shown = shown
        made = self._made or ()
        actions = tuple(key.action for key in self.query_children("FooterKey"))
        # widgets for all the keys, made again only when those shown now are not some of those made
        some_made = shown == tuple(key for key in made if key in shown)
        if actions != tuple(key[0] for key in made) or not some_made:
            self._made = keys
            await super().recompose()
        for widget in self.query_children("FooterKey"):
            widget.display = any(key[0] == widget.action for key in shown)
