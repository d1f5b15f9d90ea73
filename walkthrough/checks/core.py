"""What every exercise check is made of: a registry keyed by the step's Step-Id, the learner's tree,
and failures that read as one line (what was expected, what was found, and which name); and what the
checks share: the learner's scripts run in this process as their command line would run them
(Tree.main, on a quick run's flags: Tree.quick), tiny models and texts, and a run watched from
outside (watch).

A check proves what a step's code *does*, through the names the step defines (classes, functions,
flags, files it writes), never through its text: a correct solution written differently passes, a
subtly wrong one fails. It runs in its own Python process whose working folder is the tree under
test, so `tree.module("train_gpt2")` imports the learner's file, not ours.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import itertools
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

VOCAB = 50257  # GPT-2's vocabulary, the tokenizer's
# the small model most checks build: a training step takes milliseconds
TINY = dict(n_layer=2, n_head=2, n_embd=32)
PROMPT = "Hello, I'm a language model,"  # the scripts' sampling prompt
WORDS = (
    "the of and to in a is that for it as with was on be by he at this are from or an have not but "
    "his they which one you were all we"
).split()  # common English words, each one GPT-2 token below 1,024
# What a check's run of train_gpt2.py is unless it says otherwise (Tree.quick): the tiny model, on
# the CPU, none of the later steps' extras on the way (validation, samples, HellaSwag, checkpoints).
QUICK = dict(TINY, device="cpu", val_every=0, sample_every=0, hellaswag_every=0, checkpoint_every=0)


class CheckFailed(AssertionError):
    """A check's verdict on the learner's code, as the one line the learner reads."""


@dataclass(frozen=True)
class Check:
    slug: str  # the Step-Id of the step it checks
    # the names it uses, as the exercise prompt lists them ("train_gpt2.GPT.forward")
    calls: tuple[str, ...]
    function: Callable[[Tree], None]

    @property
    def proves(self) -> str:
        """The docstring: what passing proves, in a learner's words."""
        return inspect.getdoc(self.function) or ""


CHECKS: dict[str, Check] = {}


def check(slug: str, *calls: str):
    """Register `function` as the check of the step whose Step-Id is `slug`; `calls` name
    what it uses."""

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


def expect_close(
    what: str, expected: float, found: float, rel: float = 1e-5, abs_: float = 1e-6
) -> None:
    """Numbers (or 0-d tensors) equal within rel (relative) or abs_ (absolute),
    whichever is wider."""
    expected, found = float(expected), float(found)
    allowed = max(rel * abs(expected), abs_)
    ok = abs(found - expected) <= allowed
    # the difference, not only the two numbers: at six digits, two values can print alike or differ
    # by rounding alone
    expect(
        ok,
        what,
        f"{expected:.6g}",
        f"{found:.6g} (off by {abs(found - expected):.2g}, {allowed:.2g} allowed)",
    )


def expect_tensors_close(
    what: str, expected, found, atol: float = 1e-5, rtol: float = 1e-5
) -> None:
    """Tensors of one shape, equal within torch.allclose's tolerances; the failure names the
    largest difference."""
    import torch

    expect(
        tuple(found.shape) == tuple(expected.shape),
        f"{what}'s shape",
        tuple(expected.shape),
        tuple(found.shape),
    )
    if not torch.allclose(found.float(), expected.float(), atol=atol, rtol=rtol):
        worst = (found.float() - expected.float()).abs().max().item()
        raise CheckFailed(
            f"{what}: expected equal values (within {atol:g}), found a difference of {worst:.3g}"
        )


def flags(**values: object) -> list[str]:
    """Keyword arguments as command-line flags: flags(max_steps=4) is ['--max-steps', '4']."""
    return [
        part
        for name, value in values.items()
        for part in ("--" + name.replace("_", "-"), str(value))
    ]


def last_line(text: str, none: str = "nothing on stderr") -> str:
    """The last line of `text` that is not blank (what a failed command says last), or `none`."""
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return lines[-1] if lines else none


def succeeded(
    what: str, done: subprocess.CompletedProcess, expected: str = "it to run"
) -> subprocess.CompletedProcess:
    """`done` (Tree.run's or Tree.main's) if it exited with status 0; else a failure naming its
    status and last line."""
    expect(
        done.returncode == 0,
        what,
        expected,
        f"exit status {done.returncode} ({last_line(done.stderr)})",
    )
    return done


def step_lines(text: str) -> dict[int, list[str]]:
    """step number -> the printed 'step N | ...' lines for it (a correct run prints each once)."""
    found: dict[int, list[str]] = {}
    for match in re.finditer(r"^step\s+(\d+)\b(.*)$", text, re.M):
        found.setdefault(int(match.group(1)), []).append(match.group(2))
    return found


def printed(line: str, name: str) -> float | None:
    """The number after `name` in a printed line ('loss 10.97', 'dt: 12.3ms',
    'tok/sec=1234'), or None."""
    found = figure(line, name)
    return found[0] if found else None


# as Python prints one: 12, 0.5, .5, 6.0000e-04
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


def figure(line: str, name: str) -> tuple[float, float] | None:
    """The number after `name` in a printed line (what printed() returns), and one unit of its last
    printed digit: 'norm 4.9167' is (4.9167, 1e-4), 'lr 6.0000e-04' (6e-4, 1e-8), 'tok/sec 345'
    (345, 1). None if there is none."""
    match = re.search(rf"(?<![\w/]){re.escape(name)}\b\W*?({NUMBER}|nan|inf)", line)
    return (float(match[1]), unit(match[1])) if match else None


def unit(number: str) -> float:
    """One unit of the last digit of a number as it was printed: a value printed with fewer decimals
    is as right, to its own precision ('4.92' for 4.9167)."""
    mantissa, _, exponent = number.lower().partition("e")
    return 10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2]))


def expect_settings(tree, argv, **expected: object) -> None:
    """The tree's parse_args(argv) holding the `expected` values (Tree.parse_args), a flag it lacks
    named as such."""
    args = tree.parse_args(list(argv))
    missing = ["--" + name.replace("_", "-") for name in expected if not hasattr(args, name)]
    if missing:
        wanted = (
            f"the flags {', '.join(missing[:-1])} and {missing[-1]}"
            if missing[1:]
            else f"a {missing[0]} flag"
        )
        raise CheckFailed(f"parse_args({list(argv)}): expected {wanted}, found none")
    tree.parse_args(list(argv), **expected)


@dataclass(frozen=True)
class Forward:
    """One call of a GPT's forward, as a hook saw it."""

    model: object  # the GPT module
    training: bool  # in train mode (not eval)
    grad: bool  # with autograd recording
    idx: object  # its input tokens (a copy)
    dtype: object  # the logits' dtype
    shape: tuple  # the logits' shape: (B, T, vocab_size)
    loss: float | None  # the loss, where targets were given


@contextlib.contextmanager
def watch(GPT=None, step: Callable | None = None):
    """While the block runs: every call of a `GPT`'s forward, as a Forward in the list it yields,
    and `step(optimizer)` before every optimizer.step(), however the code calls them (directly,
    through DDP or a compiled wrapper). `GPT` is the class, or its name: a script run as __main__
    (Tree.script) defines a class of its own."""
    import torch
    from torch.nn.modules.module import register_module_forward_hook
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    calls: list[Forward] = []

    def seen(module, inputs, output):
        if isinstance(module, GPT) if isinstance(GPT, type) else type(module).__name__ == GPT:
            logits, loss = (
                (*output, None)[:2] if isinstance(output, (tuple, list)) else (output, None)
            )
            loss = float(loss.detach()) if torch.is_tensor(loss) else None
            idx = inputs[0].detach().clone() if inputs else None
            grad = torch.is_grad_enabled()
            calls.append(
                Forward(module, module.training, grad, idx, logits.dtype, tuple(logits.shape), loss)
            )

    hooks = [register_module_forward_hook(seen)] if GPT is not None else []
    if step is not None:
        hooks.append(
            register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: step(optimizer))
        )
    try:
        yield calls
    finally:
        for hook in hooks:
            hook.remove()


def file_of(module: str) -> str:
    """The file a module of the project lives in: "part0.micrograd" -> "part0/micrograd.py"."""
    return module.replace(".", "/") + ".py"


class Tree:
    """The folder under test: a checkout of a step, or a learner's exercise tree."""

    def __init__(self, path: Path):
        self.path = path.resolve()
        self._scratch: Path | None = None
        self._fresh = itertools.count()
        # the log folders of quick runs (Tree.quick), which nothing reads back
        self._logs: list[Path] = []

    def command(
        self, argv: list[str], module: str = "train_gpt2", folder: Path | None = None
    ) -> str:
        """A run of the check as a command line the learner can paste in their tree, every argument
        it had, quoted where a shell needs it (the files it names are the check's own, kept after a
        failure: see scratch): a tool as a module of the project root, any other script by its path;
        from `folder` where it ran there."""
        # the script by its full path: Python imports its neighbours from its own folder
        if folder is not None:
            script = shlex.join(["python", str(self.path / file_of(module)), *argv])
            return f"cd {shlex.quote(str(folder))} && {script}"
        program = ["-m", module] if module.startswith("tools.") else [file_of(module)]
        return shlex.join(["python", *program, *argv])

    def module(self, name: str):
        """The tree's own module `name` (e.g. "train_gpt2", "part0.micrograd"), imported once."""
        if not (self.path / file_of(name)).is_file():
            raise CheckFailed(
                f"{file_of(name)}: expected the file, found none in {self.path.name}/"
            )
        return importlib.import_module(name)

    def name(self, module: str, dotted: str):
        """`module.dotted` (e.g. "train_gpt2", "GPT.from_pretrained"), or a failure naming
        what is missing."""
        found = self.module(module)
        for part in dotted.split("."):
            if not hasattr(found, part):
                raise CheckFailed(
                    f"{module}.{dotted}: expected it to be defined, found no {part!r}"
                )
            found = getattr(found, part)
        return found

    @contextlib.contextmanager
    def expecting(self, what: str, expected: str):
        """Run the block; an exception out of the learner's code fails it as one line: 'what:
        expected E, found' the exception, and where in the tree it was raised."""
        try:
            yield
        except CheckFailed:
            raise
        except Exception as error:
            raise CheckFailed(
                f"{what}: expected {expected}, found {describe(error, self.path)}"
            ) from None

    def run(
        self,
        *args: str,
        shown: str = "",
        check: bool = True,
        env: dict | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess:
        """`python *args` in the tree, as the learner would type it (with `env` added to the
        environment); stdout and stderr as text. With `check`, any exit status but 0 fails; `shown`
        names the command in failures."""
        shown = shown or f"`{shlex.join(['python', *args])}`"
        try:
            done = subprocess.run(
                [sys.executable, *args],
                cwd=self.path,
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, **(env or {})},
            )
        except subprocess.TimeoutExpired:
            raise CheckFailed(
                f"{shown}: expected it to finish, found it running after {timeout:g} s"
            ) from None
        return succeeded(shown, done) if check else done

    def main(
        self,
        argv: list[str],
        shown: str = "",
        module: str = "train_gpt2",
        folder: Path | None = None,
        expected: str = "it to run",
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """`python {module}.py argv`, run as the tree's `{module}.main(argv)` in this process
        (quicker than a process of its own), in `folder` if given: its exit status and what it
        printed. A SystemExit is the status the shell would see (argparse's 2,
        sys.exit("message")'s 1); an exception out of main (the user would see a traceback) fails,
        and so does any status but 0 with `check`. `shown` names the run in failures (by default,
        the command it is: Tree.command)."""
        main = self.name(module, "main")
        shown = shown or f"`{self.command(argv, module, folder)}`"
        return self._in_process(
            lambda: main(list(argv)), module, argv, shown, folder, expected, check
        )

    def script(
        self,
        argv: list[str],
        shown: str = "",
        module: str = "train_gpt2",
        expected: str = "it to run",
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """`python {module}.py argv` for a script with no `main` yet: the file run in this process
        as __main__, as the shell would run it (its classes are then its own, not the imported
        module's: see watch); otherwise as Tree.main."""
        import runpy

        path = self.path / file_of(module)
        expect(path.is_file(), file_of(module), "the file", f"none in {self.path.name}/")
        shown = shown or f"`{self.command(argv, module)}`"

        def run_as_main():
            runpy.run_path(str(path), run_name="__main__")  # its globals are no exit status

        return self._in_process(run_as_main, module, argv, shown, None, expected, check)

    def _in_process(
        self, call, module, argv, shown, folder, expected, check
    ) -> subprocess.CompletedProcess:
        """Tree.main's and Tree.script's run: `call()` with sys.argv, the working folder, stdout and
        stderr as the command line would have them."""
        out, err = io.StringIO(), io.StringIO()
        saved, cwd = sys.argv, os.getcwd()
        sys.argv = [Path(file_of(module)).name, *argv]  # argparse names the script in its messages
        try:
            os.chdir(folder or cwd)
            with (
                self.expecting(shown, expected),
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(err),
            ):
                try:
                    status = call()
                except SystemExit as exit:
                    status = exit.code
        finally:
            sys.argv = saved
            os.chdir(cwd)
        if isinstance(status, str):  # sys.exit("message"): Python prints it and exits with status 1
            err.write(status + "\n")
            status = 1
        done = subprocess.CompletedProcess(argv, status or 0, out.getvalue(), err.getvalue())
        return succeeded(shown, done, expected) if check else done

    def parse_args(self, argv: list[str], **expected: object):
        """The tree's `train_gpt2.parse_args(argv)`, as `python train_gpt2.py argv` would parse it,
        holding the `expected` values (n_layer=4: args.n_layer is 4); argparse's error fails, with
        its own line."""
        parse_args = self.name("train_gpt2", "parse_args")
        err, saved = io.StringIO(), sys.argv
        sys.argv = ["train_gpt2.py", *argv]
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                args = parse_args(list(argv))
        except SystemExit as exit:
            found = last_line(err.getvalue(), f"exit status {exit.code}")
            raise CheckFailed(
                f"parse_args({list(argv)}): expected it to parse, found: {found}"
            ) from None
        finally:
            sys.argv = saved
        for name, value in expected.items():
            found = getattr(args, name, None)
            expect(found == value, f"parse_args({list(argv)}).{name}", repr(value), repr(found))
        return args

    def accepts(self, argv: list[str]):
        """The tree's train_gpt2.parse_args(argv) where it takes these flags (later steps add flags
        that earlier ones refuse), else None."""
        try:
            return self.parse_args(argv)
        except Exception:  # no parse_args, argparse's error, or the learner's own
            return None

    def quick(self, argv: list[str]) -> list[str]:
        """train_gpt2.py's `argv` for a check's short run, after the QUICK flags, a fresh --log-dir
        in the scratch folder and a --total-batch of one micro-batch (B × T), each where the tree's
        parse_args takes it along with those before it (--n-embd 32 alone may not divide into the
        default heads); where `argv` sets one of them itself, its own value, given once (a command
        quoted in a failure reads as the run was)."""
        self._logs.append(self.fresh("log"))
        pairs = [flags(**{name: value}) for name, value in QUICK.items()]
        pairs.append(["--log-dir", str(self._logs[-1])])
        chosen: list[str] = []
        for pair in pairs:
            if pair[0] not in argv and self.accepts([*chosen, *pair]):
                chosen += pair
        args = self.accepts([*chosen, *argv])
        if hasattr(args, "total_batch") and "--total-batch" not in argv:
            chosen += ["--total-batch", str(args.batch_size * args.seq_len)]
        return [*chosen, *argv]

    def scratch(self) -> Path:
        """A temporary folder for the files a check writes and its runs read (a word list, shards, a
        small model). It outlives a failed check, so that the command its message quotes runs again
        on the same files; a check process whose checks all passed removes it (Tree.close)."""
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="check-"))
        return self._scratch

    def close(self, passed: bool) -> None:
        """The end of the check process: its scratch folder removed if every check passed; else
        kept, less the quick runs' log folders, so that a quoted command runs as it first did (a run
        refuses a --log-dir in use)."""
        if self._scratch is None:
            return
        for folder in [self._scratch] if passed else self._logs:
            shutil.rmtree(folder, ignore_errors=True)

    def fresh(self, name: str) -> Path:
        """A path in the scratch folder that nothing has used yet (not made): name-0, name-1,
        ..."""
        return self.scratch() / f"{name}-{next(self._fresh)}"

    def corpus(self) -> Path:
        """A small text of common English words for the checks' runs (about 6,600 tokens, each
        below 1,024, so that a model with a small vocabulary can read it too), written once
        per check process."""
        path = self.scratch() / "words.txt"
        if not path.exists():
            pick = random.Random(0)
            words = (
                " " + pick.choice(WORDS) + (".\n" if pick.random() < 0.1 else "")
                for _ in range(6000)
            )
            path.write_text("".join(words), encoding="utf-8")
        return path

    def gpt(self, seed: int = 0, **sizes: int):
        """The tree's `GPT(GPTConfig(...))`, seeded: TINY's sizes, 64 positions and GPT-2's
        vocabulary (50,257) unless `sizes` say otherwise."""
        import torch

        config = dict(TINY, block_size=64, vocab_size=VOCAB)
        config.update(sizes)
        GPT, GPTConfig = self.name("train_gpt2", "GPT"), self.name("train_gpt2", "GPTConfig")
        torch.manual_seed(seed)
        return GPT(GPTConfig(**config))

    def tiny_gpt2(self, **sizes: int) -> Path:
        """A small random GPT-2 saved by transformers (the `[hf]` extra): an offline stand-in for
        OpenAI's weights that `from_pretrained` reads like the real ones. Default sizes: TINY's, 64
        positions, GPT-2's vocabulary."""
        try:
            from transformers import GPT2Config, GPT2LMHeadModel
        except ImportError:
            raise CheckFailed(
                "this check needs transformers: expected it installed (pip install -e '.[hf]')"
            ) from None
        import torch

        config = {**TINY, "n_positions": 64, "vocab_size": VOCAB, **sizes}
        folder = (
            self.scratch()
            / "tiny-gpt2-{n_layer}-{n_head}-{n_embd}-{n_positions}-{vocab_size}".format(**config)
        )
        if not folder.exists():
            torch.manual_seed(0)
            GPT2LMHeadModel(GPT2Config(**config)).save_pretrained(folder)
        return folder


def describe(error: BaseException, tree: Path) -> str:
    """An exception as one line: a check's own verdict as it is; anything else with where in the
    tree it happened."""
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
    message = message if len(message) <= 240 else message[:240] + " ..."
    return f"{type(error).__name__}{where}: {message}"


def environment() -> dict[str, str]:
    """The check process's environment: the user's, with hash seeds fixed, no GPU (the checks are
    CPU-sized) and no network (nothing a check runs may download). One thread each: a tiny model
    gains nothing from more, and the suite runs two checks at once on two cores."""
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return {
        **os.environ,
        "PYTHONHASHSEED": "0",
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        **offline,
    }
