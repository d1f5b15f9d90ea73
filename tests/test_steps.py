"""Every step of the series (steps/) built into a history and run on CPU, offline.

Each step is checked by running its narration's **Try it** commands in a checkout of that step, made smaller
by the flags in CHECKS below: argparse keeps the last value of a repeated flag, so appending `--max-steps 2` to a
command that says `--max-steps 50` runs the same command, shorter. What needs the network in real life points at
local stand-ins made here: a random GPT-2 saved by transformers (for `--pretrained gpt2`), a synthetic HellaSwag
file, and a local lm-eval task over it. Then each step's output must match its `expect` patterns and `verify`.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from walkthrough.cli import check_series as check
from walkthrough.patches import build, read_steps

ROOT = Path(__file__).resolve().parents[1]
STEPS = ROOT / "steps"
N_STEPS = len(list(STEPS.glob("*.patch")))

TINY = "--n-layer 2 --n-head 2 --n-embd 32 -B 2 -T 32 --max-steps 2"  # a 1.7M-parameter model, two steps
TINY_ACCUM = TINY + " --total-batch 128"  # two micro-steps of B*T = 64 tokens
HELLA = "--model {hf} --data {hellaswag} --limit 4"  # our synthetic HellaSwag and the random transformers GPT-2


@dataclass
class Check:
    extra: str | list[str] = ""  # flags appended to the train_gpt2.py lines (a list: one entry per Try-it line)
    command: list[str] | None = None  # replaces the Try-it lines (only where they cannot run here at all)
    replace: dict[str, str] = field(default_factory=dict)  # text replaced in the Try-it lines
    expect: list[str] = field(default_factory=list)  # regexes the output must contain
    verify: Callable[[str, Path], None] | None = None  # more checks on (output, the step's folder)


def numbers(pattern: str, text: str) -> list[float]:
    return [float(x) for x in re.findall(pattern, text)]


def losses(out: str) -> list[float]:
    return numbers(r"step +\d+ \| loss ([\d.]+)", out)


def loss_drops(by: float):
    def verify(out, _):
        found = losses(out)
        assert found and found[-1] < found[0] - by, f"loss did not drop by {by}: {found}"

    return verify


def near_ln_vocab(out, _):
    (loss,) = numbers(r"loss ([\d.]+) \(uniform", out)
    assert abs(loss - math.log(50257)) < 0.5, loss


def matches_transformers(out, _):
    (diff,) = numbers(r"largest difference from transformers: ([\d.e+-]+)", out)
    assert diff < 1e-4, diff


def flops_of_gpt2(out, _):
    (gflops,) = numbers(r"([\d.]+) GFLOPs per token", out)
    assert 0.8 < gflops < 0.9, gflops  # 6 * ~124M weights + attention: ~0.85 GFLOPs per token at T = 1024


def logged(*kinds):
    def verify(_, folder):
        logs = list(folder.glob("log/*/log.txt"))
        assert logs, "no log/*/log.txt"
        text = logs[0].read_text()
        for kind in kinds:
            assert f" {kind} " in text, f"no '{kind}' line in {logs[0]}"

    return verify


def three_mistakes_three_lines(out, _):
    assert out.count("exit code 1") == 3 and "Traceback" not in out, out


# CHECK_STEPS=3,7 runs only those steps' checks (handy while editing one step); all of them by default
ONLY = {int(n) for n in os.environ.get("CHECK_STEPS", "").split(",") if n.strip()}

STEP_LINE = r"step +\d+ \| loss [\d.]+"
# step number -> how it is checked (every step has an entry: a new step needs one too)
CHECKS: dict[int, Check] = {
    1: Check("--pretrained {hf}", expect=[r"loaded .*: 29 tensors"]),
    2: Check("--pretrained {hf}", verify=matches_transformers),
    3: Check(
        "--pretrained {hf} --num-samples 2 --max-length 12",
        expect=[r"(?m)^> Hello, I'm a language model,.*\n> Hello, I'm a language model,"],
    ),
    4: Check("--num-samples 1 --max-length 10", expect=["using device: cpu", r"(?m)^> Hello, I'm a language model,"]),
    5: Check("-B 2 -T 16", expect=[r"logits \(2, 16, 50257\)"], verify=near_ln_vocab),
    6: Check("--n-layer 2 --n-head 2 --n-embd 64 --max-steps 15", verify=loss_drops(2.0)),
    7: Check(TINY, expect=[r"input\.txt: 338,025 tokens", STEP_LINE]),
    8: Check(TINY, expect=[r"1\.67M parameters", STEP_LINE]),  # untied, the same model has 3.27M
    9: Check(TINY, expect=[STEP_LINE]),
    10: Check(TINY, expect=[r"dt [\d.]+ms", "mean step after the first"]),
    11: Check(TINY, expect=[r"\| bfloat16 \|", STEP_LINE]),
    12: Check(TINY + " --no-compile", expect=[STEP_LINE]),  # compiling costs minutes on a small CPU
    13: Check(TINY, expect=[STEP_LINE]),
    14: Check(TINY, expect=[STEP_LINE]),
    15: Check(TINY, expect=[r"norm [\d.]+"]),
    16: Check(TINY + " --warmup-steps 1", expect=[r"lr 1\.0000e-03"]),
    17: Check(TINY, expect=[STEP_LINE]),
    18: Check(TINY_ACCUM, expect=[r"grad accum 2", STEP_LINE]),
    19: Check(TINY_ACCUM, expect=[r"on cpu x2 \| float32 \| grad accum 1", STEP_LINE]),
    20: Check("", expect=[r"shakespeare_shards: 4 shards, 338,026 tokens"]),
    21: Check(TINY_ACCUM, expect=[STEP_LINE]),
    22: Check(TINY_ACCUM + " --val-every 1 --val-steps 1", expect=[r"validation loss: [\d.]+"]),
    23: Check(TINY_ACCUM + " --val-steps 1 --sample-every 2", expect=[r"sample 0: .Hello, I\\?'m a language model,"]),
    24: Check(
        ["", HELLA, TINY_ACCUM + " --val-every 1 --val-steps 1", ""],
        expect=[r"acc_norm [\d.]+"],
        verify=logged("train", "val"),
    ),
    25: Check(
        ["", TINY_ACCUM + " --val-steps 1 --checkpoint-every 1", ""], expect=[r"model_00001\.pt\s+model_00002\.pt"]
    ),
    # the SIGTERM comes late (a busy machine must not stop the run before its first checkpoint): the two steps
    # finish first, and --resume continues to step 4; test_train.py sends a real SIGTERM
    26: Check(
        ["", TINY_ACCUM, TINY_ACCUM + " --max-steps 4"],
        replace={"-s TERM 20 ": "-s TERM 150 "},
        expect=["resumed from step 2", r"step +3 \| loss"],
    ),
    # the Try-it compiles (minutes on a small CPU): here, the training loop's fixed-shape HellaSwag, uncompiled
    27: Check(
        command=[
            "python train_gpt2.py --data input.txt " + TINY_ACCUM + " --val-every 0 --sample-every 0 "
            "--hellaswag-every 2 --hellaswag-data {hellaswag}"
        ],
        expect=[r"HellaSwag accuracy: \d+/8="],
    ),
    28: Check(TINY_ACCUM + " --val-steps 1", expect=[r"validation loss: [\d.]+"]),
    29: Check(
        [
            "",
            TINY_ACCUM + " --val-steps 1",
            "--checkpoint log/s29/model_00002.pt --harness hellaswag_local --include-path {tasks} --limit 4",
        ],
        expect=[r"\|hellaswag_local\|", r"acc_norm [\d.]+"],
    ),
    30: Check("", verify=flops_of_gpt2),
    31: Check("--max-steps 2 --val-every 1 --val-steps 1 --sample-every 0", expect=[STEP_LINE, "validation loss"]),
    # the preset's learning rate: 3e-4 / 715 warmup steps at step 0
    32: Check("", expect=[r"77\.75M parameters on cpu", r"step +0 \| loss [\d.]+ \| lr 4\.1958e-07"]),
    33: Check(
        ["--max-steps 2 --val-every 0 --sample-every 0", "--data {hellaswag}"],
        replace={"model_00150.pt": "model_00002.pt"},
        expect=[r"8 examples, log/cpu/model_00002\.pt on cpu", r"acc_norm [\d.]+"],
    ),
    34: Check(
        expect=[
            r"train_gpt2\.py: error: argument --batch-size/-B: expected a whole number of at least 1",
            r"--n-embd 128 must be a multiple of --n-head 3",
            r"empty\.txt holds 0 tokens, fewer than one batch",
        ],
        verify=three_mistakes_three_lines,
    ),
}


def try_it(narration: str) -> list[str]:
    """The command lines of the ```bash block after **Try it**."""
    match = re.search(r"\*\*Try it\*\*.*?```(?:bash|sh)?\n(.*?)```", narration, re.S)
    assert match, "no **Try it** block"
    return [line for line in match.group(1).splitlines() if line.strip()]


def command_lines(n: int, narration: str, values: dict) -> list[str]:
    spec = CHECKS[n]
    lines = [line.format(**values) for line in spec.command] if spec.command else try_it(narration)
    for old, new in spec.replace.items():
        assert any(old in line for line in lines), f"step {n}: {old!r} is not in its Try-it"
        lines = [line.replace(old, new) for line in lines]
    if isinstance(spec.extra, list):
        extras = spec.extra
    else:
        extras = [spec.extra if " train_gpt2.py" in line else "" for line in lines]
    assert len(extras) == len(lines), f"step {n}: {len(extras)} extras for {len(lines)} Try-it lines"
    out = []
    for line, extra in zip(lines, extras):
        if extra:
            line = f"{line} {extra.format(**values)}"
        # `python` and `torchrun` as the command, or as the command of `timeout ...`: this test's interpreter
        line = re.sub(r"(^|\s)python ", rf"\g<1>{sys.executable} ", line, count=1)
        line = re.sub(r"(^|\s)torchrun ", rf"\g<1>{sys.executable} -m torch.distributed.run ", line, count=1)
        out.append(line)
    return out


def run_step(n: int, narration: str, history: Path, work: Path, values: dict) -> tuple[bool, str, float]:
    folder = work / f"step-{n:02d}"
    tar = subprocess.run(["git", "archive", f"step-{n:02d}"], cwd=history, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(folder, filter="data")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONWARNINGS": "ignore",
    }
    log, started = [], time.time()
    try:
        for line in command_lines(n, narration, values):
            proc = subprocess.run(line, shell=True, cwd=folder, env=env, capture_output=True, text=True, timeout=180)
            log.append(f"$ {line}\n{proc.stdout}{proc.stderr[-2000:]}")
            if proc.returncode != 0:
                return False, "\n".join(log) + f"\nexit code {proc.returncode}", time.time() - started
        out = "\n".join(log)
        for pattern in CHECKS[n].expect:
            assert re.search(pattern, out), f"output lacks {pattern!r}"
        if CHECKS[n].verify:
            CHECKS[n].verify(out, folder)
    except Exception as error:  # noqa: BLE001  reported as this step's failure, not the whole fixture's
        return False, "\n".join(log) + f"\n{type(error).__name__}: {error}", time.time() - started
    return True, "\n".join(log), time.time() - started


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    into = tmp_path_factory.mktemp("series") / "history"
    build(STEPS, into)
    return into


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> dict:
    """Local data for what needs the network in real life."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("stand-ins")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_positions=128, n_embd=32, n_layer=2, n_head=2)  # 50257 tokens, as GPT-2
    transformers.GPT2LMHeadModel(config).save_pretrained(folder / "tiny-gpt2")
    paragraphs = [p.replace("\n", " ") for p in (ROOT / "input.txt").read_text().split("\n\n")[:40]]
    with open(folder / "hellaswag.jsonl", "w") as f:
        for i in range(8):
            ctx, endings = paragraphs[5 * i][:120], [p[:60] for p in paragraphs[5 * i + 1 : 5 * i + 5]]
            f.write(json.dumps({"ctx": ctx, "endings": endings, "label": i % 4}) + "\n")
    (folder / "tasks").mkdir()
    (folder / "tasks" / "hellaswag_local.yaml").write_text(
        "task: hellaswag_local\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    validation: {folder / 'hellaswag.jsonl'}\noutput_type: multiple_choice\nvalidation_split: validation\n"
        "doc_to_text: ctx\ndoc_to_choice: endings\ndoc_to_target: label\nmetric_list:\n"
        "  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
        "  - metric: acc_norm\n    aggregation: mean\n    higher_is_better: true\n"
    )
    return {"hf": folder / "tiny-gpt2", "hellaswag": folder / "hellaswag.jsonl", "tasks": folder / "tasks"}


@pytest.fixture(scope="module")
def results(history, stand_ins, tmp_path_factory) -> dict[int, tuple[bool, str, float]]:
    """Every step's check, two at a time (the CPU has two cores; each run uses one thread)."""
    work = tmp_path_factory.mktemp("steps")
    narrations = {n: patch.narration for n, patch in enumerate(read_steps(STEPS), 1) if not ONLY or n in ONLY}
    started = time.time()
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {n: pool.submit(run_step, n, narrations[n], history, work, stand_ins) for n in narrations}
        done = {n: future.result() for n, future in futures.items()}
    print(
        f"\nall {len(done)} step checks: {time.time() - started:.0f}s "
        f"({', '.join(f'{n}:{t:.0f}s' for n, (_, _, t) in done.items())})"
    )
    return done


def test_series_is_sound():
    assert check(STEPS, ROOT) == []


def test_every_step_has_a_check():
    assert sorted(CHECKS) == list(range(1, N_STEPS + 1))


def test_checkout_every_step(history):
    for n in range(N_STEPS + 1):
        tag = f"step-{n:02d}"
        subprocess.run(["git", "checkout", "-q", tag], cwd=history, check=True)
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=history, capture_output=True, text=True).stdout
        tagged = subprocess.run(["git", "rev-parse", f"{tag}^{{commit}}"], cwd=history, capture_output=True, text=True)
        assert head == tagged.stdout
    subprocess.run(["git", "checkout", "-q", "main"], cwd=history, check=True)


@pytest.mark.parametrize("n", range(1, N_STEPS + 1), ids=lambda n: f"step-{n:02d}")
def test_step_runs(results, n):
    if n not in results:
        pytest.skip(f"not in CHECK_STEPS={os.environ['CHECK_STEPS']}")
    ok, log, _ = results[n]
    assert ok, f"step {n:02d}:\n{log[-6000:]}"
