"""Each step's files, read ahead: git and the diff parser run on two threads of their own while the
reader fills in a step's narration, or while a step number is still being typed. No Textual here."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor, wait

from .diff import FileDiff
from .errors import WalkthroughError
from .history import Match, Series


class StepFiles:
    def __init__(self, series: Series):
        self.series = series
        # git runs in a process of its own: two reads at a time keep a step switch from waiting on
        # the one before
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="walkthrough-diff")
        self._loads: dict[int, Future] = {}
        self._read: set[int] = set()  # steps Series.files has read (or failed to)

    def of(self, index: int) -> list[FileDiff]:
        """The step's files; none, and the reason kept in Series.errors for the diff pane, where git
        cannot read them (a missing object in a partial or damaged clone): one bad step does not
        stop the reader."""
        loading = self._loads.pop(index, None)
        if loading is not None:  # being read: wait for it rather than read the step twice
            wait([loading])
        self._read.add(index)
        try:
            return self.series.files(index)
        except WalkthroughError:
            return []

    def load(self, index: int) -> Future | None:
        """Start reading step `index` on a thread, unless it has been read (None) or is on its way.
        Series.files keeps what it read, and `of` waits for a read in progress, so a step is only
        read once."""
        if index in self._read:
            return None
        loading = self._loads.get(index)
        if loading is None:
            loading = self._loads[index] = self._pool.submit(self.series.files, index)
        return loading

    async def ready(self, indices: list[int]) -> list[list[FileDiff]]:
        """The steps' files, once read: the event loop goes on meanwhile."""
        loading = [future for future in map(self.load, indices) if future is not None]
        if loading:
            await asyncio.wait([asyncio.wrap_future(future) for future in loading])
        return [self.of(index) for index in indices]

    def search(self, text: str) -> list[Match]:
        """Series.search, which reads every step's files itself: once the reads in progress end."""
        for index in list(self._loads):
            self.of(index)
        return self.series.search(text)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
