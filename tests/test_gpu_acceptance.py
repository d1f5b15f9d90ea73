"""benchmarks/gpu_acceptance.py: its CPU smoke mode end to end (every phase, every code
path), and the parts that only decide things on a GPU (the MFU row, the GPU counts, the
estimate), with faked devices and figures. The part's peak is train_gpt2.py's MFU.lookup,
tested in tests/test_train.py."""

import json
import re
import subprocess
import sys

import pytest
import torch

from longrun.meters import MFU
from test_train import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_acceptance as ga  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "gpu_acceptance.py"


def test_smoke_mode_runs_every_phase(tmp_path, series_history):
    out = tmp_path / "acceptance.json"
    argv = [
        sys.executable,
        str(SCRIPT),
        "--smoke",
        "--out",
        str(out),
        "--work",
        str(tmp_path / "work"),
    ]
    proc = subprocess.run(
        [*argv, "--history", str(series_history)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(out.read_text())
    assert report["complete"] and report["smoke"]
    rows = {row["check"]: row for row in report["rows"]}
    failing = {check for check, row in rows.items() if row["status"] not in ("ok", "info")}
    assert not failing, [rows[check] for check in failing]
    assert proc.returncode == 0, proc.stderr
    assert [row["phase"] for row in report["rows"]] == sorted(
        (row["phase"] for row in report["rows"]), key=ga.ORDER.index
    )
    assert {row["phase"] for row in report["rows"]} == set(ga.ORDER)

    # the ladder: its steps found by Step-Id in the history, the first and the last run and timed
    assert rows["ladder: rungs run"]["measured"].startswith("2 of 7")
    ladder = [row for row in report["rows"] if row["phase"] == "ladder" and "details" in row]
    # the step before tf32, and fused
    assert [row["details"]["slug"] for row in ladder] == ["preset", "weight-decay"]
    # timed by when its step lines were read: 0 ms where a busy machine delivered them together
    # (speed is not tested)
    assert all(
        row["details"]["ms_per_step"] >= 0 and row["details"]["own_dt_ms"] is None
        for row in ladder[:1]
    )
    assert ladder[1]["details"]["own_dt_ms"] > 0  # step 18 prints its own dt, step 10 does not

    # the final run: B=8 fails as out of memory (simulated), so B=4 is the largest that fits
    assert rows["final: B=8"]["measured"] == "out of memory"
    assert rows["final: largest B that fits"]["measured"] == "B=4"
    assert rows["final: throughput (B=4, T=32, 256 tokens/step)"]["details"]["tok_per_s"] > 0
    assert rows["final: MFU"]["measured"] == "unknown: a CPU"
    assert rows["final: peak memory, eager (B=4)"]["details"]["gib"] > 0

    # resume: bitwise on CPU, stopped inside an evaluation step
    resumed = rows["resume: losses against the uninterrupted run"]
    assert resumed["status"] == "ok" and resumed["details"]["max_train_difference"] == 0
    # sent on step 4's validation line: stopped at step 4 when the signal lands before the check
    # that follows it, at step 5 when the run got past that check first (on a busy machine the
    # sender reads the line late), as in step 41
    assert re.match(
        r"stopped at step [45] ", rows["resume: SIGTERM during an evaluation step"]["measured"]
    )
    worst = rows["resume: worst case from SIGTERM to exit"]
    assert (
        worst["status"] == "ok"
        and worst["details"]["longest_stretch_s"] < worst["details"]["seconds"]
    )

    # DDP: two gloo processes against the final run; a SIGTERM to the workers stops cleanly
    # with a checkpoint
    assert rows["ddp: 2 processes (gloo) against one"]["details"]["max_loss_difference"] <= 1e-5
    stopped = rows["ddp: SIGTERM to the workers (pkill -TERM -P <torchrun>)"]["details"]
    assert stopped["checkpoint"] and stopped["exit_status"] == 0
    assert "(an estimate)" in rows["estimate: the 19,073-step run on 8 x cpu"]["measured"]

    table = proc.stdout[proc.stdout.index("\ncheck ") :]
    assert all(check in table for check in rows)


def test_gpu_counts_and_ddp_processes():
    assert ga.gpu_counts_not_dividing() == [3, 5, 6, 7, *range(9, 17)]
    used = [ga.ddp_processes(524288, 64, 1024, gpus) for gpus in range(1, 9)]
    assert used == [1, 2, 2, 4, 4, 4, 4, 8]


def final_run_lines(basis):
    """The lines of a final run as train_gpt2.py prints them on a GPU, its MFU basis
    naming its peak."""
    return [
        (0.0, basis),
        (1.0, "step     0 | loss 10.9 | lr 8e-07 | norm 1.0 | dt 1000.0ms | tok/sec 524288"),
    ]


@pytest.mark.parametrize(
    "name, sms, theirs, status",
    [
        ("NVIDIA H100 80GB HBM3", 132, 989, "ok"),
        ("NVIDIA H100 PCIe", 114, 756, "ok"),
        # a run that assumed another peak (as a substring lookup did)
        ("NVIDIA H100 PCIe", 114, 989, "FAIL"),
        ("NVIDIA H800", 132, None, "FAIL"),  # ... or knew none
    ],
)
def test_mfu_row_against_train_gpt2s_peak(tmp_path, name, sms, theirs, status):
    plan = ga.make_plan(smoke=False, gpus=1)
    tflops, part = MFU.lookup(name, sms)
    device = {"name": name, "part": part, "peak_tflops": tflops, "peak_reason": None}
    report = ga.Report(tmp_path / "r.json", plan, device)
    basis = (
        f"mfu: 0.851 GFLOPs per token against 1 x {theirs} TFLOPS ({name})"
        if theirs
        else "mfu: unknown, ..."
    )
    run = ga.Run([], 0, final_run_lines(basis), "", 1.0, False)
    ga.mfu_row(plan, report, run, tok_s=400_000)
    (row,) = report.rows
    assert row["status"] == status
    # 6N + 12 L C T FLOPs per token for GPT-2 124M with the padded vocabulary, at T=1024
    # (meters.flops_per_token)
    n_params = 124_475_904 - 1024 * 768  # without the position embeddings
    per_token = 6 * n_params + 12 * 12 * 768 * 1024
    assert row["details"]["flops_per_token"] == per_token
    assert row["details"]["mfu"] == pytest.approx(400_000 * per_token / (tflops * 1e12), abs=1e-4)


def test_estimate_from_what_was_measured(tmp_path):
    plan = ga.make_plan(smoke=False, gpus=8)
    device = {"name": "NVIDIA H100 80GB HBM3", "part": "H100 SXM"}
    hours = {}
    for measured in [{"tok_s": 400e3}, {"tok_s": 400e3, "ddp_tok_s": 760e3, "ddp_nproc": 2}]:
        report = ga.Report(tmp_path / "r.json", plan, device)
        report.measured.update(measured)
        ga.estimate(plan, report)
        (row,) = report.rows
        hours[len(measured)] = row["details"]["hours"]
        assert "(an estimate)" in row["measured"] and "8 x H100 SXM" in row["check"]
    tokens = 19073 * 524288
    # perfect scaling assumed
    assert hours[1] == pytest.approx(tokens / (8 * 400e3) / 3600, abs=0.01)
    # 2 GPUs scaled 95%
    assert hours[3] == pytest.approx(tokens / (8 * 400e3 * 0.95) / 3600, abs=0.01)
    report = ga.Report(tmp_path / "r.json", plan, device)
    report.measured.update(tok_s=400e3, ddp_tok_s=3.0e6, ddp_nproc=8)
    ga.estimate(plan, report)
    assert report.rows[0]["details"]["tok_per_s"] == 3.0e6  # 8 GPUs measured: no scaling assumed


def test_mistakes_are_one_line(tmp_path):
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "--skip", "everything"], capture_output=True, text=True
    )
    assert (
        bad.returncode == 1 and "invalid choice" in bad.stderr and len(bad.stderr.splitlines()) == 1
    )
    if torch.cuda.is_available():
        return
    out = tmp_path / "r.json"
    no_gpu = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True
    )
    assert no_gpu.returncode == 1 and no_gpu.stderr.strip().splitlines() == [
        "gpu_acceptance.py: error: no CUDA GPU here: "
        "`--smoke` runs the same checks on CPU with a tiny model"
    ]
    assert not out.exists()
