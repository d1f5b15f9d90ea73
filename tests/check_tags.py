"""Run exercise checks against checkouts of history/: each check at its own tag (must pass) and at
the tag before (must fail). `python tests/check_tags.py [SLUG ...]` (all Part I checks by default)
prints one line per run. The test suite's test_exercises.py calls `verify` for every check."""

import io
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from helpers import ROOT

sys.path.insert(0, str(ROOT))

from walkthrough import checks  # noqa: E402
from walkthrough.history import load_series  # noqa: E402
from walkthrough.patches import HISTORY_RANGE  # noqa: E402


def checkout(history: Path, tag: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if not subprocess.run(
        ["git", "ls-tree", tag], cwd=history, capture_output=True, check=True
    ).stdout:
        return folder  # step-00 is an empty tree, and tarfile refuses git's archive of one
    tar = subprocess.run(
        ["git", "archive", tag], cwd=history, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(folder, filter="data")
    return folder


def tags_by_slug(history: Path) -> dict[str, int]:
    return {
        step.slug: step.number for step in load_series(history, HISTORY_RANGE).steps if step.slug
    }


def code(line: str) -> str:
    """A line as Python runs it: without its comment (a # outside quotes) and trailing space."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote and line[i - 1] != "\\" else quote
        elif char in "'\"":
            quote = char
        elif char == "#":
            return line[:i].rstrip()
    return line.rstrip()


def edit(tree: Path, *edits: tuple[str, str], file: str = "train_gpt2.py") -> Path:
    """A learner's change to `file` in `tree`: each (old, new) replaced, where `old`'s code stands
    there exactly once. The match keys on code alone, so that a reworded comment never moves a
    test's edit: a piece of one line is looked for outside comments; for several lines, comments,
    blank lines and indentation (in `old` or in the file) are skipped, and the lines from the first
    matched to the last become `new`."""
    path = tree / file
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for old, new in edits:
        where = f"{old!r} is not in {tree.name}/{file} exactly once: update the test"
        if "\n" not in old.rstrip("\n"):  # one line, or a piece of one
            piece = old.rstrip("\n")

            def places(key):
                return [i for i, line in enumerate(lines) for _ in range(code(line).count(key))]

            # as it is, or (where it holds a comment) its code alone
            key, replacement = (
                (piece, new) if places(piece) else (code(piece).strip(), code(new).strip())
            )
            found = places(key)
            assert len(found) == 1, where
            lines[found[0]] = (
                new if old.endswith("\n") else lines[found[0]].replace(key, replacement, 1)
            )
            continue
        wanted = [c.strip() for c in map(code, old.splitlines()) if c.strip()]
        # the file's code, by line
        here = [(i, c.strip()) for i, c in enumerate(map(code, lines)) if c.strip()]
        starts = [
            k
            for k in range(len(here) - len(wanted) + 1)
            if [c for _, c in here[k : k + len(wanted)]] == wanted
        ]
        assert len(starts) == 1, where
        first, last = here[starts[0]][0], here[starts[0] + len(wanted) - 1][0]
        indent = (
            ""
            if old[0].isspace()
            else lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        )
        lines[first : last + 1] = [indent + new + ("" if new.endswith("\n") else "\n")]
    path.write_text("".join(lines), encoding="utf-8")
    return tree


def edited(
    history: Path, slug: str, folder: Path, *edits: tuple[str, str], file: str = "train_gpt2.py"
) -> Path:
    """The checkout of the step whose Step-Id is `slug`, with a learner's change (see edit)."""
    return edit(
        checkout(history, f"step-{tags_by_slug(history)[slug]:02d}", folder), *edits, file=file
    )


def verdict(tree: Path, slug: str) -> checks.Result:
    """The check `slug` run against `tree`; its message is one line, whatever it says."""
    (result,) = checks.run(tree, [slug])
    assert "\n" not in result.message, "a verdict is one line"
    return result


def verify(history: Path, slugs: list[str], work: Path, workers: int = 2) -> dict[str, tuple]:
    """slug -> (result at its tag, result at the tag before): one process per tag, two at a time."""
    number = tags_by_slug(history)
    jobs: dict[int, list[str]] = {}
    for slug in slugs:
        jobs.setdefault(number[slug], []).append(slug)
        jobs.setdefault(number[slug] - 1, []).append(slug)

    def one(n):
        return checks.run(checkout(history, f"step-{n:02d}", work / f"step-{n:02d}"), jobs[n])

    with ThreadPoolExecutor(workers) as pool:
        ran = dict(zip(jobs, pool.map(one, jobs)))
    found = {}
    for slug in slugs:
        n = number[slug]
        at = next(r for r in ran[n] if r.slug == slug)
        before = next(r for r in ran[n - 1] if r.slug == slug)
        found[slug] = (at, before)
    return found


if __name__ == "__main__":
    wanted = sys.argv[1:] or list(checks.CHECKS)
    with tempfile.TemporaryDirectory() as work:
        for slug, (at, before) in verify(ROOT / "history", wanted, Path(work)).items():
            verdict = "ok " if at.ok and not before.ok else "BAD"
            print(
                f"{verdict} {slug}: at its tag {'pass' if at.ok else 'FAIL: ' + at.message} "
                f"({at.seconds}s); before: {'PASSES (vacuous)' if before.ok else before.message}"
            )
