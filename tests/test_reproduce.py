"""reproduce.py, the whole day in one command, and report_card.py, its report: on tiny shakespeare
at the CPU preset with two gloo processes, uninterrupted, then interrupted at every stage boundary
and rerun to the same report, then rerun after what its stages depend on changed (a retrained or
longer run, other data, damaged records); every path named like a glob pattern, so the whole CPU
path (shards, verify, preflight, training and its resume, HellaSwag, samples, curves, export) takes
paths as data."""

import errno
import json
import os
import pty
import re
import shlex
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from fixtures import synthetic_examples
from helpers import ROOT
from tools import report_card
from tools.report_card import STAGES
from tools.reproduce import workers

# one thread a process: the comparisons below are exact; the project root on the path: the day runs
# in folders of its own, as `python -m tools.reproduce` from the root would
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
SMALL = (
    "--preset cpu --n-layer 2 --n-head 2 --n-embd 32 --max-steps 4 --val-every 2 "
    "--total-batch 1024 --device cpu"
)
TIMINGS = ("seconds", "tok_s", "mfu", "day_gpu_hours", "cost")


# Every reproduction runs in a folder of its own, with the same relative paths, so that two reports
# can be equal (the command included), on the same corpus, named by its absolute path. Paths are
# data, never patterns: every name holds `[ ] * ?` or spaces, beside decoys that those names would
# match as glob patterns.
CORPUS = "in[1].txt"
FLAGS = [
    "--nproc",
    "2",
    "--shard-size",
    "50000",
    *SMALL.split(),
    "--data",
    "sh[1] *",
    "--log-dir",
    "run[1] ?",
]
FLAGS += ["--export", "gpt2 [ours]", "--hellaswag-data", "hella[1].jsonl"]
# what a folder holds after a reproduction
MADE = ["hella[1].jsonl", "sh1 x", "sh[1] *", "run[1] ?", "gpt2 [ours]"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """tiny shakespeare as my [1] * ? corpus/in[1].txt, beside a decoy in1.txt."""
    folder = tmp_path_factory.mktemp("corpus") / "my [1] * ? corpus"
    folder.mkdir()
    (folder / CORPUS).write_text((ROOT / "input.txt").read_text())
    (folder / "in1.txt").write_text("a decoy that in[1].txt would match as a pattern\n")
    return folder / CORPUS


def command(corpus):
    return [sys.executable, "-m", "tools.reproduce", "--files", str(corpus), *FLAGS]


def folder_for(folder):
    """A folder to reproduce in: its name and the names in it like patterns, with the HellaSwag file
    the command names, and a decoy that `sh[1] *` would match."""
    folder = folder / "day [1] *"
    folder.mkdir()
    examples = synthetic_examples(6)
    (folder / "hella[1].jsonl").write_text("".join(json.dumps(e) + "\n" for e in examples))
    (folder / "sh1 x").mkdir()
    return folder


def reproduce(argv, folder, **kwargs):
    return subprocess.run(
        argv, cwd=folder, env=ENV, capture_output=True, text=True, timeout=600, **kwargs
    )


def without_timings(card):
    card = json.loads(json.dumps(card))
    del card["written"], card["stages"]  # the stages' times
    for key in TIMINGS:
        del card["run"][key]
    return card


@pytest.fixture(scope="module")
def straight(tmp_path_factory, corpus):
    """An uninterrupted reproduction: (its folder, its first run, report.json)."""
    folder = folder_for(tmp_path_factory.mktemp("straight"))
    done = reproduce(command(corpus), folder)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder, done, json.loads((folder / "run[1] ?" / "report.json").read_text())


def test_the_whole_day_runs_every_stage_in_order(straight, corpus):
    folder, done, card = straight
    started = re.findall(r"^== (\d)/8 (\w+): (?!done)", done.stdout, re.M)
    assert started == [(str(i), stage) for i, stage in enumerate(STAGES, 1)]
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("reproduce.py: done: run[1] ?/report.md")
    assert list(card["stages"]) == STAGES
    log = folder / "run[1] ?"
    for stage in STAGES:  # each stage's output kept
        assert (log / "stages" / f"{stage}.txt").read_text().startswith("== ")
    assert (folder / "gpt2 [ours]" / "config.json").exists() and (log / "curves.png").exists()
    # every name was a name: nothing written beside them, the decoys untouched and empty
    assert sorted(p.name for p in folder.iterdir()) == sorted(MADE)
    assert sorted(p.name for p in corpus.parent.iterdir()) == ["in1.txt", CORPUS] and not any(
        (folder / "sh1 x").iterdir()
    )


def test_every_figure_of_the_report_is_in_a_file_of_the_run(straight, corpus):
    folder, _, card = straight
    log = folder / "run[1] ?"
    lines = [
        line.split()
        for line in (log / "log.txt").read_text().splitlines()
        if not line.startswith("#")
    ]
    val = [(int(s), float(v)) for s, kind, v in lines if kind == "val"]
    # on tiny shakespeare: not comparable
    assert card["val_loss"] == {"value": val[-1][1], "step": 4, "comparable": False}
    hellaswag = (log / "stages" / "hellaswag.txt").read_text()
    assert f"acc_norm {card['hellaswag']['acc_norm']:.4f}" in hellaswag
    assert card["hellaswag"]["examples"] == 6 and not card["hellaswag"]["comparable"]
    checkpoint = torch.load(log / "model_00004.pt", weights_only=True, map_location="cpu")
    assert card["run"]["steps"] == checkpoint["step"] == 4 and card["run"]["tokens"] == 4 * 1024
    tok_s = sorted(float(v) for _, kind, v in lines if kind == "tok_s")
    assert card["run"]["tok_s"] == (tok_s[1] + tok_s[2]) / 2  # the median of the 4 steps'
    assert card["run"]["day_gpu_hours"] is None and card["run"]["mfu"] is None  # a CPU run
    shards = sorted((folder / "sh[1] *").glob("*.npy"))
    assert card["data"]["shards"] == len(shards) == 7
    train = sum(len(np.load(p)) for p in shards if "_train_" in p.name)
    assert (card["data"]["train_tokens"], card["data"]["val_tokens"]) == (train, 50000)
    assert card["data"]["manifest_sha256"] == report_card.sha256_file(
        folder / "sh[1] *" / "manifest.json"
    )
    assert card["data"]["source"] == {"files": {str(corpus): corpus.stat().st_size}}
    samples = re.findall(r"^sample \d: (.*)$", (log / "stages" / "samples.txt").read_text(), re.M)
    assert card["samples"] == samples and len(samples) == 4
    environment = card["environment"]
    assert environment["torch"] == torch.__version__ and environment["gpus"] == "none"
    assert environment == json.loads((log / "stages" / "train.json").read_text())["environment"]
    assert card["command"] == shlex.join(
        ["python", "-m", "tools.reproduce", "--files", str(corpus), *FLAGS]
    )
    report = (log / "report.md").read_text()
    for figure in (
        f"{val[-1][1]:.4f}",
        "3.2924",
        "0.2955",
        "0.337",
        samples[0],
        card["data"]["manifest_sha256"],
    ):
        assert figure in report
    assert "HellaSwag scored 6 examples, not all 10,042: not comparable." in report


def test_a_rerun_redoes_nothing_and_one_with_other_flags_redoes_what_they_change(
    straight, corpus, tmp_path
):
    folder, _, card = straight
    again = reproduce(command(corpus), folder)
    assert again.returncode == 0, again.stderr
    # each found done, none run
    assert re.findall(r"^== \d/8 (\w+): done$", again.stdout, re.M) == STAGES
    assert without_timings(
        json.loads((folder / "run[1] ?" / "report.json").read_text())
    ) == without_timings(card)
    # another total batch: preflight checks it against the run in the folder, which refuses it, and
    # nothing after runs
    other = reproduce([*command(corpus), "--total-batch", "2048"], copy_of(straight, tmp_path))
    assert other.returncode == 1 and "Traceback" not in other.stdout + other.stderr
    assert re.findall(r"^== \d/8 (\w+): done$", other.stdout, re.M) == ["data", "verify"]
    assert re.search(
        r"^== 3/8 preflight: python -m tools.preflight .*--total-batch 2048 --resume$",
        other.stdout,
        re.M,
    )
    assert "was trained with --total-batch 1024 (this run: 2048)" in other.stdout
    assert other.stderr == (
        "reproduce.py: error: stage preflight: did not finish (exit status 1; its output: "
        "run[1] ?/stages/preflight.txt): put right what it says, then run the command again\n"
    )


def descendants(pid):
    """pid's child processes and theirs (torchrun's workers run in sessions of their own)."""
    return [p for child in workers(pid) for p in (child, *descendants(child))]


def kill_everything(proc):
    """What a preempted node does to a reproduction: every process of it killed at once,
    nothing cleaned up."""
    for pid in [proc.pid, *descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def test_killed_at_every_stage_boundary_and_stopped_by_ctrl_c_the_rerun_gives_the_same_report(
    straight, corpus, tmp_path
):
    folder, argv = folder_for(tmp_path), command(corpus)
    for stage in STAGES[:-1]:
        proc = subprocess.Popen(
            argv, cwd=folder, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for line in proc.stdout:
            if re.match(rf"== \d/8 {stage}: done", line):  # said once its record is on disk
                kill_everything(proc)
                break
        else:
            pytest.fail(f"{stage} never finished: {proc.wait()}")
        # then a Ctrl-C in the middle of the run: the workers checkpoint and stop
        if stage == "preflight":
            proc = subprocess.Popen(
                argv, cwd=folder, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for line in proc.stdout:
                if line.startswith("step     1 "):
                    proc.send_signal(signal.SIGINT)
                    break
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 130 and "Traceback" not in out + err, out + err
            assert err.endswith(
                "reproduce.py: stopped at stage train (SIGINT): "
                "rerun the same command to continue\n"
            )
            assert "stopped at step 2: resume with --resume" in out
    finished = reproduce(argv, folder)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert re.findall(r"^== \d/8 (\w+): done$", finished.stdout, re.M) == STAGES[:-1]
    assert "resumed from step 2" in (folder / "run[1] ?" / "stages" / "train.txt").read_text()
    card = json.loads((folder / "run[1] ?" / "report.json").read_text())
    assert without_timings(card) == without_timings(straight[2])


def test_a_stage_that_fails_stops_the_day_in_one_line_and_a_corrected_command_replaces_it(
    corpus, tmp_path
):
    folder = folder_for(tmp_path)
    wrong = [*command(corpus.parent / "no-such.txt"), "--max-steps", "2"]
    failed = reproduce(wrong, folder)
    assert failed.returncode == 1 and "Traceback" not in failed.stdout + failed.stderr
    assert failed.stderr == (
        "reproduce.py: error: stage data: did not finish "
        "(exit status 1; its output: run[1] ?/stages/data.txt): "
        "put right what it says, then run the command again\n"
    )
    # fineweb.py's own error
    assert "no-such.txt" in (folder / "run[1] ?" / "stages" / "data.txt").read_text()
    assert not (folder / "run[1] ?" / "report.json").exists()  # a card only for a finished day
    assert json.loads((folder / "run[1] ?" / "stages" / "data.json").read_text())["done"] is False
    # nothing finished yet: another command replaces the wrong one (and fails in its own way)
    other = reproduce([*command(corpus.parent / "none-either.txt"), "--max-steps", "3"], folder)
    assert other.returncode == 1 and "stage data: did not finish" in other.stderr
    assert "none-either.txt" in report_card.last_attempt(folder / "run[1] ?" / "stages", "data")


def test_resume_is_ours_and_one_reproduction_holds_a_folder(corpus, tmp_path):
    from longrun.common import lock_folder

    resumed = reproduce([*command(corpus), "--resume"], tmp_path)
    assert resumed.returncode == 1 and resumed.stderr == (
        "reproduce.py: error: --resume: reproduce.py resumes by itself: "
        "rerun the same command without it\n"
    )
    text = reproduce([*command(corpus), "--data", str(corpus)], tmp_path)  # shards are ours to make
    assert text.returncode == 1 and text.stderr == (
        f"reproduce.py: error: --data {corpus}: a file: "
        "reproduce.py makes shards, pass its text with --files\n"
    )
    (tmp_path / "run[1] ?" / "stages").mkdir(parents=True)
    held = lock_folder(tmp_path / "run[1] ?" / "stages")
    busy = reproduce(command(corpus), tmp_path)
    held.close()
    assert busy.returncode == 1 and busy.stderr == (
        f"reproduce.py: error: run[1] ?/stages is in use by another process (pid {os.getpid()}): "
        "wait for it, or choose another folder\n"
    )


def ran(stdout):
    """The stages a reproduction ran (not found done), in order."""
    return re.findall(r"^== \d/8 (\w+): (?!done|nothing)", stdout, re.M)


def copy_of(straight, tmp_path):
    """The finished day's folder, copied with its files' times (what the
    stages' records compare)."""
    return shutil.copytree(straight[0], tmp_path / "copy", symlinks=True)


def straight_record(straight):
    """The command that made the uninterrupted day's final checkpoint, as its train
    stage recorded it."""
    return json.loads((straight[0] / "run[1] ?" / "stages" / "train.json").read_text())["made_by"]


def exported_embedding(folder):
    from safetensors.torch import load_file

    return load_file(folder / "gpt2 [ours]" / "model.safetensors")["transformer.wte.weight"]


def checkpoint_embedding(path):
    model = torch.load(path, weights_only=True, map_location="cpu")["model"]
    return next(v for k, v in model.items() if k.endswith("transformer.wte.weight"))[:50257]


def test_a_retrained_model_is_the_one_evaluated_exported_and_reported(straight, corpus, tmp_path):
    folder = copy_of(straight, tmp_path)
    log = folder / "run[1] ?"
    (log / "model_00004.pt").unlink()  # the checkpoint gone, and another learning rate
    again = reproduce([*command(corpus), "--max-lr", "1e-3"], folder)
    assert again.returncode == 0 and "Traceback" not in again.stdout + again.stderr, (
        again.stdout + again.stderr
    )
    # the data holds; everything from the run on is done again
    assert ran(again.stdout) == STAGES[2:]
    card = json.loads((log / "report.json").read_text())
    assert f"acc_norm {card['hellaswag']['acc_norm']:.4f}" in report_card.last_attempt(
        log / "stages", "hellaswag"
    )
    assert card["command"].endswith("--max-lr 1e-3") and card["run"]["steps"] == 4
    assert torch.equal(exported_embedding(folder), checkpoint_embedding(log / "model_00004.pt"))
    assert not torch.equal(exported_embedding(folder), exported_embedding(straight[0]))


def test_a_longer_run_replaces_the_export_and_a_flag_that_changes_nothing_leaves_the_card(
    straight, corpus, tmp_path, monkeypatch
):
    folder = copy_of(straight, tmp_path)
    log = folder / "run[1] ?"
    longer = reproduce([*command(corpus), "--max-steps", "6"], folder)
    assert longer.returncode == 0, longer.stdout + longer.stderr
    assert ran(longer.stdout) == STAGES[2:] and "resumed from step 4" in longer.stdout
    card = json.loads((log / "report.json").read_text())
    assert card["run"]["steps"] == 6 and card["val_loss"]["step"] == 6
    assert torch.equal(exported_embedding(folder), checkpoint_embedding(log / "model_00006.pt"))
    # a lower learning rate once the run is done: the run says so and makes nothing; the card keeps
    # the command whose run made the checkpoint
    lower = reproduce([*command(corpus), "--max-steps", "6", "--max-lr", "1e-4"], folder)
    assert lower.returncode == 0, lower.stdout + lower.stderr
    # the checkpoint unchanged: nothing after runs
    assert ran(lower.stdout) == ["preflight", "train"]
    assert json.loads((log / "report.json").read_text())["command"] == card["command"]
    # and the first command again: its final checkpoint is there, but the run went on past it
    shorter = reproduce(command(corpus), folder)
    assert shorter.returncode == 1 and shorter.stderr == (
        "reproduce.py: error: stage train: run[1] ? holds a longer run (run[1] ?/model_00006.pt): "
        "pass its --max-steps, then run the command again\n"
    )
    # the card of the run as it is
    assert json.loads((log / "report.json").read_text())["run"]["steps"] == 6
    # cut back to the first command's run (model_00006.pt deleted, the command rerun): its train
    # stage is done on model_00004.pt, made by that command (reproduce.py's record of it, set here),
    # and the card is that run's alone
    train = json.loads((log / "stages" / "train.json").read_text())
    (log / "stages" / "train.json").write_text(
        json.dumps(train | {"made_by": straight_record(straight)})
    )
    monkeypatch.chdir(folder)  # the day's paths are relative to its folder
    card = report_card.write(log)
    val = [line.split() for line in (log / "log.txt").read_text().splitlines() if " val " in line]
    assert card["run"]["steps"] == 4 and card["val_loss"]["step"] == 4 and val[-1][0] == "6"
    assert card["val_loss"]["value"] == float(next(v for s, _, v in val if s == "4"))


def test_other_data_under_the_same_name_runs_the_day_again(straight, corpus, tmp_path):
    folder = copy_of(straight, tmp_path)
    other = tmp_path / "other.txt"
    other.write_text(corpus.read_text()[: len(corpus.read_text()) // 2])
    shutil.rmtree(folder / "sh[1] *")
    # rebuilt from another file: the first four stages run again. What runs after them is the other
    # tests' matter: once a fourth stage starts, a Ctrl-C stops the day (the run's own clean stop,
    # its workers too)
    argv = [*command(other), "--max-steps", "6"]
    again = subprocess.Popen(
        argv, cwd=folder, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out = ""
    for line in again.stdout:
        out += line
        if len(ran(out)) == 4:
            again.send_signal(signal.SIGINT)
            break
    out += again.communicate(timeout=300)[0]
    assert ran(out)[:4] == ["data", "verify", "preflight", "train"], out


@pytest.mark.parametrize("text", ["", "[]", '{"seconds": "12"}'])
def test_a_damaged_record_is_one_line_naming_its_stage(straight, corpus, tmp_path, text):
    folder = copy_of(straight, tmp_path)
    (folder / "run[1] ?" / "stages" / "train.json").write_text(text)
    damaged = reproduce(command(corpus), folder)
    assert damaged.returncode == 1 and damaged.stderr == (
        "reproduce.py: error: stage train: run[1] ?/stages/train.json is damaged: "
        "delete it, and the stage runs again\n"
    )


def test_a_record_emptied_or_an_output_removed_runs_that_stage_again(straight, corpus, tmp_path):
    folder = copy_of(straight, tmp_path)
    stages = folder / "run[1] ?" / "stages"
    (stages / "hellaswag.json").write_text("{}")
    (stages / "train.txt").unlink()
    (stages / "samples.txt").unlink()
    again = reproduce(command(corpus), folder)
    assert again.returncode == 0, again.stdout + again.stderr
    assert ran(again.stdout) == ["hellaswag", "samples", "curves", "export"]
    assert without_timings(
        json.loads((stages.parent / "report.json").read_text())
    ) == without_timings(straight[2])


def test_a_full_disk_is_one_line_naming_the_stage_and_its_output_is_not_lost(
    corpus, tmp_path, monkeypatch, capfd
):
    from tools import reproduce as module

    def full(path, write):
        raise OSError(errno.ENOSPC, "No space left on device", f"{path}.1.tmp")

    folder = folder_for(tmp_path)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    saved = {
        signum: signal.getsignal(signum)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    real = module.common.write_atomically
    monkeypatch.setattr(
        module.common,
        "write_atomically",
        lambda path, write: (full if "data" in path else real)(path, write),
    )
    try:
        assert module.main(command(corpus)[3:]) == 1
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    out, err = capfd.readouterr()
    assert err == (
        "reproduce.py: error: stage data: run[1] ?/stages/data.json.1.tmp: "
        "No space left on device\n"
    )
    printed = report_card.last_attempt(folder / "run[1] ?" / "stages", "data").split("\n", 1)[1]
    assert printed.strip().splitlines()[-1] in out  # what fineweb.py printed, kept and shown
    # and when the output file is what cannot be written, the rest goes to the terminal, the
    # error is kept
    read, write = os.pipe()
    os.write(write, b"first\nsecond\n")
    os.close(write)

    class Full:
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    assert module.tee(os.fdopen(read, "rb"), Full()).errno == errno.ENOSPC
    assert capfd.readouterr().out == "first\nsecond\n"


def test_a_first_day_asks_before_downloading_fineweb(tmp_path):
    """FineWeb-Edu is ~30 GB: said first; without a terminal only --yes goes ahead, on one
    a "y" does."""
    argv = [
        sys.executable,
        "-m",
        "tools.reproduce",
        *SMALL.split(),
        "--nproc",
        "1",
        "--data",
        "shards",
        "--log-dir",
        "log",
    ]
    refused = subprocess.run(
        argv, cwd=tmp_path, env=ENV, stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    assert refused.returncode == 1 and "about 30 GB of parquet files" in refused.stdout
    assert refused.stderr == (
        "reproduce.py: error: no terminal to ask whether to download it: pass --yes to go ahead\n"
    )
    assert list(tmp_path.iterdir()) == []  # nothing made
    parent, child = pty.openpty()
    asked = subprocess.Popen(
        argv, cwd=tmp_path, env=ENV, stdin=child, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    os.close(child)
    os.write(parent, b"n\n")
    out, err = asked.communicate(timeout=120)
    os.close(parent)
    assert (
        asked.returncode == 1
        and out.decode().endswith("go ahead? [y/N] ")
        and list(tmp_path.iterdir()) == []
    )
    assert (
        err.decode()
        == "reproduce.py: error: nothing downloaded: pass --files for a local corpus, or --yes\n"
    )
    agreed = subprocess.run(
        [*argv, "--yes"], cwd=tmp_path, env=ENV, stdin=subprocess.DEVNULL, capture_output=True
    )
    # offline here: it fails there
    assert b"== 1/8 data: python -m fineweb --out shards" in agreed.stdout


def test_a_report_card_from_a_run_folder_made_by_hand(tmp_path):
    log, stages, shards = tmp_path / "log", tmp_path / "log" / "stages", tmp_path / "shards"
    stages.mkdir(parents=True)
    shards.mkdir()
    shard = {"documents": 1, "sha256": "0" * 64, "resume_at": {"document": 0, "token": 0}}
    manifest = {
        "settings": {"dataset": "HuggingFaceFW/fineweb-edu", "name": "sample-10BT"},
        "complete": True,
    }
    # a prefix that holds _val_ itself: the split is the one before the number, as the run reads it
    manifest |= {
        "tokens": 300,
        "shards": [shard | {"file": "my_val_e_val_000000.npy", "tokens": 100}],
    }
    manifest["shards"] += [
        shard | {"file": f"my_val_e_train_00000{i}.npy", "tokens": 100} for i in (1, 2)
    ]
    (shards / "manifest.json").write_text(json.dumps(manifest))
    argv = [
        "--data",
        str(shards),
        "--log-dir",
        str(log),
        "--max-steps",
        "3",
        "--total-batch",
        "1024",
    ]
    (log / "log.txt").write_text(
        "# run 0123456789ab\n"
        + "".join(
            f"{s} train {4 - s}\n{s} tok_s {1000 * (s + 1)}\n{s} mfu {40 + s}\n" for s in range(3)
        )
        + "3 val 3.2500\n3 hella 0.3100\n"
    )
    environment = {
        "gpus": "8 x NVIDIA H100",
        "gpu_count": 8,
        "torch": "2.x",
        "cuda": "12.8",
        "python": "3.11",
    }
    environment["code"] = "not a git checkout"  # the run's, saved as it started
    made_by = {"train_gpt2.py": argv, "nproc": 8, "argv": ["python", "x.py"]}
    train = {"seconds": 3600, "done": True, "environment": environment, "made_by": made_by}
    (stages / "train.json").write_text(json.dumps(train))
    (stages / "data.json").write_text(json.dumps({"seconds": 1800, "done": True}))
    (stages / "hellaswag.txt").write_text(
        "== old attempt\nacc_norm 0.1\n== 2026 cmd\n10042 examples\nacc 0.2900\nacc_norm 0.3012\n"
    )
    (stages / "samples.txt").write_text("== 2026 cmd\nsample 0: 'Hello'\nsample 1: 'world'\n")
    card = report_card.write(log, price=2.5)
    assert card == json.loads((log / "report.json").read_text())
    assert card["val_loss"] == {"value": 3.25, "step": 3, "comparable": True}
    # the last evaluation's
    assert card["hellaswag"] == {
        "acc": 0.29,
        "acc_norm": 0.3012,
        "examples": 10042,
        "comparable": True,
    }
    assert card["run"] == {
        "steps": 3,
        "max_steps": 3,
        "tokens": 3072,
        "tok_s": 2000,
        "mfu": 41,
        "processes": 8,
        "seconds": 3600,
        "day_gpu_hours": 12.0,  # the data's half hour too, on all 8 GPUs of the node
        "price_per_gpu_hour": 2.5,
        "cost": 30.0,
    }
    assert (card["data"]["shards"], card["data"]["train_tokens"], card["data"]["val_tokens"]) == (
        3,
        200,
        100,
    )
    assert card["samples"] == ["'Hello'", "'world'"] and card["environment"] == environment
    report = (log / "report.md").read_text()
    assert (
        "| validation loss, step 3 | 3.2500 | "
        "3.2924: OpenAI's GPT-2 124M on FineWeb-Edu's val shard" in report
    )
    assert (
        "| HellaSwag acc_norm, 10042 examples | 0.3012 | 0.2955: OpenAI's GPT-2 124M, as " in report
    )
    assert "0.337: GPT-3 124M (the GPT-3 paper, Brown et al. 2020) |" in report
    for line in (
        "- day_gpu_hours: 12.0",
        "- cost: 30.0",
        "- tok_s: 2000.0",
        "- mfu: 41.0",
        "- processes: 8",
    ):
        assert line + "\n" in report
    assert (
        "not comparable" not in report
        and "- code: not a git checkout" in report
        and "- data: 30.0 min" in report
    )
