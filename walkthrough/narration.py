"""A step's narration as data: its Try-it command, its offline stand-ins, the output it promises.

Every narration has one **Try it** block (the command, as a learner types it) and one **What you
should see** block (that command's output, trimmed). `matches` decides whether a real run's output
keeps that promise:

- a line that is just `...` stands for any number of lines; other lines match consecutive output
  lines, in order;
- a line ending in `...` matches any output line that starts with the text before it;
- numbers are compared as numbers: times and throughputs (`12.3ms`, `4 s`, `tok/sec 1718`) match any
  value, other numbers must agree within the block's stated tolerance (`numbers within 2%` in its
  heading) or else to within two units of their last printed digit and one part in a thousand,
  whichever is wider.

A command that needs the network or a GPU says how the checks run it offline, on one line after the
Try-it block: **Stand-in**: `--pretrained gpt2` → `--pretrained stand-ins/tiny-gpt2` (a random GPT-2
saved by transformers); and then its output block's heading must say it is stand-in output.
"""

import math
import re
import shlex
from dataclasses import dataclass, field

TRY_IT = re.compile(r"^\*\*Try it\*\*.*?\n```(?:bash|sh)?\n(.*?)```", re.S | re.M)
SEE = re.compile(r"^\*\*What you should see\*\*(.*?)\n+```[a-z]*\n(.*?)```", re.S | re.M)
STAND_IN = re.compile(r"^\*\*Stand-in\*\*[^\n]*", re.M)
SWAP = re.compile(r"`([^`]+)` → `([^`]+)`")
TOLERANCE = re.compile(r"numbers within ([\d.]+)%")
EXIT = re.compile(r"exits with status (\d+)")
# what an argument list cannot express: pipes, redirects, substitutions
SHELL_ONLY = re.compile(r"[|;<>`$]|&(?!&)")
# && outside quotes: the rest is balanced
AND = re.compile(r"&&(?=(?:[^'\"]|'[^']*'|\"(?:[^\"\\]|\\.)*\")*$)")
# inside quotes only $ and ` still mean something to a shell
QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")

NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?")
UNIT_AFTER = re.compile(r"\s?(?:ms|s|sec|min|tok/s|tok/sec|tokens/s)\b")
LABEL_BEFORE = re.compile(r"(?:dt|tok/sec|tok/s|mfu|MFU)\s*[:=]?\s*$")


class NarrationError(ValueError):
    """A narration without the parts the checks need, or with a command they cannot run."""


@dataclass
class Command:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # a leading VAR=value


@dataclass
class Promise:
    commands: list[str]  # the Try-it lines, as written
    expected: list[str]  # the lines of the What-you-should-see block
    heading: str  # the text after **What you should see** on its line
    swaps: list[tuple[str, str]]  # stand-ins: (text in the Try-it, what the checks run instead)

    @property
    def tolerance(self) -> float | None:
        found = TOLERANCE.search(self.heading)
        return float(found.group(1)) / 100 if found else None

    @property
    def exit_status(self) -> int:
        found = EXIT.search(self.heading)
        return int(found.group(1)) if found else 0

    def checked_commands(self) -> list[str]:
        """The Try-it lines with their stand-ins swapped in: what the checks run."""
        lines = self.commands
        for old, new in self.swaps:
            # whole words: `gpt2` is not in `train_gpt2.py`
            whole = re.compile(rf"(?<!\S){re.escape(old)}(?!\S)")
            if not any(whole.search(line) for line in lines):
                raise NarrationError(f"stand-in {old!r} is not a word of the Try-it")
            lines = [whole.sub(new.replace("\\", "\\\\"), line) for line in lines]
        return lines


def try_it(narration: str) -> list[str]:
    """The Try-it block's command lines, as written (a line continued with a backslash is one line),
    or [] when the narration has no Try-it block."""
    found = TRY_IT.search(narration)
    if not found:
        return []
    # a line continued with a backslash is one command
    text = re.sub(r"\s*\\\n\s*", " ", found.group(1))
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def read(narration: str) -> Promise:
    commands, see = try_it(narration), SEE.search(narration)
    if not commands:
        raise NarrationError("no **Try it** block (or one without a command)")
    if not see:
        raise NarrationError("no **What you should see** block")
    swaps = [swap for line in STAND_IN.findall(narration) for swap in SWAP.findall(line)]
    heading = see.group(1).strip()
    if swaps and "stand-in" not in heading.lower():
        raise NarrationError(
            "the output of a stand-in run must be labelled as stand-in output in its heading"
        )
    expected = see.group(2).rstrip("\n").splitlines()
    return Promise(commands, expected, heading, swaps)


def split(line: str) -> list[Command]:
    """One Try-it line as argument lists: `a && b` runs a, then b if a succeeded; `VAR=value cmd`
    sets VAR."""
    unquoted = QUOTED.sub(
        lambda m: "" if m.group()[0] == "'" else re.sub(r"[^$`]", "", m.group()), line
    )
    if SHELL_ONLY.search(unquoted.replace("&&", "")):
        raise NarrationError(
            f"not a plain command (pipes, redirects and substitutions need a shell): {line}"
        )
    commands = []
    for part in AND.split(line):
        try:
            words = shlex.split(part)
        except ValueError as error:  # an unclosed quote: what a shell would reject too
            raise NarrationError(f"not a command a shell could read ({error}): {line}") from None
        env = {}
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            name, value = words.pop(0).split("=", 1)
            env[name] = value
        if not words:
            raise NarrationError(f"an empty command in: {line}")
        commands.append(Command(words, env))
    return commands


# --------------------------------------------------------------------------------------------------
# comparing an output with the promise


def _pieces(line: str) -> tuple[list[str], list[tuple[str, bool]]]:
    """A line's text between numbers, and each number with whether it is a time or a throughput."""
    texts, numbers, start = [], [], 0
    for found in NUMBER.finditer(line):
        before, after = line[: found.start()], line[found.end() :]
        timing = bool(UNIT_AFTER.match(after) or LABEL_BEFORE.search(before))
        texts.append(line[start : found.start()])
        numbers.append((found.group(), timing))
        start = found.end()
    texts.append(line[start:])
    return [" ".join(t.split()) for t in texts], numbers


def _close(expected: str, found: str, tolerance: float | None) -> bool:
    e, f = float(expected.replace(",", "")), float(found.replace(",", ""))
    if not (math.isfinite(e) and math.isfinite(f)):  # 1.5e400 reads as inf: only inf matches it
        return e == f
    if tolerance is not None:
        return abs(f - e) <= tolerance * abs(e) + 1e-12
    mantissa = expected.replace(",", "").split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    scale = 10 ** int(expected.split("e")[1]) if "e" in expected else 1
    return abs(f - e) <= max(2 * 10**-decimals * scale, 1e-3 * abs(e))


def line_matches(expected: str, found: str, tolerance: float | None = None) -> bool:
    expected, found = expected.rstrip(), found.rstrip()
    if expected.endswith("..."):
        expected = expected[:-3].rstrip()
        e_texts, e_numbers = _pieces(expected)
        f_texts, f_numbers = _pieces(found)
        # compare the found line cut to as many numbers as the expected prefix holds
        if len(f_numbers) < len(e_numbers):
            return False
        f_texts = f_texts[: len(e_numbers) + 1]
        f_texts[-1] = f_texts[-1][: len(e_texts[-1])] if e_texts[-1] else ""
        f_numbers = f_numbers[: len(e_numbers)]
    else:
        e_texts, e_numbers = _pieces(expected)
        f_texts, f_numbers = _pieces(found)
    if e_texts != f_texts or len(e_numbers) != len(f_numbers):
        return False
    return all(
        timing or _close(e, f, tolerance) for (e, timing), (f, _) in zip(e_numbers, f_numbers)
    )


def mismatch(promise: Promise, output: str) -> str | None:
    """None when the output keeps the promise; else the first expected line that nothing matched."""
    lines = output.splitlines()
    chunks, chunk = [], []
    for line in promise.expected:
        if line.strip() == "...":
            chunks.append(chunk)
            chunk = []
        else:
            chunk.append(line)
    chunks.append(chunk)
    at = 0
    for chunk in (c for c in chunks if c):
        for start in range(at, len(lines) - len(chunk) + 1):
            if all(line_matches(e, f, promise.tolerance) for e, f in zip(chunk, lines[start:])):
                at = start + len(chunk)
                break
        else:
            return where_it_breaks(chunk, lines, at, promise.tolerance)
    return None


def where_it_breaks(chunk: list[str], lines: list[str], at: int, tolerance: float) -> str:
    """Why the expected lines `chunk` are not found together in lines[at:]: the first of them no
    output line matches; or, when each is there but not one after the other, the output line where
    the longest run of them breaks."""
    for expected in chunk:
        if not any(line_matches(expected, line, tolerance) for line in lines[at:]):
            return f"no output line matches {expected!r} (after output line {at})"
    longest, start = 0, at
    for first in range(at, len(lines)):
        n = 0
        while (
            n < len(chunk)
            and first + n < len(lines)
            and line_matches(chunk[n], lines[first + n], tolerance)
        ):
            n += 1
        if n > longest:
            longest, start = n, first
    found = lines[start + longest] if start + longest < len(lines) else None
    return (
        f"output line {start + longest + 1} is {found!r}, where {chunk[longest]!r} was expected"
        if found is not None
        else f"the output ends where {chunk[longest]!r} was expected"
    ) + f" (right after {chunk[longest - 1]!r})"
