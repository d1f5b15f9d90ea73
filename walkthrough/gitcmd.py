"""The one place that runs git: an argument list through gitpython's command wrapper, bytes out, and
a failure turned into a one-line WalkthroughError."""

from __future__ import annotations

import os
from typing import BinaryIO

from git import Git
from git.exc import GitCommandNotFound

from .errors import WalkthroughError

# Building and exporting must give the same bytes on every machine, so they ignore the user's and
# the system's git config (diff.noprefix, format.signature, commit.gpgsign, core.autocrlf all change
# the output).
ISOLATED = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def run_git(
    git: Git,
    *args: str,
    env: dict[str, str] | None = None,
    stdin: BinaryIO | None = None,
    what: str = "",
) -> bytes:
    """Run `git ARGS` where `git` was opened (a repository or a folder); `what` prefixes errors."""
    try:
        status, out, err = git.execute(
            ["git", *args],
            istream=stdin,
            env=env,
            with_extended_output=True,
            with_exceptions=False,
            stdout_as_string=False,
            strip_newline_in_stdout=False,
        )
    except GitCommandNotFound:
        raise WalkthroughError("git is not installed (or not on PATH)") from None
    if status != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        reason = lines[0] if lines else f"git {args[0]} exited with {status}"
        raise WalkthroughError(f"{what}: {reason}" if what else reason)
    return out
