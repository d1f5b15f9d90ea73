"""How fast is the walkthrough? Builds a 30-step series (steps 2 and 30 add a 2,000-line file), then
runs the reader in a pseudo-terminal, as a user would, and times what they wait for. Prints our
figures beside the straightforward way and the issue's targets.

    python benchmarks/bench_walkthrough.py

Figures: build (ours: git apply + commit-tree with fixed dates; plain `git am`, which is not
deterministic), rebuild when up to date, time to first paint (process start -> first frame showing
step 1), step switches onto a 2,000-line diff (key -> frame showing the new step: with n after
reading the previous step, which the reader uses to make the next one ready; again once seen; with G
to the last step, which nothing made ready, and with `:N` Enter to far steps, timed from the `:`:
the reader starts reading step N's diff once N is typed, inside the time measured), highlighting
that diff (the lazy first screenful vs all of it at once), and the reader's peak memory.
"""

from __future__ import annotations

import fcntl
import os
import pty
import resource
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the package, and the tests' write_series

from textual.highlight import highlight  # noqa: E402

from walkthrough.diff_view import Code  # noqa: E402
from walkthrough.gitcmd import ISOLATED  # noqa: E402
from walkthrough.patches import build  # noqa: E402
from walkthrough_fixtures import write_series  # noqa: E402

STEPS = 30
BIG = 2_000  # lines in the big step's diff
SIZE = (160, 48)
COLD = (24, 26, 28)  # far steps reached with `:` after G, never shown or made ready before
# steps that add a 2,000-line file: 2 is reached with n, the last with G
BIG_STEPS = (2, *COLD, STEPS)
# seconds a reader spends on a step before the next key (the reader prepares the next step then)
READING = 0.5


def big_file() -> str:
    lines = []
    for i in range(BIG // 4):
        lines += [
            f"def layer_{i}(x, w):",
            f'    """Layer {i}: scale, shift, squash."""',
            f"    y = x @ w[{i}] + {i} * 0.5",
            "    return torch.tanh(y)",
        ]
    return "\n".join(lines) + "\n"


def series_steps() -> list:
    steps = []
    for n in range(1, STEPS + 1):
        body = "".join(f"print('step {k}')\n" for k in range(n))
        files = {"train_gpt2.py": body}
        if n in BIG_STEPS:
            files[f"layers_{n}.py"] = big_file()
        narration = (
            f"Step {n} adds one line.\n\n## Try it\n\n```bash\npython train_gpt2.py\n```\n\n"
            f"## What you should see\n\n{n} lines."
        )
        steps.append((f"Part {n}", narration, files))
    return steps


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def git_am(steps_dir: Path, into: Path) -> None:
    env = {
        **os.environ,
        **ISOLATED,
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@b",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@b",
    }
    subprocess.run(["git", "init", "-q", "-b", "main", str(into)], check=True, env=env)
    subprocess.run(
        ["git", "commit", "-q", "--allow-empty", "-m", "start"], cwd=into, check=True, env=env
    )
    subprocess.run(
        ["git", "am", "-q", "-k", *sorted(map(str, steps_dir.glob("*.patch")))],
        cwd=into,
        check=True,
        env=env,
    )


class Terminal:
    """The reader in a pseudo-terminal: send keys, wait for text to be drawn."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.start = time.perf_counter()
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become the reader
            os.execvpe(argv[0], argv, env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
        self.screen = b""

    def wait_for(self, text: str, timeout: float = 30) -> None:
        """Read the terminal until `text` has been drawn (a frame is written in one go, title row
        first)."""
        start, seen = time.perf_counter(), len(self.screen)
        while time.perf_counter() - start < timeout:
            if select.select([self.fd], [], [], 0.5)[0]:
                self.screen += os.read(self.fd, 1 << 20)
                if self.screen.find(text.encode(), seen) >= 0:
                    return
        raise TimeoutError(f"{text!r} never appeared")

    def drain(self) -> None:
        """Let the rest of the frame arrive before the next key."""
        while select.select([self.fd], [], [], 0.1)[0]:
            self.screen += os.read(self.fd, 1 << 20)

    def press(self, key: str, then_shows: str) -> float:
        self.drain()
        time.sleep(READING)
        start = time.perf_counter()
        os.write(self.fd, key.encode())
        self.wait_for(then_shows)
        return time.perf_counter() - start

    def quit(self) -> int:
        os.write(self.fd, b"q")
        while True:
            try:
                if not os.read(self.fd, 1 << 20):
                    break
            except OSError:  # the child closed the terminal
                break
        os.waitpid(self.pid, 0)
        return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        write_series(project / "steps", series_steps())
        cold = timed(lambda: build(project / "steps", project / "history"))
        again = timed(lambda: build(project / "steps", project / "history"))
        am = timed(lambda: git_am(project / "steps", project / "am"))

        env = {
            **os.environ,
            "XDG_STATE_HOME": str(project / "state"),
            "TERM": "xterm-256color",
            "PYTHONPATH": str(ROOT),
        }
        term = Terminal([sys.executable, "-m", "walkthrough", "--project", str(project)], env)
        term.wait_for(f"Step 1/{STEPS}")
        first_paint = time.perf_counter() - term.start
        first_visit = term.press("n", f"Step 2/{STEPS}")  # made ready while step 1 was read
        revisits = []
        for _ in range(5):
            term.press("p", f"Step 1/{STEPS}")
            revisits.append(term.press("n", f"Step 2/{STEPS}"))
        # nothing made ready: git, parse, Markdown, colour
        jump = term.press("G", f"Step {STEPS}/{STEPS}")
        # and as cold, in the same process: far jumps with `:`
        cold_jumps = [jump] + [term.press(f":{n}\r", f"Step {n}/{STEPS}") for n in COLD]
        peak_kib = term.quit()

    text = big_file().splitlines()
    Code(["x = 1"], "warm_up.py")[0]  # load the lexer once, as the reader has by then
    code = Code(text, "layers.py")
    lazy = timed(lambda: [code[i] for i in range(SIZE[1])])
    eager = timed(lambda: highlight("\n".join(text), language="python").split("\n"))

    rows = [
        ("build, 30 steps", f"{cold:.2f} s", f"git am: {am:.2f} s", "<= 5 s"),
        ("rebuild, up to date", f"{again * 1000:.0f} ms", "", ""),
        ("first paint (process start)", f"{first_paint:.2f} s", "", "<= 1 s"),
        (
            f"n onto a {BIG:,}-line diff",
            f"{first_visit * 1000:.0f} ms (made ready while reading)",
            f"{statistics.median(revisits) * 1000:.0f} ms seen before (median of 5)",
            "<= 100 ms",
        ),
        (
            f"G onto another {BIG:,}-line diff",
            f"{statistics.median(cold_jumps) * 1000:.0f} ms cold "
            f"(median of G and {len(COLD)} far jumps)",
            f"{jump * 1000:.0f} ms the G alone",
            "<= 100 ms",
        ),
        (
            f"highlight {BIG:,}-line diff",
            f"{lazy * 1000:.1f} ms first screen",
            f"{eager * 1000:.1f} ms all at once",
            "",
        ),
        ("reader peak memory (RSS)", f"{peak_kib / 1024:.0f} MiB", "", ""),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    print(
        f"walkthrough benchmark: {STEPS} steps, terminal {SIZE[0]}x{SIZE[1]}, {os.cpu_count()} CPUs"
    )
    for row in [("", "ours", "straightforward / more", "target"), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
