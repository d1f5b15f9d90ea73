"""Read any git repository's history as steps: one commit is one step, its message the narration.

`load_series(path, range)` takes the first-parent history of a range (default: all of HEAD), so a
merge is one step whose diff is against the branch it was merged into. Bare repositories work:
nothing here needs a working tree.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from git import Repo
from git.exc import InvalidGitRepositoryError, NoSuchPathError

from .diff import FileDiff, decode, encode_path, is_data, parse_diff, shown
from .errors import WalkthroughError
from .gitcmd import run_git

SUBJECT = re.compile(r"^Step (\d+): (.*)$")
# a name the shell and git's option parser leave alone
PLAIN_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*")
# names git resolves before (or instead of) a tag: HEAD-like files in .git, refs/X, heads/X...,
# full commit ids
NOT_A_TAG = re.compile(r"[A-Z_]*HEAD|(refs|tags|heads|remotes)/.*|[0-9a-f]{40}|[0-9a-f]{64}")
# the last line of a series step's message: the name its exercise check is keyed by, which
# renumbering leaves alone
STEP_ID = re.compile(r"\n*^Step-Id: ([a-z0-9-]+)\s*\Z", re.M)
# what `walkthrough build` tags each step: step-00 (the empty start), step-01...
STEP_TAG = re.compile(r"step-(\d+)")


def parse_subject(subject: str) -> tuple[int | None, str]:
    """'Step 07: Flash attention' -> (7, 'Flash attention'); another subject -> (None, subject)."""
    if match := SUBJECT.match(subject):
        return int(match.group(1)), match.group(2)
    return None, subject


@dataclass(frozen=True)
class Commit:
    sha: str
    tree: str
    parents: tuple[str, ...]
    message: str

    @property
    def subject(self) -> str:
        return self.message.split("\n", 1)[0].strip()

    @property
    def body(self) -> str:
        return self.message.partition("\n")[2].strip("\n")


def read_commits(repo: Repo, rev_range: str) -> list[Commit]:
    """The first-parent history of `rev_range`, oldest first."""
    if rev_range.startswith("-"):  # git would take it for an option (--output=FILE writes a file)
        raise WalkthroughError(f"bad range {rev_range!r}: a range does not start with '-'")
    out = run_git(
        repo.git,
        "log",
        "-z",
        "--first-parent",
        "--reverse",
        "--format=%H%x01%T%x01%P%x01%B",
        rev_range,
        "--",
        what=f"bad range {rev_range!r}",
    )
    commits = []
    for record in out.split(b"\0"):
        if not record:
            continue
        sha, tree, parents, message = record.split(b"\x01", 3)
        commits.append(
            Commit(sha.decode(), tree.decode(), tuple(parents.decode().split()), decode(message))
        )
    return commits


def open_repo(path: Path | str) -> Repo:
    try:
        repo = Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise WalkthroughError(f"not a git repository: {path}") from None
    if _is_git_dir(Path(path)):
        # a bare repository: say so to git. Without a config file gitpython takes it for a work
        # tree's .git and runs git in the parent folder: no repository, or worse, another one
        repo.git.update_environment(GIT_DIR=str(Path(path).resolve()))
    return repo


def _is_git_dir(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()


def read_blob(repo: Repo, rev: str, path: str) -> bytes | None:
    """The bytes of `path` in the tree of `rev`, or None when it has no such file."""
    entries = [
        entry.split(b"\t", 1)
        for entry in run_git(repo.git, "ls-tree", "-z", rev, "--", path).split(b"\0")
    ]
    kind = next((info.split()[1] for info, *name in entries if name == [encode_path(path)]), None)
    if kind is None:
        return None
    if kind != b"blob":  # a submodule: a commit of another repository, which this one does not hold
        raise WalkthroughError(
            f"{shown(path)} is a submodule at this step, not a file: there is nothing to open"
        )
    return run_git(
        repo.git, "cat-file", "blob", f"{rev}:{path}", what=f"could not read {shown(path)}"
    )


@dataclass(frozen=True)
class Step:
    number: int  # its step-NN tag's number, or its position in the series from 1 (see step_numbers)
    commit: Commit
    ref: str  # the step's name on screen: its tag, or its abbreviated commit id
    rev: str  # what git resolves to exactly this commit, and nothing else (see _rev)

    @property
    def checkout(self) -> str:
        """A command a POSIX shell runs as one `git checkout` of this step, whatever its tag is
        called: rev is quoted and never starts with '-'. --detach unless rev is the plain tag name:
        without it, checkout takes a branch of the same name as rev over rev itself."""
        return f"git checkout {'' if self.rev == self.ref else '--detach '}{shlex.quote(self.rev)}"

    @property
    def title(self) -> str:
        return parse_subject(self.commit.subject)[1]

    @property
    def narration(self) -> str:
        return STEP_ID.sub("", self.commit.body)

    @property
    def slug(self) -> str | None:
        """The step's Step-Id trailer (e.g. 'tying'), or None in a history without them."""
        found = STEP_ID.search(self.commit.body)
        return found.group(1) if found else None


@dataclass(frozen=True)
class Match:
    step: int  # index into Series.steps
    file: int | None = None  # None: the match is in the title or narration
    hunk: int = 0
    line: int = 0


class Series:
    def __init__(self, repo: Repo, rev_range: str, steps: list[Step]):
        self.repo = repo
        self.rev_range = rev_range
        self.steps = steps
        self._files: dict[int, list[FileDiff]] = {}
        # steps git could not read (a missing object in a damaged clone), and why
        self.errors: dict[int, str] = {}

    def index_of(self, number: int) -> int | None:
        """The index of the step numbered `number` (numbers run one by one from the first step's),
        or None."""
        index = number - self.steps[0].number
        return index if 0 <= index < len(self.steps) else None

    @property
    def key(self) -> str:
        """Names this series in the reader's memory of where you were."""
        return f"{Path(self.repo.git_dir).resolve()} {self.rev_range}"

    def files(self, index: int) -> list[FileDiff]:
        """The files step `index` changes, against its first parent (none for a root commit)."""
        if index not in self._files:
            commit = self.steps[index].commit
            base = [commit.parents[0], commit.sha] if commit.parents else ["--root", commit.sha]
            try:
                out = run_git(
                    self.repo.git,
                    "-c",
                    "core.quotepath=false",
                    "diff-tree",
                    "-p",
                    "-r",
                    "-M",
                    "--no-commit-id",
                    "--src-prefix=a/",
                    "--dst-prefix=b/",
                    *base,
                )
            except WalkthroughError as error:
                self.errors[index] = str(error)
                raise
            # code first: a step that adds 40,000 lines of text and changes a script opens on it
            self._files[index] = sorted(parse_diff(out), key=is_data)
        return self._files[index]

    def git(self) -> str:
        """`git -C <this repository>`: how a git command the reader suggests starts, to work from
        any folder."""
        bare = self.repo.bare or "GIT_DIR" in self.repo.git.environment()  # see open_repo
        where = Path(self.repo.git_dir if bare else self.repo.working_tree_dir).resolve()
        return f"git -C {shlex.quote(str(where))}"

    def checkout(self, index: int) -> str:
        """The step's `git checkout` line, run on this repository from any folder:
        `git -C <repo> checkout ...`."""
        return f"{self.git()} {self.steps[index].checkout.removeprefix('git ')}"

    def file_at(self, index: int, path: str) -> bytes | None:
        """The file's bytes after step `index`, or None where the step's tree has no such file."""
        return read_blob(self.repo, self.steps[index].commit.sha, path)

    def search(self, query: str) -> list[Match]:
        """Case-insensitive matches in every step: one for the title or narration, one per diff
        line. A step git cannot read is searched by its message only (`errors` says why)."""
        needle = query.casefold()
        matches = []
        for index, step in enumerate(self.steps):
            if needle in step.commit.message.casefold():
                matches.append(Match(index))
            try:
                files = self.files(index)
            except WalkthroughError:
                continue
            for f, file in enumerate(files):
                for h, hunk in enumerate(file.hunks):
                    matches.extend(
                        Match(index, f, h, n)
                        for n, line in enumerate(hunk.lines)
                        if needle in line.text.casefold()
                    )
        return matches


def _tags(repo: Repo) -> dict[str, tuple[str, str]]:
    """commit id -> (its tag to show, a step-NN tag first; the rev that checks it out exactly)."""
    out = run_git(
        repo.git,
        "for-each-ref",
        "--format=%(objectname) %(*objectname) %(refname)",
        "refs/tags",
        "refs/heads",
    )
    tags: dict[str, str] = {}
    branches = set()
    for line in sorted(out.splitlines()):
        sha, peeled, ref = line.split(b" ", 2)
        if ref.startswith(b"refs/heads/"):
            branches.add(ref.removeprefix(b"refs/heads/"))
            continue
        # an annotated tag points at a tag object; %(*objectname) is its commit
        commit = (peeled or sha).decode()
        name = ref.removeprefix(b"refs/tags/")
        if commit not in tags or (
            name.startswith(b"step-") and not tags[commit].startswith(b"step-")
        ):
            tags[commit] = name
    return {commit: (decode(name), _rev(name, commit, branches)) for commit, name in tags.items()}


def _rev(tag: bytes, commit: str, branches: set[bytes]) -> str:
    """The tag's own name where git can only read it as that tag and the shell needs no quotes
    (step-07); refs/tags/NAME for other names; the commit id where the name is not even UTF-8."""
    try:
        name = tag.decode()
    except UnicodeDecodeError:
        return commit
    if PLAIN_REF.fullmatch(name) and not NOT_A_TAG.fullmatch(name) and tag not in branches:
        return name
    return f"refs/tags/{name}"


def load_series(path: Path | str, rev_range: str = "HEAD") -> Series:
    repo = open_repo(path)
    commits = read_commits(repo, rev_range)
    if not commits:
        raise WalkthroughError(f"the range {rev_range!r} in {path} has no commits")
    tags = _tags(repo)
    names = [tags.get(commit.sha, (commit.sha[:12], commit.sha)) for commit in commits]
    numbers = step_numbers([ref for ref, _ in names])
    return Series(
        repo, rev_range, [Step(n, c, *name) for n, c, name in zip(numbers, commits, names)]
    )


def step_numbers(refs: list[str]) -> list[int]:
    """The steps' numbers: their step-NN tags' where those number every step one by one (a history
    that `walkthrough build` made, read whole: step-03 is step 3, after step-00), else positions
    counted from 1."""
    tagged = [STEP_TAG.fullmatch(ref) for ref in refs]
    if all(tagged):
        numbers = [int(m[1]) for m in tagged]
        if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return numbers
    return list(range(1, len(refs) + 1))


# "Part II · Exact resume": a step of the series' second part
PART = re.compile(r"^(Part (?:0|[IVXLC]+)) · ")


def parts_of(titles: list[str]) -> list[str | None]:
    """Each title's part ("Part II · Exact resume": "Part II"), None for a step that continues the
    part above it. The lecture's steps carry no mark: in a series with a Part II they are Part I,
    before it and after Part 0."""
    parts = [part.group(1) if (part := PART.match(title)) else None for title in titles]
    if "Part II" in parts:
        first = parts.index(next(part for part in parts if part))
        for index, part in enumerate(parts):
            if part is None and (index < first or parts[index - 1] in ("Part 0", "Part I")):
                parts[index] = "Part I"
    return parts
