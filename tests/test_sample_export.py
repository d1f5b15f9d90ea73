"""sample.py and export_hf.py on a tiny checkpoint written by train_gpt2.py itself (one step on tiny shakespeare)."""

import subprocess
import sys
from pathlib import Path

import pytest

import sample

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Hello, I'm a language model,"  # the training run's own prompt, so its printed samples are the oracle
TINY = (
    "--data input.txt --n-layer 2 --n-head 2 --n-embd 32 -B 2 -T 32 --total-batch 64 --max-steps 1 "
    "--val-every 0 --hellaswag-every 0 --sample-every 1 --device cpu"
).split()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(checkpoint path, the sample lines the run printed at its last step, with those weights)."""
    log_dir = tmp_path_factory.mktemp("log")
    cmd = [sys.executable, "train_gpt2.py", *TINY, "--log-dir", str(log_dir)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    printed = [line for line in proc.stdout.splitlines() if line.startswith("sample ")]
    assert len(printed) == 4, proc.stdout
    return log_dir / "model_00001.pt", printed


def run_sample(capsys, *argv):
    rc = sample.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err.splitlines()


# ---- sample.py


def test_sample_prints_what_training_printed(capsys, trained):
    checkpoint, printed = trained
    rc, out, _ = run_sample(capsys, checkpoint, "--device", "cpu")  # the defaults: the run's prompt, 4 x 32, seed 42
    assert rc == 0
    assert out == printed


def test_sample_is_seeded(capsys, trained):
    checkpoint, _ = trained
    argv = (checkpoint, "--prompt", "To be", "--num", 2, "--length", 12, "--device", "cpu")
    first, again, other = (run_sample(capsys, *argv, "--seed", seed)[1] for seed in (7, 7, 8))
    assert len(first) == 2 and all(line.startswith(("sample 0: 'To be", "sample 1: 'To be")) for line in first)
    assert first == again
    assert first != other


@pytest.mark.parametrize(
    "argv, words",
    [
        (["missing.pt"], ["no checkpoint at missing.pt"]),
        (["input.txt"], ["input.txt is not a readable checkpoint"]),
        (["CHECKPOINT", "--prompt", "to be or not " * 300], ["the prompt is 1201 tokens", "at most 1024"]),
        (["CHECKPOINT", "--prompt", "the end<|endoftext|>"], ["--prompt:", "<|endoftext|>"]),
        (["CHECKPOINT", "--length", 3], ["the prompt is already 8 tokens", "--length"]),
        (["CHECKPOINT", "--num", 0], ["--num", "at least 1"]),
    ],
)
def test_sample_bad_input_is_one_line(capsys, trained, monkeypatch, argv, words):
    monkeypatch.chdir(ROOT)
    argv = [trained[0] if a == "CHECKPOINT" else a for a in argv]
    try:
        rc, out, err = run_sample(capsys, *argv, "--device", "cpu")
    except SystemExit as e:  # argparse
        rc, err = e.code, capsys.readouterr().err.splitlines()
    assert rc == 1 and len(err) == 1, err
    for word in words:
        assert word in err[0], (word, err[0])
