"""reproduce.py, the whole day in one command, and report_card.py, its report: on tiny shakespeare at the CPU preset
with two gloo processes, uninterrupted, then interrupted at every stage boundary and rerun to the same report."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import report_card
from fixtures import synthetic_examples
from report_card import STAGES

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread a process: the comparisons below are exact
SMALL = "--preset cpu --n-layer 2 --n-head 2 --n-embd 32 --max-steps 4 --val-every 2 --total-batch 1024 --device cpu"
TIMINGS = ("seconds", "tok_s", "mfu", "gpu_hours", "cost")


# run in the folder, with the same relative paths in each: two reproductions' reports can be equal, command included
COMMAND = [sys.executable, str(ROOT / "reproduce.py"), "--nproc", "2", "--files", str(ROOT / "input.txt")]
COMMAND += [
    "--shard-size",
    "50000",
    *SMALL.split(),
    "--data",
    "shards",
    "--log-dir",
    "log",
    "--hellaswag-data",
    "hellaswag.jsonl",
]


def folder_for(folder):
    """folder, with the HellaSwag file the command names."""
    examples = synthetic_examples(6)
    (folder / "hellaswag.jsonl").write_text("".join(json.dumps(e) + "\n" for e in examples))
    return folder


def reproduce(folder, **kwargs):
    return subprocess.run(COMMAND, cwd=folder, env=ENV, capture_output=True, text=True, timeout=600, **kwargs)


def without_timings(card):
    card = json.loads(json.dumps(card))
    del card["written"]
    for stage in card["stages"].values():
        del stage["seconds"]
    for key in TIMINGS:
        del card["run"][key]
    return card


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted reproduction: (its folder, its first run, report.json)."""
    folder = folder_for(tmp_path_factory.mktemp("straight"))
    done = reproduce(folder)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder, done, json.loads((folder / "log" / "report.json").read_text())


def test_the_whole_day_runs_every_stage_in_order(straight):
    folder, done, card = straight
    started = re.findall(r"^== (\d)/8 (\w+): (?!done)", done.stdout, re.M)
    assert started == [(str(i), stage) for i, stage in enumerate(STAGES, 1)]
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("reproduce.py: done: log/report.md")
    assert all(stage["done"] for stage in card["stages"].values())
    for stage in STAGES:  # each stage's output kept
        assert (folder / "log" / "stages" / f"{stage}.txt").read_text().startswith("== ")
    assert (folder / "log" / "hf" / "config.json").exists() and (folder / "log" / "curves.png").exists()


def test_every_figure_of_the_report_is_in_a_file_of_the_run(straight):
    folder, _, card = straight
    log = folder / "log"
    lines = [line.split() for line in (log / "log.txt").read_text().splitlines() if not line.startswith("#")]
    val = [(int(s), float(v)) for s, kind, v in lines if kind == "val"]
    assert card["results"]["val_loss"] | {"targets": None} == {
        "value": val[-1][1],
        "step": 4,
        "comparable": False,  # tiny shakespeare, not FineWeb-Edu
        "targets": None,
    }
    hellaswag = (log / "stages" / "hellaswag.txt").read_text()
    assert f"acc_norm {card['results']['hellaswag']['acc_norm']:.4f}" in hellaswag
    assert card["results"]["hellaswag"]["examples"] == 6
    checkpoint = torch.load(log / "model_00004.pt", weights_only=True, map_location="cpu")
    assert card["run"]["steps"] == checkpoint["step"] == 4 and card["run"]["tokens"] == 4 * 1024
    tok_s = sorted(float(v) for _, kind, v in lines if kind == "tok_s")
    assert card["run"]["tok_s"] == (tok_s[1] + tok_s[2]) / 2  # the median of the 4 steps'
    assert card["run"]["gpu_hours"] is None and card["run"]["mfu"] is None  # a CPU run
    shards = sorted((folder / "shards").glob("*.npy"))
    assert card["data"]["shards"] == len(shards) == 7
    train = sum(len(np.load(p)) for p in shards if "_train_" in p.name)
    assert (card["data"]["train_tokens"], card["data"]["val_tokens"]) == (train, 50000)
    assert card["data"]["manifest_sha256"] == report_card.sha256_file(folder / "shards" / "manifest.json")
    samples = re.findall(r"^sample \d: (.*)$", (log / "stages" / "samples.txt").read_text(), re.M)
    assert card["samples"] == samples and len(samples) == 4
    assert card["environment"]["torch"] == torch.__version__ and card["environment"]["gpus"] == "none"
    assert card["command"].startswith(f"python {ROOT / 'reproduce.py'} --nproc 2 --files {ROOT / 'input.txt'}")
    report = (log / "report.md").read_text()
    for figure in (f"{val[-1][1]:.4f}", "3.2924", "0.2955", "0.337", samples[0], card["data"]["manifest_sha256"]):
        assert figure in report


def test_a_rerun_of_a_finished_reproduction_redoes_nothing(straight):
    folder, _, card = straight
    again = reproduce(folder)
    assert again.returncode == 0, again.stderr
    assert re.findall(r"^== \d/8 (\w+): done$", again.stdout, re.M) == STAGES  # each found done, none run
    assert without_timings(json.loads((folder / "log" / "report.json").read_text())) == without_timings(card)


def descendants(pid):
    """pid's child processes and theirs (torchrun's workers run in sessions of their own)."""
    try:
        children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return [p for child in children for p in (child, *descendants(child))]


def kill_everything(proc):
    """What a preempted node does to a reproduction: every process of it killed at once, nothing cleaned up."""
    for pid in [proc.pid, *descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def test_killed_at_every_stage_boundary_and_stopped_by_ctrl_c_the_rerun_gives_the_same_report(straight, tmp_path):
    folder = folder_for(tmp_path)
    for stage in STAGES[:-1]:
        proc = subprocess.Popen(
            COMMAND, cwd=folder, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for line in proc.stdout:
            if re.match(rf"== \d/8 {stage}: done", line):  # said once its record is on disk
                kill_everything(proc)
                break
        else:
            pytest.fail(f"{stage} never finished: {proc.wait()}")
        if stage == "preflight":  # then a Ctrl-C in the middle of the run: the workers checkpoint and stop
            proc = subprocess.Popen(
                COMMAND, cwd=folder, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for line in proc.stdout:
                if line.startswith("step     1 "):
                    proc.send_signal(signal.SIGINT)
                    break
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 130 and "Traceback" not in out + err, out + err
            assert err.endswith("reproduce.py: stopped in stage train (SIGINT): rerun the same command to continue\n")
            assert "stopped at step 2: resume with --resume" in out
    finished = reproduce(folder)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert re.findall(r"^== \d/8 (\w+): done$", finished.stdout, re.M) == STAGES[:-1]
    card = json.loads((folder / "log" / "report.json").read_text())
    assert without_timings(card) == without_timings(straight[2])
