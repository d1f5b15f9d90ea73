"""Run exercise checks against checkouts of history/: each check at its own tag (must pass) and at the tag before
(must fail). `python tests/check_tags.py [SLUG ...]` (all Part I checks by default) prints one line per run.
The test suite's test_exercises.py calls `verify` for every check."""

import io
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from walkthrough import checks  # noqa: E402
from walkthrough.history import load_series  # noqa: E402
from walkthrough.patches import HISTORY_RANGE  # noqa: E402


def checkout(history: Path, tag: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if not subprocess.run(["git", "ls-tree", tag], cwd=history, capture_output=True, check=True).stdout:
        return folder  # step-00 is an empty tree, and tarfile refuses git's archive of one
    tar = subprocess.run(["git", "archive", tag], cwd=history, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(folder, filter="data")
    return folder


def tags_by_slug(history: Path) -> dict[str, int]:
    return {step.slug: step.number for step in load_series(history, HISTORY_RANGE).steps if step.slug}


def edit(tree: Path, *edits: tuple[str, str], file: str = "train_gpt2.py") -> Path:
    """A learner's change to `file` in `tree`: each (old, new) replaced, where `old` stands there exactly once."""
    path = tree / file
    text = path.read_text(encoding="utf-8")
    for old, new in edits:
        assert text.count(old) == 1, f"{old!r} is not in {tree.name}/{file} exactly once: update the test"
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")
    return tree


def edited(history: Path, slug: str, folder: Path, *edits: tuple[str, str], file: str = "train_gpt2.py") -> Path:
    """The checkout of the step whose Step-Id is `slug`, with a learner's change (see edit)."""
    return edit(checkout(history, f"step-{tags_by_slug(history)[slug]:02d}", folder), *edits, file=file)


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
                f"{verdict} {slug}: at its tag {'pass' if at.ok else 'FAIL: ' + at.message} ({at.seconds}s); "
                f"before: {'PASSES (vacuous)' if before.ok else before.message}"
            )
