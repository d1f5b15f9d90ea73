"""The narration pane: a step's commit message as Markdown."""

from __future__ import annotations

from functools import lru_cache

from markdown_it import MarkdownIt
from textual.containers import VerticalScroll
from textual.widgets import Markdown
from textual.widgets.markdown import MarkdownBlock, MarkdownFence

# Markdown's own block classes, by the names its public table gives them: a heading of any level, a
# paragraph
HEADINGS = tuple(Markdown.BLOCKS[f"h{level}"] for level in range(1, 7))
PARAGRAPH = Markdown.BLOCKS["paragraph_open"]


class Narration(VerticalScroll):
    """The narration of the step shown: one Markdown document, refilled in place from step to step
    (see NarrationDocument), so a step switch mounts nothing but the blocks whose kind changed."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._key: object = None  # what the document shows

    @property
    def document(self) -> NarrationDocument | None:
        return next(iter(self.query_children(NarrationDocument)), None)

    async def show(self, key: object, markdown: str) -> None:
        """The narration of `key`'s step. A commit with only a subject says no more than the
        title bar: the pane steps aside."""
        markdown = markdown.strip()
        self.set_class(not markdown, "-empty")
        if not markdown:
            return
        document = self.document
        if document is None:
            await self.mount(NarrationDocument(markdown, parser_factory=_markdown_parser))
        elif key != self._key:
            await document.refill(markdown)
        self._key = key
        self.scroll_home(animate=False)

    def scroll_to_text(self, text: str) -> None:
        """Bring the first block of the document that holds `text` to the top."""
        document = self.document
        if document is None:
            return
        for block in document.children:
            if text in (getattr(block, "source", None) or ""):
                self.scroll_to_widget(block, top=True, animate=False)
                return


class NarrationDocument(Markdown):
    """A Markdown document that takes new text without being made again: a new document (or
    Markdown.update) mounts a widget per block, and mounting is most of a step switch's cost. Here
    each block keeps its widget where the new text has a block of the same kind in the same place (a
    paragraph, a code block, the same heading), which takes the new content the way Markdown.append
    refills its last block; from the first block that differs on, the old blocks go and the new ones
    are mounted. Refilling a block uses Markdown's own block methods, which are not Textual's public
    API: tests/test_walkthrough_app.py holds each refill to what a new document shows, so a Textual
    that changes them fails there, not in front of a reader."""

    async def refill(self, markdown: str) -> None:
        async with self.lock:  # as Markdown.update: one change at a time
            blocks = self._build_from_source(markdown)
            shown = [child for child in self.children if isinstance(child, MarkdownBlock)]
            self._markdown = markdown  # the source that the blocks' source ranges index
            self._table_of_contents = None
            kept = 0
            for old, new in zip(shown, blocks, strict=False):
                if not _refillable(old, new):
                    break
                old.source_range = new.source_range
                if isinstance(old, HEADINGS):  # the same text: only its place in the source moves
                    old._copy_context(new)
                else:
                    await old._update_from_block(new)
                kept += 1
            if shown[kept:]:
                await self.remove_children(shown[kept:])
            if blocks[kept:]:
                await self.mount_all(blocks[kept:])


@lru_cache(maxsize=1)
def _markdown_parser() -> MarkdownIt:
    """Markdown's own parser, made once: making one is a good part of parsing a short narration."""
    return MarkdownIt("gfm-like")


def _refillable(old: MarkdownBlock, new: MarkdownBlock) -> bool:
    """Whether `old` can show `new` as it is: a block without blocks inside it, of the same kind,
    and a heading only with the same text (its id, which links go to, is made from the text)."""
    if type(old) is not type(new) or new._blocks:
        return False
    if isinstance(old, HEADINGS):
        return old._content.plain == new._content.plain
    return isinstance(old, (PARAGRAPH, MarkdownFence))
