"""The files a step touches, with how many lines each gains and loses."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from .diff import FileDiff
from .rows import STATUS_MARK


class FileList(OptionList):
    """The files a step touches, when there is more than one."""

    def show_files(self, files: list[FileDiff]) -> None:
        self.set_options(
            Option(
                Content.assemble(
                    f"{STATUS_MARK[f.status]} {f.label} ", (f"+{f.added} −{f.removed}", "dim")
                )
            )
            for f in files
        )
