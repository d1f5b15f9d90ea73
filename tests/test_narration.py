"""walkthrough/narration.py: how a narration's promise is read and held against a real output."""

import pytest

from walkthrough.narration import NarrationError, line_matches, mismatch, read, split

NARRATION = """Title

Prose.

**Requires**: CPU only.

**Try it**

```bash
python train_gpt2.py --pretrained gpt2 \\
    --max-steps 2
# a comment line is not run
```

**Stand-in** (what the checks run, offline): `gpt2` → `stand-ins/tiny-gpt2` (a random GPT-2)

**What you should see** (stand-in output, numbers within 1%)

```
loaded...
...
step     1 | loss 10.00 | dt 100.0ms
```
"""


def test_read_finds_the_command_the_stand_in_and_the_block():
    promise = read(NARRATION)
    assert promise.commands == ["python train_gpt2.py --pretrained gpt2 --max-steps 2"]
    assert promise.checked_commands() == [
        "python train_gpt2.py --pretrained stand-ins/tiny-gpt2 --max-steps 2"
    ]
    assert promise.expected == ["loaded...", "...", "step     1 | loss 10.00 | dt 100.0ms"]
    assert promise.tolerance == pytest.approx(0.01)
    assert promise.exit_status == 0


def test_stand_in_output_must_say_so():
    with pytest.raises(NarrationError, match="stand-in output"):
        read(NARRATION.replace("(stand-in output, numbers within 1%)", ""))


@pytest.mark.parametrize("missing", ["**Try it**", "**What you should see**"])
def test_a_narration_without_its_parts_is_an_error(missing):
    with pytest.raises(NarrationError, match="no"):
        read(NARRATION.replace(missing, "**Something else**"))


def test_the_promise_holds_with_elided_lines_and_other_timings():
    output = (
        "warning: noise\n"
        "loaded gpt2 (124M)\n"
        "step     0 | loss 10.90 | dt 900.1ms\n"
        "step     1 | loss 10.05 | dt 3.2ms\n"
    )
    assert mismatch(read(NARRATION), output) is None


def test_a_number_outside_the_tolerance_breaks_the_promise():
    output = "loaded\nstep     1 | loss 10.20 | dt 100.0ms\n"
    assert "step     1" in mismatch(read(NARRATION), output)


def test_lines_without_an_ellipsis_between_them_must_be_consecutive():
    promise = read(NARRATION.replace("loaded...\n...\n", "loaded...\n"))
    assert mismatch(promise, "loaded\nstep     1 | loss 10.00 | dt 1ms\n") is None
    assert (
        mismatch(promise, "loaded\nsomething between\nstep     1 | loss 10.00 | dt 1ms\n")
        is not None
    )


@pytest.mark.parametrize(
    "expected, found, same",
    [
        ("loss 10.167062", "loss 10.167063", True),  # one unit of the last digit
        ("loss 10.167062", "loss 10.187062", False),  # 0.2%: more than 0.1% and two units
        ("loss 0.0012", "loss 0.0015", False),  # three units of the last digit
        ("1,115,394 characters", "1115394 characters", True),
        ("1,115,394 characters", "1,115,395 characters", True),  # within 0.1%
        ("338,025 tokens", "348,025 tokens", False),
        # times and throughputs are masked
        ("took 12.0 s, 1,718 tok/sec", "took 93.5 s, 400 tok/sec", True),
        ("tokens: 10", "tokens: 10 more", False),  # the text around numbers must be the same
        ("acc 0.2500 acc_norm...", "acc 0.2500 acc_norm 0.5000", True),
        ("acc 0.2500 acc_norm...", "acc 0.5000 acc_norm 0.5000", False),
    ],
)
def test_line_matches(expected, found, same):
    assert line_matches(expected, found) is same


def test_split_runs_commands_as_argument_lists():
    first, second = split("TORCH_LOGS=recompiles python a.py --x 'two words' && ls log/")
    assert first.env == {"TORCH_LOGS": "recompiles"} and first.argv == [
        "python",
        "a.py",
        "--x",
        "two words",
    ]
    assert second.argv == ["ls", "log/"]


def test_and_inside_quotes_is_text():
    first, second = split("""python -c "print(1 and 2 && 3)" && python -c 'x && y'""")
    assert first.argv == ["python", "-c", "print(1 and 2 && 3)"] and second.argv == [
        "python",
        "-c",
        "x && y",
    ]


def test_quoted_python_may_hold_what_a_shell_would_read():
    (command,) = split("""python -c "import torch; print(1 | 2 > 0)" 'a;b'""")
    assert command.argv == ["python", "-c", "import torch; print(1 | 2 > 0)", "a;b"]


@pytest.mark.parametrize(
    "line",
    [
        "python a.py | head",
        "python a.py > out.txt",
        "echo $HOME",
        'echo "$HOME"',
        "a; b",
        "a &",
        "a 'b' | c",
    ],
)
def test_split_refuses_what_needs_a_shell(line):
    with pytest.raises(NarrationError, match="not a plain command"):
        split(line)


def test_a_number_too_large_for_a_float_is_compared_not_crashed_on():
    assert line_matches("loss 1.5e400", "loss 1.5e400") and not line_matches(
        "loss 1.5e400", "loss 2"
    )


def test_an_unclosed_quote_is_a_narration_error_not_a_crash():
    with pytest.raises(NarrationError, match="not a command a shell could read"):
        split("python -c 'print(1)")


def test_the_reader_plans_an_unclosed_quote_as_a_line_it_will_not_run():
    from walkthrough.runner import plan

    narration = NARRATION.replace(
        "python train_gpt2.py --pretrained gpt2 \\\n    --max-steps 2", "python -c 'print(1)"
    )
    [planned] = plan(narration)
    assert planned.commands == () and "not a command a shell could read" in planned.refused
