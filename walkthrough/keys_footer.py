"""The footer: the keys of the app's binding table, with their labels."""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer


class KeysFooter(Footer):
    """The footer, made again only when the keys it shows change, and then only when it must. Textual's own makes
    a widget per key again twice for each move of focus, though moving between the panes changes none of them;
    the `:` and `/` prompt, where every key is text, only hides the keys and shows them again: here by hiding
    their widgets."""

    _shown: tuple | None = None  # the keys shown now: (action, key, description, enabled, tooltip) each
    _made: tuple | None = None  # the keys the footer's widgets were made for
    _pending = False  # a remake is on its way

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus or not self.is_attached or screen is not self.screen or self._pending:
            return
        self._pending = True
        self.call_after_refresh(self._remake)

    def _keys(self) -> tuple:
        """What Footer.compose shows: a key per action (the first of its bindings), in the bindings' order."""
        keys: dict[str, tuple] = {}
        for _, binding, enabled, tooltip in self.screen.active_bindings.values():
            if binding.show and binding.action not in keys:
                keys[binding.action] = (binding.action, binding.key, binding.description, enabled, tooltip)
        return tuple(keys.values())

    async def _remake(self) -> None:
        self._pending = False
        shown = self._keys()
        if shown == self._shown:
            return
        self._shown = shown
        widgets = {key.action: key for key in self.query_children("FooterKey")}
        made = self._made or ()
        if tuple(widgets) == tuple(key[0] for key in made) and shown == tuple(key for key in made if key in shown):
            for action, widget in widgets.items():  # some of the keys made, as they were made
                widget.display = any(key[0] == action for key in shown)
            return
        self._made = shown
        await self.recompose()
