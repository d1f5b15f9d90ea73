"""What `r` and esc do without the app: RunControl on a built series, driven by asyncio alone."""

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from walkthrough.history import load_series
from walkthrough.patches import HISTORY_RANGE, build
from walkthrough.run_control import Press, RunControl
from walkthrough.runner import Run, plan
from walkthrough_fixtures import RUN_STEPS, write_series


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    write_series(root / "steps", RUN_STEPS)
    build(root / "steps", root / "history")
    return load_series(root / "history", HISTORY_RANGE)


def control(series, tmp_path: Path, own: bool = True) -> RunControl:
    return RunControl(series, own, root=tmp_path / "runs", clock=lambda: 100.0)


class Seen:
    """What the callbacks saw, in order: ("start", step) once the checkout is ready, then
    ("line", text) for each line."""

    def __init__(self):
        self.events: list[tuple[str, object]] = []

    def start(self, record) -> None:
        self.events.append(("start", record.index))

    def line(self, record, text: str) -> None:
        self.events.append(("line", text))


async def until(condition, what: str, seconds: float = 60) -> None:
    """Let the loop work until `condition()` holds (a deadline against a hang, not a timing)."""
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def test_a_run_keeps_its_record_and_says_how_it_ended(series, tmp_path):
    runs, seen = control(series, tmp_path), Seen()
    press = runs.press(0)
    assert press.do == "run" and [p.text for p in press.planned] == ["python show.py hello"]
    record = asyncio.run(runs.run(0, press.planned, seen.start, seen.line))
    assert runs.records == {0: record} and runs.active is None and runs.current is None
    output = ["show.py says: hello", "GREETING is unset", "runs in this checkout: 1"]
    assert record.lines == ["$ python show.py hello", *output]
    # the panel first
    assert seen.events == [("start", 0), *(("line", line) for line in record.lines)]
    assert (
        runs.head(record)
        == f"Try-it of step-01, in a new checkout: {tmp_path / 'runs' / 'step-01'}"
    )
    foot = "exit 0 · 0.0 s · matches What you should see · r runs it again, esc shows the diff"
    assert runs.foot(record) == foot
    again = asyncio.run(runs.run(0, press.planned, seen.start, seen.line))
    assert runs.head(again).startswith(
        "Try-it of step-01, in its checkout, put back to the step's files"
    )
    assert again.lines[-1] == "runs in this checkout: 1" and runs.records == {0: again}


def test_a_run_shows_python_as_typed_and_runs_the_readers_interpreter(tmp_path, monkeypatch):
    """The pane says `python`, as the learner types it; what runs is the interpreter the reader runs
    in (its venv's), also where the PATH the reader was started with finds another `python` first,
    or none."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a venv not activated
    narration = "**Try it**\n\n```bash\npython -c 'import sys; print(sys.executable)'\n```\n"
    lines: list[str] = []
    status = asyncio.run(Run(plan(narration), tmp_path, lines.append).run())
    assert status == 0 and lines == [
        "$ python -c 'import sys; print(sys.executable)'",
        sys.executable,
    ]


def test_a_failing_run_has_its_status_and_no_verdict(series, tmp_path):
    runs = control(series, tmp_path)
    record = asyncio.run(
        runs.run(2, runs.press(2).planned, lambda record: None, lambda record, line: None)
    )
    assert record.status == 3 and record.verdict == ""  # it promised exit 0: nothing to compare
    assert runs.foot(record) == "exit 3 · 0.0 s · r runs it again, esc shows the diff"


def start_long_run(runs: RunControl) -> asyncio.Future:
    """Step 2's Try-it (it waits ten minutes, with a child) going on in the background."""
    return asyncio.ensure_future(
        runs.run(1, runs.press(1).planned, lambda r: None, lambda r, line: None)
    )


def test_r_elsewhere_says_what_it_does_then_stops_the_run(series, tmp_path):
    runs = control(series, tmp_path)

    async def scenario():
        running = start_long_run(runs)
        await asyncio.sleep(0)  # the run's first step: its checkout is made on a thread
        # the checkout is being made: r does nothing yet
        assert runs.starting and runs.press(1) == Press("say")
        await until(
            lambda: runs.current is not None and runs.current.lines[1:], "the long run prints"
        )
        warned = runs.press(0)  # r on step 1 while step 2 runs: a word, nothing stopped
        assert (
            warned.text == "Step 2's Try-it is running: r again stops it; then r runs this step's."
        )
        assert warned.do == "say" and runs.current.running
        assert runs.press(0) == Press("say", text="Stopping the run of step 2.")  # as announced
        record = await running
        assert (
            record.stopped and runs.foot(record).startswith("stopped · ") and record.verdict == ""
        )
        assert runs.press(0).do == "run"  # the run is over: r runs this step's

    asyncio.run(scenario())


def test_esc_stops_the_run_and_closing_kills_it(series, tmp_path):
    runs = control(series, tmp_path)

    async def scenario():
        assert runs.stop() == ""  # nothing runs: esc has nothing to stop
        running = start_long_run(runs)
        await until(
            lambda: runs.current is not None and runs.current.lines[1:], "the long run prints"
        )
        assert runs.stop() == "Stopping the run of step 2."
        assert (await running).stopped
        running = start_long_run(runs)
        await until(
            lambda: runs.current is not None and runs.current.lines[1:], "the long run prints"
        )
        runs.close()  # the reader quits: SIGKILL, no grace
        assert (await running).status == -signal.SIGKILL

    asyncio.run(scenario())


def test_another_history_asks_once_per_step_and_a_step_without_try_it_says_so(series, tmp_path):
    runs = control(series, tmp_path, own=False)
    asked = runs.press(0)
    assert asked.do == "ask" and asked.text == "a checkout of step-01"
    assert asked.argvs == (repr([sys.executable, "show.py", "hello"]),)
    runs.confirm(0)
    assert runs.press(0).do == "run" and runs.press(2).do == "ask"  # yes was for step 1 only
    shell = runs.press(3)  # its second line needs a shell: listed, marked as not run
    assert "(needs a shell, not run) python show.py x; touch marker" in shell.argvs
    assert "  with {'GREETING': 'hi'}" in " ".join(shell.argvs)
    write_series(tmp_path / "steps", [("Plain", "Nothing to try here.", {"a.txt": "a\n"})])
    build(tmp_path / "steps", tmp_path / "history")
    plain = control(load_series(tmp_path / "history", HISTORY_RANGE), tmp_path)
    text = "This step's narration has no Try-it block: there is nothing to run."
    assert plain.press(0) == Press("say", text=text, warning=True)
