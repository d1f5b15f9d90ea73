"""Rebuild a step yourself: `walkthrough exercise N` makes a worktree of history/ at step N-1, next
to history/, for the learner to write step N in; `--check` runs step N's behavioural check
(walkthrough.checks) against it.

The folder is a git worktree, so `git diff` there shows the learner's own change. If history/ is
rebuilt (steps/ changed), the link breaks but the files stay: checking, comparing, resetting and
removing still work.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .checks import CHECKS, Check, Result
from .checks import run as run_checks
from .errors import WalkthroughError
from .gitcmd import ISOLATED, run_git
from .history import Commit, Series, Step

# what a run or Python leaves in a tree, which is not part of the learner's answer
NOT_THE_ANSWER = (":(exclude)log", ":(exclude)**/__pycache__", ":(exclude)*.pyc")


@dataclass
class Exercise:
    series: Series  # the project's own series (history/)
    index: int  # of the step to rebuild, in series.steps

    @classmethod
    def of(cls, series: Series, number: int) -> Exercise:
        numbers = [step.number for step in series.steps]
        if number not in numbers:
            raise WalkthroughError(
                f"no step {number}: the series has steps {numbers[0]}-{numbers[-1]}"
            )
        return cls(series, numbers.index(number))

    @property
    def step(self) -> Step:
        return self.series.steps[self.index]

    @property
    def check(self) -> Check | None:
        return CHECKS.get(self.step.slug or "")

    @property
    def folder(self) -> Path:
        """Next to history/, named for the step: exercise-08-tying."""
        history = Path(self.series.repo.working_tree_dir)
        return history.parent / f"exercise-{self.step.number:02d}-{self.step.slug or 'step'}"

    @property
    def base(self) -> str:
        """The commit the learner starts from: the step before."""
        return self.step.commit.parents[0]

    def require_check(self) -> None:
        if self.check is None:
            part1 = [s.number for s in self.series.steps if s.slug in CHECKS]
            span = f"steps {part1[0]}-{part1[-1]}" if part1 else "no step of this series"
            raise WalkthroughError(
                f"step {self.step.number} ({self.step.title}) has no exercise check: "
                f"the checks cover {span}"
            )

    def require_folder(self) -> None:
        if not self.folder.is_dir():
            raise WalkthroughError(
                f"no exercise tree for step {self.step.number} ({self.folder} does not exist): "
                f"run walkthrough exercise {self.step.number} first"
            )

    # ---- the folder

    def create(self) -> bool:
        """Make the worktree at the step before; False when it exists already (its work is kept)."""
        self.require_check()
        # a file, or a folder of something else
        if self.folder.exists() and not (self.folder / ".git").exists():
            raise WalkthroughError(
                f"{self.folder} is in the way and is not an exercise tree: "
                "move it elsewhere, then run this again"
            )
        if self.folder.exists():
            return False
        git = self.series.repo.git
        run_git(git, "worktree", "prune", what="could not tidy git's list of worktrees")
        run_git(
            git,
            "worktree",
            "add",
            "--detach",
            str(self.folder),
            self.base,
            what="could not make the tree",
        )
        return True

    def set_aside(self) -> Path:
        """Move the learner's tree out of the way, whole, and say where: nothing of theirs is
        deleted (they delete the folder once they no longer need it, or rename it back)."""
        self.require_folder()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        kept = next(
            path
            for n in itertools.count()
            if not (
                path := self.folder.with_name(
                    f"{self.folder.name}.kept-{stamp}{f'-{n}' if n else ''}"
                )
            ).exists()
        )
        self.folder.rename(kept)
        run_git(
            self.series.repo.git, "worktree", "prune", what="could not tidy git's list of worktrees"
        )
        return kept

    def reset(self) -> Path:
        """Back to the step before; the learner's tree is set aside, and where it went returned."""
        kept = self.set_aside()
        self.create()
        return kept

    # ---- what the learner reads and runs

    def prompt(self) -> str:
        step, check = self.step, self.check
        calls = "\n".join(f"  - {name}" for name in check.calls)
        return (
            f"Exercise: step {step.number}, {step.title}\n"
            f"Your tree: {self.folder} "
            f"(step {step.number - 1}'s files: write step {step.number} there)\n\n"
            f"{step.narration.strip()}\n\n"
            f"The check calls these names, so build them:\n{calls}\n"
            f"What passing proves: {' '.join(check.proves.split())}\n\n"
            f"Check your step:        walkthrough exercise {step.number} --check\n"
            f"Compare with the step:  walkthrough exercise {step.number} --compare\n"
            f"Start over:             walkthrough exercise {step.number} --reset"
        )

    def run_check(self) -> Result:
        self.require_check()
        self.require_folder()
        return run_checks(self.folder, [self.step.slug])[0]

    def compare(self) -> Series:
        """A three-step series for the reader: the series' step, the learner's tree as a commit on
        the same parent, and the learner's tree against the series' step itself: what is still
        different (written to history's object store only; the learner's folder, index and HEAD are
        left alone)."""
        self.require_folder()
        git = self.series.repo.git
        with tempfile.TemporaryDirectory() as scratch:
            env = {
                **ISOLATED,
                "GIT_INDEX_FILE": os.path.join(scratch, "index"),
                "GIT_WORK_TREE": str(self.folder),
                "GIT_DIR": str(Path(self.series.repo.git_dir).resolve()),
                **_AUTHOR,
            }
            run_git(
                git,
                "add",
                "-A",
                "--",
                ".",
                *NOT_THE_ANSWER,
                env=env,
                what="could not read your tree",
            )
            tree = run_git(git, "write-tree", env=env).decode().strip()
            n, name = self.step.number, self.folder.name
            steps = [self.step]
            for parent, title, against in (
                (
                    self.base,
                    f"Your step {n}: {self.step.title}",
                    f"step {n - 1}, where you started",
                ),
                (
                    self.step.commit.sha,
                    f"Your step {n}, against the series' step {n}",
                    f"the series' step {n}",
                ),
            ):
                message = f"{title}\n\nThe files of {name}, against {against}.\n"
                sha = (
                    run_git(git, "commit-tree", tree, "-p", parent, "-m", message, env=env)
                    .decode()
                    .strip()
                )
                steps.append(Step(n, Commit(sha, tree, (parent,), message), "yours", sha))
        return Series(self.series.repo, f"exercise {n}", steps)


_AUTHOR = {
    "GIT_AUTHOR_NAME": "learner",
    "GIT_AUTHOR_EMAIL": "learner@build-gpt2.invalid",
    "GIT_COMMITTER_NAME": "learner",
    "GIT_COMMITTER_EMAIL": "learner@build-gpt2.invalid",
}
