"""The patch series: `steps/` (a `git format-patch` file per step) <-> a git repository with a tag
for each step.

`build` applies the patches with a fixed author, committer and dates, so every machine gets the same
commit ids; `export` writes an edited history back as patches (build -> export is a byte-identical
round trip); `check` verifies the series. Steps are keyed by their subjects
("Step 07: Flash attention"), never by commit ids.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from git import Git, Repo

from .diff import decode_path, shown
from .errors import WalkthroughError
from .gitcmd import ISOLATED, run_git
from .history import Series, load_series, open_repo, parse_subject, read_commits

HISTORY_RANGE = "step-00..main"  # the steps of a built history, without the empty start
AUTHOR = ("build-gpt2", "steps@build-gpt2.invalid")
EPOCH = 1704067200  # 2024-01-01 00:00 UTC; step N is dated N hours later
ROOT_MESSAGE = "Step 00: An empty repository\n\nEvery step of the series starts here.\n"
# in the history's git dir: which steps/ it was built from, and the tip it made
STAMP = "walkthrough-build.json"
FORMAT = 1  # bump when build's output changes, so older histories are rebuilt
PATCH_OPTIONS = (
    "-k",  # keep the subject as it is: no "[PATCH]"
    # no commit ids in the files: they would change on every edit upstream of a step
    "--zero-commit",
    "--no-signature",  # the git version would be written in every file
    "--no-stat",
    "--full-index",  # abbreviated ids can grow when a repository gains objects
    "--binary",
    "-M",
)


@dataclass(frozen=True)
class Patch:
    path: Path
    subject: str
    narration: str
    has_diff: bool

    @property
    def message(self) -> str:
        return f"{self.subject}\n\n{self.narration}"


def clean_message(text: str) -> str:
    """What `git am` does to a message (git stripspace): no trailing spaces, no runs of blank lines,
    no blank lines at either end, one final newline."""
    lines: list[str] = []
    for line in text.splitlines():
        line = line.rstrip()
        if line or (lines and lines[-1]):
            lines.append(line)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"


def patch_files(steps_dir: Path) -> list[Path]:
    """steps/*.patch in name order (= step order); an error when there are none. A steps_dir
    that can't be listed (a file, no permission) raises OSError, not "no step patches": glob
    would hide why."""
    try:
        # absolute: git applies them from inside another folder
        paths = sorted(
            path for path in Path(steps_dir).absolute().iterdir() if path.name.endswith(".patch")
        )
    except FileNotFoundError:
        paths = []
    if not paths:
        raise WalkthroughError(
            f"{steps_dir}: no step patches (expected files like 0001-Step-01-....patch)"
        )
    return paths


def read_steps(steps_dir: Path) -> list[Patch]:
    """Every step patch, split into subject, narration and diff by `git mailinfo`."""
    paths = patch_files(steps_dir)
    git = Git(str(steps_dir))
    patches = []
    with tempfile.TemporaryDirectory() as tmp:
        msg, diff = Path(tmp, "msg"), Path(tmp, "diff")
        for path in paths:
            with path.open("rb") as stream:
                info = run_git(
                    git,
                    "mailinfo",
                    "-k",
                    str(msg),
                    str(diff),
                    env=ISOLATED,
                    stdin=stream,
                    what=path.name,
                )
            headers = dict(
                line.split(": ", 1)
                for line in info.decode("utf-8", "replace").splitlines()
                if ": " in line
            )
            narration = clean_message(msg.read_bytes().decode("utf-8", "replace")).strip("\n")
            patches.append(
                Patch(path, headers.get("Subject", ""), narration, diff.stat().st_size > 0)
            )
    return patches


def structure_problems(steps: list[tuple[str, str, bool]]) -> list[str]:
    """(where, subject, changes something) for each step, in order -> what stops the series from
    being built: subjects not numbered 1..N, steps without a diff. Only the first numbering slip is
    reported: after a gap every later number is off too."""
    problems = []
    for n, (where, subject, _) in enumerate(steps, 1):
        number, _title = parse_subject(subject)
        if number != n:
            problems.append(
                f"{where}: subject {subject!r} should start with 'Step {n:02d}: ' "
                "(numbered 1..N, no gaps)"
            )
            break
    problems += [
        f"{where}: changes nothing (every step needs a diff)"
        for where, _, changes in steps
        if not changes
    ]
    return problems


def series_hash(steps_dir: Path) -> str:
    digest = hashlib.sha256(f"format {FORMAT}\n".encode())
    for path in patch_files(steps_dir):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _commit(git: Git, tree: str, parent: str | None, message: str, number: int) -> str:
    """A commit whose id depends only on its tree, parent, message and step number."""
    date = f"{EPOCH + 3600 * number} +0000"
    name, email = AUTHOR
    env = {
        **ISOLATED,
        **{f"GIT_{who}_NAME": name for who in ("AUTHOR", "COMMITTER")},
        **{f"GIT_{who}_EMAIL": email for who in ("AUTHOR", "COMMITTER")},
        **{f"GIT_{who}_DATE": date for who in ("AUTHOR", "COMMITTER")},
    }
    with tempfile.TemporaryFile() as stream:
        stream.write(clean_message(message).encode())
        stream.seek(0)
        out = run_git(
            git, "commit-tree", tree, *(["-p", parent] if parent else []), env=env, stdin=stream
        )
    return out.decode().strip()


def step_tags(repo: Repo) -> list[tuple[str, str]]:
    """(tag, commit id) for every step-NN tag, in step order."""
    out = run_git(
        repo.git, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/tags/step-*"
    )
    pairs = [tuple(line.split(" ")) for line in out.decode().splitlines()]
    return sorted(pairs, key=lambda pair: int(pair[0].removeprefix("step-")))


def _set_refs(repo: Repo, tip: str, tags: list[tuple[str, str]]) -> None:
    """In one transaction: main at tip, step-NN at each step, step tags past the end dropped."""
    stale = {tag for tag, _ in step_tags(repo)} - {tag for tag, _ in tags}
    commands = [
        f"update refs/heads/main {tip}",
        *(f"update refs/tags/{tag} {sha}" for tag, sha in tags),
    ]
    commands += [f"delete refs/tags/{tag}" for tag in sorted(stale)]
    with tempfile.TemporaryFile() as stream:
        stream.write(("\n".join(commands) + "\n").encode())
        stream.seek(0)
        run_git(repo.git, "update-ref", "--stdin", env=ISOLATED, stdin=stream)


def _write_stamp(repo: Repo, steps_dir: Path, tip: str) -> None:
    stamp = {"format": FORMAT, "steps": series_hash(steps_dir), "tip": tip}
    Path(repo.git_dir, STAMP).write_text(json.dumps(stamp, indent=1) + "\n")


def _read_stamp(into: Path) -> dict | None:
    """What the last build wrote in `into`; None when it has no stamp (build did not make it)."""
    path = into / ".git" / STAMP
    if not path.is_file():
        return None
    try:
        stamp = json.loads(path.read_bytes())
    except ValueError:  # not JSON, or not even UTF-8
        stamp = None
    if not (
        isinstance(stamp, dict) and all(isinstance(stamp.get(key), str) for key in ("steps", "tip"))
    ):
        raise WalkthroughError(
            f"{path} is not a build stamp we can read; {into} is left as it is: "
            "export it if it holds edits, then remove it and build again"
        )
    return stamp


def _fresh_build(patches: list[Patch], steps_dir: Path, into: Path) -> list[tuple[str, str]]:
    """Build into a new folder `into`: an empty root tagged step-00, then one commit per patch."""
    if problems := structure_problems([(p.path.name, p.subject, p.has_diff) for p in patches]):
        raise WalkthroughError(problems[0])
    into.mkdir(parents=True)
    run_git(Git(str(into)), "init", "-q", "-b", "main", env=ISOLATED)
    repo = Repo(into)
    # authors edit narration in this repository, and a Markdown heading starts with '#': to git, a
    # comment, which it would drop
    run_git(repo.git, "config", "commit.cleanup", "whitespace")
    parent = _commit(
        repo.git, run_git(repo.git, "write-tree").decode().strip(), None, ROOT_MESSAGE, 0
    )
    tags = [("step-00", parent)]
    for n, patch in enumerate(patches, 1):
        run_git(
            repo.git,
            "apply",
            "--cached",
            str(patch.path),
            env=ISOLATED,
            what=f"{patch.path.name} does not apply",
        )
        tree = run_git(repo.git, "write-tree").decode().strip()
        parent = _commit(repo.git, tree, parent, patch.message, n)
        tags.append((f"step-{n:02d}", parent))
    _set_refs(repo, parent, tags)
    run_git(repo.git, "reset", "-q", "--hard", env=ISOLATED)
    _write_stamp(repo, steps_dir, parent)
    return tags


@contextlib.contextmanager
def one_at_a_time(folder: Path):
    """Hold an exclusive flock on the folder itself while the block runs: a second build or export
    of the same steps/ waits for the first (then finds the history up to date), instead of both
    writing it."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # which drops the lock


def learners_work(repo: Repo) -> list[str]:
    """What a rebuild would destroy in a history: branches besides main, tags besides step-NN, a
    stash, uncommitted or untracked files in its work tree."""
    refs = run_git(repo.git, "for-each-ref", "--format=%(refname)").decode().split()
    work = [
        f"branch {ref.removeprefix('refs/heads/')}"
        for ref in refs
        if ref.startswith("refs/heads/") and ref != "refs/heads/main"
    ]
    work += [
        f"tag {ref.removeprefix('refs/tags/')}"
        for ref in refs
        if ref.startswith("refs/tags/") and not ref.startswith("refs/tags/step-")
    ]
    work += ["a stash"] * ("refs/stash" in refs)
    if run_git(repo.git, "status", "--porcelain", "--untracked-files=all", env=ISOLATED).strip():
        work.append("changed or new files")
    return work


def build(steps_dir: Path, into: Path) -> list[tuple[str, str]]:
    """Build steps_dir into the repository `into`: nothing to do when these patches made it."""
    steps_dir, into = Path(steps_dir), Path(into)
    with one_at_a_time(patch_files(steps_dir)[0].parent):
        return _build(steps_dir, into)


def _build(steps_dir: Path, into: Path) -> list[tuple[str, str]]:
    digest = series_hash(steps_dir)
    # `into`, or where it would go
    existing = next(path for path in (into, *into.parents) if path.exists())
    if not existing.is_dir():
        raise WalkthroughError(f"{existing} is a file, not a folder: build somewhere else")
    if into.exists():
        stamp = _read_stamp(into)
        if stamp is None:
            if any(into.iterdir()):
                raise WalkthroughError(
                    f"{into} exists and was not made by walkthrough build; "
                    "remove it or build elsewhere"
                )
            into.rmdir()
        else:
            repo = open_repo(into)
            if stamp.get("format") == FORMAT and stamp.get("steps") == digest:
                return step_tags(repo)
            if run_git(repo.git, "rev-parse", "main").decode().strip() != stamp["tip"]:
                raise WalkthroughError(
                    f"{into} has commits not exported to {steps_dir}: run walkthrough export first"
                )
            if work := learners_work(repo):
                raise WalkthroughError(
                    f"{steps_dir} changed, and rebuilding {into} would destroy your work there "
                    f"({', '.join(work)}): keep it elsewhere "
                    f"(git -C {into} bundle create ../my-work.bundle --all, say), "
                    "then remove it from the history and run this again"
                )
    # build beside the old history and swap, so a patch that fails to apply leaves the old one
    # in place
    into.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{into.name}-", dir=into.parent))
    try:
        tags = _fresh_build(read_steps(steps_dir), steps_dir, staging / "repo")
        if into.exists():
            shutil.rmtree(into)
        (staging / "repo").rename(into)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return tags


def export(source: Path, steps_dir: Path) -> list[Path]:
    """Write the history `source` (step-00..main) into steps_dir as patches, replacing the ones
    there, and re-point main and the step tags at the commits a fresh build of them gives."""
    repo = open_repo(source)
    commits = read_commits(repo, HISTORY_RANGE)
    if not commits:
        raise WalkthroughError(f"{source}: no steps after step-00 on main")
    if merges := [c for c in commits if len(c.parents) > 1]:
        raise WalkthroughError(
            f"{source}: {merges[0].subject!r} is a merge; a series is one straight line of commits"
        )
    root_tree = run_git(repo.git, "rev-parse", "step-00^{tree}").decode().strip()
    trees = [root_tree, *(c.tree for c in commits)]
    if problems := structure_problems(
        [
            (f"commit {c.sha[:12]}", c.subject, tree != c.tree)
            for c, tree in zip(commits, trees, strict=False)
        ]
    ):
        raise WalkthroughError(f"{source}: {problems[0]}")
    parent = _commit(repo.git, root_tree, None, ROOT_MESSAGE, 0)
    tags = [("step-00", parent)]
    for n, commit in enumerate(commits, 1):
        parent = _commit(repo.git, commit.tree, parent, commit.message, n)
        tags.append((f"step-{n:02d}", parent))
    steps_dir = Path(steps_dir)
    steps_dir.mkdir(parents=True, exist_ok=True)
    with one_at_a_time(steps_dir):
        # a killed export's (none runs now: we hold the lock)
        for stale in steps_dir.glob(".export-*"):
            shutil.rmtree(stale, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=steps_dir, prefix=".export-") as tmp:
            # written beside the old patches first (a full disk fails here, the old ones untouched),
            # then swapped in by renames, which need no space
            run_git(
                repo.git,
                "format-patch",
                *PATCH_OPTIONS,
                "-o",
                tmp,
                f"{tags[0][1]}..{parent}",
                env=ISOLATED,
            )
            new = sorted(Path(tmp).glob("*.patch"))
            names = {path.name for path in new}
            for old in steps_dir.glob("*.patch"):
                if old.name not in names:
                    old.unlink()
            written = [path.replace(steps_dir / path.name) for path in new]
    _set_refs(repo, parent, tags)
    _write_stamp(repo, steps_dir, parent)
    return written


def _sections(patch: bytes) -> list[tuple[int, list[bytes]]]:
    """A patch's mail headers, narration and diff: (the line number each starts at, its lines).
    Split at \\n only: a carriage return is a byte to compare, not a line break."""
    lines = patch.split(b"\n")
    body = lines.index(b"") + 1 if b"" in lines else 0  # the blank line after the headers
    diff = next((n for n, text in enumerate(lines) if text.startswith(b"diff --git ")), len(lines))
    return [(1, lines[:body]), (body + 1, lines[body:diff]), (diff + 1, lines[diff:])]


def _difference(ours: bytes, theirs: bytes) -> str:
    """Where a patch first differs from what export writes, and why that can be. The narration is
    looked at before the headers: a narration byte that is not ASCII makes export add a
    Content-Type header."""
    sections = zip(("header", "narration", "diff"), _sections(ours), _sections(theirs))
    differing = {part: (first, a, b) for part, (first, a), (_, b) in sections if a != b}
    part = next(part for part in ("narration", "header", "diff") if part in differing)
    first, a, b = differing[part]
    n = next((n for n, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    if part == "narration":
        return (
            f"line {first + n} (narration line {n + 1}) is not kept as written: "
            "a build drops trailing spaces, carriage returns and extra blank lines, "
            "turns bytes that are not UTF-8 into U+FFFD, and ends the narration at a line "
            "that starts with '---' or 'diff -'; run walkthrough build, then export"
        )
    return (
        f"line {first + n} ({part}) differs from what export writes; "
        "run walkthrough build, then export"
    )


def check(steps_dir: Path, project: Path, shipped: Iterable[str]) -> list[str]:
    """Everything wrong with the series, one line each; [] when it is sound.

    The last step must end at the project: every file in its tree must equal the project's copy, and
    each name in `shipped` that the project has must be in that tree. The caller knows which files
    the series ships (this module reads any project), so a file the series has never had is caught
    only through that list."""
    steps_dir, project = Path(steps_dir), Path(project)
    patches = read_steps(steps_dir)
    structure = structure_problems([(p.path.name, p.subject, p.has_diff) for p in patches])
    problems = [
        f"{p.path.name}: no narration (the message body is empty)"
        for p in patches
        if not p.narration
    ]
    if structure:  # numbering or an empty step: there is no series to build
        return structure + problems
    with tempfile.TemporaryDirectory() as tmp:
        try:
            _fresh_build(patches, steps_dir, Path(tmp, "history"))
        except WalkthroughError as error:
            return [*problems, str(error)]
        problems += _final_problems(open_repo(Path(tmp, "history")), project, shipped)
        written = export(Path(tmp, "history"), Path(tmp, "steps"))
        if [p.name for p in written] != [p.path.name for p in patches]:
            names = ", ".join(p.name for p in written)
            problems.append(f"{steps_dir}: file names differ from what export writes: {names}")
        else:
            for patch, new in zip(patches, written, strict=True):
                ours, theirs = patch.path.read_bytes(), new.read_bytes()
                if ours != theirs:  # every byte: the build of this patch must give back this patch
                    problems.append(f"{patch.path.name}: {_difference(ours, theirs)}")
    return problems


def _final_problems(repo: Repo, project: Path, shipped: Iterable[str]) -> list[str]:
    out = run_git(repo.git, "ls-tree", "-r", "-z", "--name-only", "main")
    names = [decode_path(name) for name in out.split(b"\0") if name]
    problems = []
    for name in names:
        theirs = _read(project / name)
        if theirs is None:
            problems.append(f"{shown(name)}: in the final step but not in the project ({project})")
        elif run_git(repo.git, "cat-file", "blob", f"main:{name}") != theirs:
            problems.append(f"{shown(name)}: the final step's copy differs from the project's")
    missing = [name for name in shipped if name not in names and (project / name).is_file()]
    return problems + [
        f"{name}: in the project but missing from the final step" for name in missing
    ]


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def open_history(project: Path) -> Series:
    """The project's own series: build history/ from steps/ when needed, then read it."""
    history = Path(project, "history")
    build(Path(project, "steps"), history)
    return load_series(history, HISTORY_RANGE)
