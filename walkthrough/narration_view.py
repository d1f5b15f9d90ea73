"""The narration pane: a step's commit message as Markdown."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from functools import lru_cache

from markdown_it import MarkdownIt
from textual.containers import VerticalScroll
from textual.widgets import Markdown


class Narration(VerticalScroll):
    """The narration of the step shown: a Markdown document per step. Mounting a document's blocks
    (a widget each) is most of a step switch's cost, so the documents of the steps next to the one
    shown are made while it is read (see prepare), hidden, and a step switch onto one of them only
    shows it and hides the other. A step nothing made ready (a far jump) has the document shown take
    its text with Markdown.update. Textual's public API only: a test holds walkthrough/ to that."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._key: object = None  # the step shown
        self._documents: dict[object, Markdown] = {}  # by step: the one shown, those made ready
        self._changing = asyncio.Lock()  # show and prepare, one at a time

    @property
    def document(self) -> Markdown | None:
        """The document shown (the last one shown while the pane steps aside)."""
        return self._documents.get(self._key)

    async def show(self, key: object, markdown: str) -> None:
        """The narration of `key`'s step. A commit with only a subject says no more than the
        title bar: the pane steps aside."""
        markdown = markdown.strip()
        self.set_class(not markdown, "-empty")
        if not markdown:
            return
        async with self._changing:
            shown = self.document
            document = self._documents.get(key)
            if document is None and shown is not None:  # none made ready: the shown one changes
                document = self._documents[key] = self._documents.pop(self._key)
            if document is None:
                document = self._documents[key] = _document(markdown)
                await self.mount(document)
            elif document.source != markdown:
                await document.update(markdown)
            if shown is not document:
                if shown is not None:
                    shown.display = False
                document.display = True
            self._key = key
        self.scroll_home(animate=False)

    async def prepare(self, steps: Mapping[object, str]) -> None:
        """Make the documents of `steps` (each step's narration by its key), hidden, while the step
        shown is read; those made before for other steps go."""
        async with self._changing:
            for key in [key for key in self._documents if key != self._key and key not in steps]:
                await self._documents.pop(key).remove()
            for key, markdown in steps.items():
                markdown = markdown.strip()
                if markdown and key not in self._documents:
                    document = _document(markdown)
                    document.display = False
                    await self.mount(document)  # and its blocks: Markdown mounts them on mount
                    self._documents[key] = document

    def scroll_to_text(self, text: str) -> None:
        """Bring the first block of the document that holds `text` to the top."""
        document = self.document
        if document is None:
            return
        for block in document.children:
            if text in (getattr(block, "source", None) or ""):
                self.scroll_to_widget(block, top=True, animate=False)
                return


def _document(markdown: str) -> Markdown:
    return Markdown(markdown, parser_factory=_markdown_parser)


@lru_cache(maxsize=1)
def _markdown_parser() -> MarkdownIt:
    """Markdown's own parser, made once: making one is a good part of parsing a short narration."""
    return MarkdownIt("gfm-like")
