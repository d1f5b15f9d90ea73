"""Behavioural checks for the exercises, one per step of Parts 0 and I, keyed by the step's Step-Id (see core.py).

`run(tree, slugs)` runs checks against a tree in a fresh Python process (the tree's modules shadow ours there) and
returns one Result per check, in order.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import autograd, data, evals, model, optim, speed  # noqa: F401  (each registers its checks)
from .core import CHECKS, Check, environment

__all__ = ["CHECKS", "Check", "Result", "run"]


@dataclass(frozen=True)
class Result:
    slug: str
    ok: bool
    message: str  # "" when it passed; else the one line the learner reads
    seconds: float


def run(tree: Path, slugs: list[str], timeout: float = 300) -> list[Result]:
    """Run the named checks against `tree`, in one process started in it."""
    argv = [sys.executable, "-m", "walkthrough.checks", str(tree.resolve()), *slugs]
    try:
        done = subprocess.run(argv, cwd=tree, capture_output=True, text=True, timeout=timeout, env=environment())
    except subprocess.TimeoutExpired:
        return [Result(slug, False, f"the checks were still running after {timeout:g} s", timeout) for slug in slugs]
    results = [Result(**json.loads(line)) for line in done.stdout.splitlines() if line.startswith("{")]
    if len(results) < len(slugs):  # the process died (a learner's sys.exit at import, a crash): say how
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        ran = {result.slug for result in results}
        results += [Result(s, False, f"the check's process ended early: {last}", 0.0) for s in slugs if s not in ran]
    return results
