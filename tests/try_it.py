"""Run a step's Try-it exactly as its narration writes it, in a checkout of that step, and compare
the output.

What needs the network in real life runs against local stand-ins (`walkthrough stand-ins`), linked
into the checkout as `stand-ins/`; a narration names each one it uses on its **Stand-in** line. Used
by tests/test_steps.py, and by hand:

    python tests/try_it.py FOLDER NARRATION.md  # FOLDER: a checkout of the step (it is written to)
"""

import os
import subprocess
import sys
import time
from pathlib import Path

from helpers import ROOT

sys.path.insert(0, str(ROOT))

from walkthrough.narration import NarrationError, mismatch, read, split  # noqa: E402
from walkthrough.runner import argv_here, env_here  # noqa: E402
from walkthrough.stand_ins import make_stand_ins  # noqa: E402

# beside the reader's environment for a Try-it (env_here: a thread each, as two steps run at
# once here), offline
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
TIMEOUT = 120  # seconds per command: a Try-it should take well under 30


def run(folder: Path, narration: str, stand_ins: Path) -> tuple[str | None, str, float]:
    """(None or what went wrong, the output, seconds) for the narration's Try-it run in folder."""
    started, output = time.time(), []
    try:
        promise = read(narration)
        lines = promise.checked_commands()
        if promise.swaps and not (folder / "stand-ins").exists():
            (folder / "stand-ins").symlink_to(stand_ins, target_is_directory=True)
        status = 0
        for line in lines:
            for command in split(line):
                proc = subprocess.run(
                    argv_here(command.argv),
                    cwd=folder,
                    env=env_here({**OFFLINE, **command.env}),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=TIMEOUT,
                )
                output.append(proc.stdout)
                status = proc.returncode
                if status:
                    break
            if status:
                break
    except (NarrationError, subprocess.TimeoutExpired, OSError) as error:
        return f"{type(error).__name__}: {error}", "".join(output), time.time() - started
    out = "".join(output)
    if status != promise.exit_status:
        return (
            f"exit status {status}, the narration expects {promise.exit_status}",
            out,
            time.time() - started,
        )
    return mismatch(promise, out), out, time.time() - started


if __name__ == "__main__":
    folder, narration = Path(sys.argv[1]), Path(sys.argv[2]).read_text()
    problem, out, seconds = run(
        folder,
        narration,
        make_stand_ins(Path(os.environ.get("STAND_INS", "/tmp/stand-ins")), ROOT / "input.txt"),
    )
    print(out)
    print(f"--- {seconds:.1f} s: " + (problem or "the output keeps the narration's promise"))
    sys.exit(1 if problem else 0)
