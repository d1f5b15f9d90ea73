"""What `r` and esc do with a step's Try-it, with no screen: the last run of each step, the run
going on, and which steps of someone else's history the user has said yes to. The reader's screen
asks `press` what a key means and draws the records kept here; nothing in this module imports
Textual, so the tests drive it directly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .history import Series
from .runner import (
    Planned,
    Record,
    Run,
    argv_here,
    describe_status,
    plan,
    runs_folder,
    verdict,
    with_stand_ins,
    worktree,
)


@dataclass(frozen=True)
class Press:
    """What `r` on a step comes to. `do`: "run" (`planned`, now), "ask" (show `argvs` and run on a
    yes) or "say" (only `text`, which may be empty; `warning` where the step has nothing to run)."""

    do: str
    planned: tuple[Planned, ...] = ()
    argvs: tuple[str, ...] = ()
    text: str = ""
    warning: bool = False


class RunControl:
    def __init__(
        self, series: Series, own_series: bool, root: Path | None = None, clock=time.monotonic
    ):
        self.series = series
        self.own_series = own_series  # this project's own series runs its Try-its without asking
        self.root = root  # where the worktrees go (None: runner.runs_folder)
        self.clock = clock
        self.records: dict[int, Record] = {}  # the last run of each step
        self.active: Run | None = None  # the run going on now
        self.current: Record | None = None  # and its record
        self.starting = False  # a run's checkout is being made
        # the step where r was pressed while another step's run went on
        self.warned_at: int | None = None
        self.confirmed: set[int] = set()  # steps whose commands the user said yes to

    def press(self, index: int) -> Press:
        """`r` on step `index`: stop the run going on (once warned, if it is another step's), or
        start this one's."""
        if self.current is not None:
            running = self.current.index
            # say what r does here before it does it
            if running != index and self.warned_at != index:
                self.warned_at = index
                number = self.series.steps[running].number
                text = (
                    f"Step {number}'s Try-it is running: r again stops it; then r runs this step's."
                )
                return Press("say", text=text)
            self.warned_at = None
            return Press("say", text=self.stop())
        if self.starting:  # the checkout is being made
            return Press("say")
        planned = tuple(plan(self.series.steps[index].narration))
        if not planned:
            return Press(
                "say",
                text="This step's narration has no Try-it block: there is nothing to run.",
                warning=True,
            )
        if self.own_series or index in self.confirmed:
            return Press("run", planned)
        argvs = [
            repr(argv_here(c.argv)) + (f"  with {c.env}" if c.env else "")
            for p in planned
            for c in p.commands
        ]
        argvs += [f"(needs a shell, not run) {p.text}" for p in planned if p.refused]
        return Press("ask", planned, tuple(argvs), f"a checkout of {self.series.steps[index].ref}")

    def confirm(self, index: int) -> None:
        self.confirmed.add(index)

    async def run(
        self,
        index: int,
        planned: tuple[Planned, ...],
        on_start: Callable[[Record], None],
        on_line: Callable[[Record, str], None],
    ) -> Record | None:
        """Run step `index`'s Try-it in its checkout, with its stand-ins if it needs the network and
        the machine is offline; None if a run is starting or going on already. on_start(record) once
        the checkout is ready, then on_line(record, line) for each line. A WalkthroughError says why
        no checkout could be made."""
        if self.current is not None or self.starting:
            return None
        self.starting = True
        narration = self.series.steps[index].narration
        try:  # git and the stand-ins on a thread: the app keeps answering keys meanwhile
            folder, new = await asyncio.to_thread(worktree, self.series, index, self.root)
            note = await asyncio.to_thread(
                with_stand_ins, narration, folder, self.root or runs_folder(self.series)
            )
        finally:
            self.starting = False
        if note:
            planned = tuple(plan(narration, stand_ins=True))
        record = Record(index, folder, new, list(planned), started=self.clock())

        def line(text: str) -> None:
            record.lines.append(text)
            on_line(record, text)

        if note:
            record.lines.append(note)
        self.records[index] = self.current = record
        run = self.active = Run(list(planned), folder, line, clock=self.clock)
        on_start(record)
        status = 1  # if the runner itself fails
        try:
            status = await run.run()
        finally:
            record.status, record.stopped, record.ended = status, run.stopped, self.clock()
            record.first_output = run.first_output
            if not record.stopped:
                record.verdict = verdict(narration, "\n".join(run.output), status)
            self.active = self.current = None
        return record

    def stop(self) -> str:
        """Stop the run going on; what to tell the user ("" when nothing runs)."""
        if self.active is None or self.current is None:
            return ""
        self.active.stop()
        return f"Stopping the run of step {self.series.steps[self.current.index].number}."

    def close(self) -> None:
        """The reader is closing: no process outlives it."""
        if self.active is not None:
            self.active.kill()

    def head(self, record: Record) -> str:
        checkout = (
            "a new checkout"
            if record.new_checkout
            else "its checkout, put back to the step's files"
        )
        return f"Try-it of {self.series.steps[record.index].ref}, in {checkout}: {record.folder}"

    def foot(self, record: Record) -> str:
        seconds = f"{record.seconds(self.clock()):.1f} s"
        if record.running:
            return f"running · {seconds} · r or esc stops it"
        parts = ["stopped" if record.stopped else describe_status(record.status), seconds]
        if record.verdict:
            parts.append(record.verdict)
        return " · ".join(parts) + " · r runs it again, esc shows the diff"
