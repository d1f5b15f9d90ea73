"""`walkthrough serve` in a real browser: Debian's chromium, headless, driven by playwright, reading
what the page's terminal shows after the keys a user presses."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from walkthrough.cli import main
from walkthrough_fixtures import RUN_STEPS, write_series

CHROMIUM = shutil.which("chromium")

# a bound for a hang on a busy machine, never a measure: the page usually answers in seconds
WAIT_MS = 120_000
SIZE = {"width": 1400, "height": 800}

# textual-serve's page keeps its xterm.js terminal in a `terminal` property of an object of its own,
# not on window. A setter on Object.prototype catches that assignment and hands the terminal to the
# test, which then reads the screen through xterm.js's public buffer API: the text the browser
# shows, whatever renders it (WebGL or canvas).
CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, "terminal", {
    configurable: true,
    set(value) {
        Object.defineProperty(
            this, "terminal", {value, writable: true, configurable: true, enumerable: true}
        );
        window.caughtTerminal = value;
    },
});
"""
SCREEN_TEXT = """() => {
    const terminal = window.caughtTerminal;
    if (!terminal) return "";
    const buffer = terminal.buffer.active, lines = [];
    for (let y = 0; y < terminal.rows; y++) {
        lines.push(buffer.getLine(buffer.viewportY + y).translateToString(true));
    }
    return lines.join("\\n");
}"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("served")
    write_series(root / "steps", RUN_STEPS)
    return root


@pytest.fixture
def server(project, tmp_path):
    """`walkthrough --project DIR serve --port PORT`, in a process group of its own (the readers it
    starts for each tab are in it too); its URL once it listens. Ended, group and all, however the
    test ends."""
    port = free_port()
    # no bookmark of the user's: step 1 first
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    command = [
        sys.executable,
        "-m",
        "walkthrough",
        "--project",
        str(project),
        "serve",
        "--port",
        str(port),
    ]
    log = open(tmp_path / "serve.log", "w+")
    process = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + WAIT_MS / 1000
        while not listening(port):
            log.seek(0)
            assert process.poll() is None, f"walkthrough serve exited: {log.read()}"
            assert time.monotonic() < deadline, f"walkthrough serve is not listening: {log.read()}"
            time.sleep(0.2)
        yield f"http://localhost:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        log.close()
        # SIGKILL sent, maybe not yet acted on: a bound for a hang, not a timing
        gone = time.monotonic() + 30
        while group_alive(process.pid) and time.monotonic() < gone:
            time.sleep(0.1)
        assert not group_alive(process.pid), "a process of walkthrough serve outlived it"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def screen_shows(page, *texts: str) -> None:
    """Wait (up to WAIT_MS) until the page's terminal shows every one of `texts`."""
    wanted = " && ".join(f"text.includes({text!r})" for text in texts)
    # polled on a timer: the default, every animation frame, is not kept up by a headless page
    shows = f"() => {{ const text = ({SCREEN_TEXT})(); return {wanted}; }}"
    page.wait_for_function(shows, polling=250, timeout=WAIT_MS)


def test_without_textual_serve_one_line_names_the_extra(project, monkeypatch, capsys):
    # what an import of a missing package meets
    monkeypatch.setitem(sys.modules, "textual_serve.server", None)
    assert main(["--project", str(project), "serve"]) == 1
    assert capsys.readouterr().err == (
        "walkthrough: error: walkthrough serve needs textual-serve: pip install -e '.[serve]'\n"
    )


# CI installs chromium (.ci/run): there, a missing one fails instead
@pytest.mark.skipif(
    CHROMIUM is None and "CI" not in os.environ, reason="no chromium: apt-get install -y chromium"
)
def test_the_served_reader_in_chromium(server):
    """The page shows step 1, n and p move between steps, and r runs a step's Try-it to its end."""
    from playwright.sync_api import sync_playwright  # the [dev] extra

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport=SIZE)
            page.add_init_script(CATCH_TERMINAL)
            # offline: its own font
            page.route("https://fonts.googleapis.com/**", lambda route: route.abort())
            page.goto(server, timeout=WAIT_MS)
            screen_shows(page, "Step 1/4 · A script that talks", '+ print("show.py says:"')
            # where xterm.js takes keys, as a user's first click would
            page.focus(".xterm-helper-textarea")
            page.keyboard.press("n")
            screen_shows(page, "Step 2/4 · Part II · A long wait", "+ time.sleep(600)")
            page.keyboard.press("p")
            screen_shows(page, "Step 1/4 · A script that talks")
            page.keyboard.press("r")
            screen_shows(page, "Run commands from this history?")
            page.keyboard.press("Enter")
            # the run's end, as the terminal reader shows it: its status, and how its output
            # compares with the narration's
            screen_shows(page, "exit 0", "matches What you should see")
        finally:
            browser.close()
