"""What every exercise check is made of: a registry keyed by the step's Step-Id, the learner's tree, and failures
that read as one line (what was expected, what was found, and which name).

A check proves what a step's code *does*, through the names the step defines (classes, functions, flags, files it
writes), never through its text: a correct solution written differently passes, a subtly wrong one fails. It runs
in its own Python process whose working folder is the tree under test, so `tree.module("train_gpt2")` imports the
learner's file, not ours.
"""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class CheckFailed(AssertionError):
    """A check's verdict on the learner's code, as the one line the learner reads."""


@dataclass(frozen=True)
class Check:
    slug: str  # the Step-Id of the step it checks
    calls: tuple[str, ...]  # the names it uses, as the exercise prompt lists them ("train_gpt2.GPT.forward")
    function: Callable[[Tree], None]

    @property
    def proves(self) -> str:
        """The docstring: what passing proves, in a learner's words."""
        return inspect.getdoc(self.function) or ""


CHECKS: dict[str, Check] = {}


def check(slug: str, *calls: str):
    """Register `function` as the check of the step whose Step-Id is `slug`; `calls` name what it uses."""

    def register(function: Callable[[Tree], None]) -> Callable[[Tree], None]:
        if slug in CHECKS:
            raise ValueError(f"two checks for step {slug!r}")
        CHECKS[slug] = Check(slug, calls, function)
        return function

    return register


def expect(ok: bool, what: str, expected: object, found: object) -> None:
    """Fail with 'what: expected E, found F' unless ok."""
    if not ok:
        raise CheckFailed(f"{what}: expected {expected}, found {found}")


def expect_close(what: str, expected: float, found: float, rel: float = 1e-5, abs_: float = 1e-6) -> None:
    """Numbers (or 0-d tensors) equal within rel (relative) or abs_ (absolute), whichever is wider."""
    expected, found = float(expected), float(found)
    ok = abs(found - expected) <= max(rel * abs(expected), abs_)
    expect(ok, what, f"{expected:.6g}", f"{found:.6g}")


def expect_tensors_close(what: str, expected, found, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """Tensors of one shape, equal within torch.allclose's tolerances; the failure names the largest difference."""
    import torch

    expect(tuple(found.shape) == tuple(expected.shape), f"{what}'s shape", tuple(expected.shape), tuple(found.shape))
    if not torch.allclose(found.float(), expected.float(), atol=atol, rtol=rtol):
        worst = (found.float() - expected.float()).abs().max().item()
        raise CheckFailed(f"{what}: expected equal values (within {atol:g}), found a difference of {worst:.3g}")


class Tree:
    """The folder under test: a checkout of a step, or a learner's exercise tree."""

    def __init__(self, path: Path):
        self.path = path.resolve()
        self._scratch: tempfile.TemporaryDirectory | None = None

    def module(self, name: str):
        """The tree's own module `name` (e.g. "train_gpt2"), imported once."""
        if not (self.path / f"{name}.py").is_file():
            raise CheckFailed(f"{name}.py: expected the file, found none in {self.path.name}/")
        return importlib.import_module(name)

    def name(self, module: str, dotted: str):
        """`module.dotted` (e.g. "train_gpt2", "GPT.from_pretrained"), or a failure naming what is missing."""
        found = self.module(module)
        for part in dotted.split("."):
            if not hasattr(found, part):
                raise CheckFailed(f"{module}.{dotted}: expected it to be defined, found no {part!r}")
            found = getattr(found, part)
        return found

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """`python *args` in the tree, as the learner would type it; stdout and stderr as text."""
        try:
            return subprocess.run(
                [sys.executable, *args], cwd=self.path, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise CheckFailed(
                f"python {' '.join(args)}: expected it to finish, found it running after {timeout:g} s"
            ) from None

    def scratch(self) -> Path:
        """A temporary folder that lives as long as the check's process (for files a check writes)."""
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="check-")
        return Path(self._scratch.name)

    def tiny_gpt2(self, **sizes: int) -> Path:
        """A small random GPT-2 saved by transformers (the `[hf]` extra): an offline stand-in for OpenAI's weights
        that `from_pretrained` reads like the real ones. Default sizes: 2 layers, 2 heads, 32 channels, 64
        positions, GPT-2's vocabulary."""
        try:
            from transformers import GPT2Config, GPT2LMHeadModel
        except ImportError:
            raise CheckFailed("this check needs transformers: expected it installed (pip install -e '.[hf]')") from None
        import torch

        config = {"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 64, "vocab_size": 50257, **sizes}
        folder = self.scratch() / "tiny-gpt2-{n_layer}-{n_head}-{n_embd}-{n_positions}-{vocab_size}".format(**config)
        if not folder.exists():
            torch.manual_seed(0)
            GPT2LMHeadModel(GPT2Config(**config)).save_pretrained(folder)
        return folder


def describe(error: BaseException, tree: Path) -> str:
    """An exception as one line: a check's own verdict as it is; anything else with where in the tree it happened."""
    if isinstance(error, CheckFailed):
        return str(error)
    if isinstance(error, SystemExit):  # argparse on an unknown flag, or the learner's own sys.exit
        return f"the code exited with status {error.code} where the check expected it to carry on"
    import traceback

    where = ""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if frame.filename and Path(frame.filename).resolve().is_relative_to(tree):
            where = f" (in {Path(frame.filename).name}:{frame.lineno}, {frame.name})"
            break
    message = " ".join(str(error).split()) or "no message"
    return f"{type(error).__name__}{where}: {message}"


def environment() -> dict[str, str]:
    """The check process's environment: the user's, with hash seeds fixed and no GPU (the checks are CPU-sized).
    One thread each: a tiny model gains nothing from more, and the suite runs two checks at once on two cores."""
    return {**os.environ, "PYTHONHASHSEED": "0", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
