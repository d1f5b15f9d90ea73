"""The ranks of a torchrun job: one rank failing ends the job at once (the others do not wait
for it); each rank takes a GPU of its own; the batch splits over them; a signal to one rank
stops them all."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

import train_gpt2
from helpers import TORCHRUN
from longrun.common import UserError
from test_train import ENV, ROOT, TINY


def failing_rank_script(tmp_path, error, rank=1):
    """A stand-in for train_gpt2.py whose rank `rank` raises `error` in its third training batch.
    Its destroy_process_group blocks, as NCCL's does for a rank whose peers still wait on it
    (torch >= 2.6)."""
    script = tmp_path / "failing_rank.py"
    script.write_text(
        f"import os, sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"import train_gpt2\n"
        f"from longrun.common import UserError\n"
        f"batches = train_gpt2.DataLoaderLite.next_batch\n"
        f"calls = []\n"
        f"def next_batch(self):\n"
        f"    calls.append(1)\n"
        f"    if os.environ['RANK'] == '{rank}' and len(calls) == 3:\n"
        f"        raise {error}\n"
        f"    return batches(self)\n"
        f"train_gpt2.DataLoaderLite.next_batch = next_batch\n"
        f"train_gpt2.dist.destroy_process_group = lambda: time.sleep(600)\n"
        f"sys.exit(train_gpt2.main())\n"
    )
    return script


def run_failing(tmp_path, error, rank=1):
    script = failing_rank_script(tmp_path, error, rank)
    argv = [
        "--data",
        "input.txt",
        *TINY,
        *"-B 2 -T 32 --total-batch 128 --max-steps 50 --device cpu".split(),
    ]
    start = time.monotonic()
    proc = subprocess.Popen(
        [*TORCHRUN, str(script), *argv, "--log-dir", str(tmp_path / "log")],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        proc.stdout, proc.stderr = proc.communicate(timeout=120)
    finally:  # a hung job: its workers too, not only torchrun
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc, time.monotonic() - start


def test_a_failing_rank_ends_the_job_at_once(tmp_path):
    # a bug (a CUDA out-of-memory error, say) on one rank: its traceback shows, and the job
    # ends with it
    proc, seconds = run_failing(tmp_path, "RuntimeError('CUDA out of memory (simulated)')")
    assert proc.returncode != 0
    assert (
        "Traceback" in proc.stderr and "RuntimeError: CUDA out of memory (simulated)" in proc.stderr
    )
    assert "step     0 " in proc.stdout and "step    49 " not in proc.stdout  # it failed mid-run
    assert seconds < 60  # not the process group's timeout (gloo's and NCCL's: 10 minutes)


def test_a_users_mistake_on_one_rank_is_its_one_line_and_the_others_say_they_stopped(tmp_path):
    # a full disk on rank 0 only (it writes the checkpoints): its line, then rank 1's, whose
    # all-reduce lost its peer
    proc, seconds = run_failing(
        tmp_path, "UserError('log: No space left on device (simulated)')", rank=0
    )
    assert proc.returncode != 0 and seconds < 60
    assert "train_gpt2.py: error: log: No space left on device (simulated)" in proc.stderr
    assert "train_gpt2.py: error: rank 1: another process of the job stopped" in proc.stderr, (
        proc.stderr
    )
    # no rank's traceback
    assert f'File "{ROOT / "train_gpt2.py"}"' not in proc.stderr and "pair.cc" not in proc.stderr


# ---- which GPU each rank takes (faked GPUs: the choice is plain arithmetic on what torch reports)


@pytest.fixture
def gpus(monkeypatch):
    """A machine that shows `gpus(n)` CUDA GPUs to this process; the device a rank chose is
    set_device's argument."""
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(
        train_gpt2.dist, "init_process_group", lambda backend: chosen.append(backend)
    )

    def show(n, rank, local_rank, world_size):
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        for key, value in dict(RANK=rank, LOCAL_RANK=local_rank, WORLD_SIZE=world_size).items():
            monkeypatch.setenv(key, str(value))
        return chosen

    return show


@pytest.mark.parametrize(
    "visible, local_rank, device",
    [
        (8, 0, "cuda:0"),
        (8, 5, "cuda:5"),  # torchrun --nproc_per_node=8 on an 8-GPU machine
        # a launcher that shows each process only its own GPU (CUDA_VISIBLE_DEVICES=5)
        (1, 5, "cuda:0"),
    ],
)
def test_each_rank_takes_its_own_gpu(gpus, visible, local_rank, device):
    chosen = gpus(visible, rank=8 + local_rank, local_rank=local_rank, world_size=16)
    assert train_gpt2.setup_distributed("cuda")[-1] == device
    assert chosen == [device, "nccl"]


def test_more_processes_than_gpus_is_refused(gpus):
    # --nproc_per_node=8 on a machine of 4 GPUs
    chosen = gpus(4, rank=5, local_rank=5, world_size=8)
    with pytest.raises(
        UserError, match=r"^local rank 5 has no GPU of its own: this machine shows 4$"
    ):
        train_gpt2.setup_distributed("cuda")
    assert chosen == []  # refused before any GPU is touched


def test_one_named_gpu_for_several_ranks_is_refused(gpus):
    gpus(8, rank=1, local_rank=1, world_size=2)
    with pytest.raises(
        UserError, match=r"--device cuda:3 would put all 2 processes on one GPU: pass --device cuda"
    ):
        train_gpt2.setup_distributed("cuda:3")
    chosen = gpus(8, rank=0, local_rank=0, world_size=1)  # one process: any GPU it names
    assert train_gpt2.setup_distributed("cuda:3")[-1] == "cuda:3" and chosen == ["cuda:3", "nccl"]


# ---- the batch: total_batch tokens split into whole micro-batches on every GPU


@pytest.mark.parametrize(
    "gpus, advice",
    [
        # 512 sequences of 1024 tokens do not split in 3: only another total does, with the steps
        # that keep the tokens
        (3, "pass --total-batch 589824 --max-steps 16954 (the same tokens in other steps)"),
        (6, "pass --total-batch 393216 --max-steps 25431 (the same tokens in other steps)"),
        (7, "pass --total-batch 458752 --max-steps 21798 (the same tokens in other steps)"),
        # 32 sequences per GPU, 1 micro-step: the same run
        (
            16,
            "pass -B 32 (the same run), "
            "or --total-batch 1048576 --max-steps 9536 (the same tokens in other steps)",
        ),
    ],
)
def test_a_total_batch_that_does_not_split_names_one_that_does(gpus, advice):
    with pytest.raises(
        UserError,
        match=(
            rf"is not a multiple of B\*T\*processes = 64\*1024\*{gpus} = \d+: "
            rf"{re.escape(advice)}$"
        ),
    ):
        train_gpt2.micro_steps(524288, 64, 1024, gpus, 19073)
    total, steps = (int(n) for n in re.findall(r"--total-batch (\d+) --max-steps (\d+)", advice)[0])
    assert train_gpt2.micro_steps(total, 64, 1024, gpus, steps)  # the advice works
    assert abs(total * steps / (524288 * 19073) - 1) < 1e-4  # and keeps the run's tokens
    if "-B" in advice:
        train_gpt2.micro_steps(524288, int(re.search(r"-B (\d+)", advice)[1]), 1024, gpus, 19073)


def test_a_total_batch_that_splits():
    for gpus, steps in [(1, 8), (2, 4), (4, 2), (8, 1)]:
        assert train_gpt2.micro_steps(524288, 64, 1024, gpus, 19073) == steps


# ---- the hot loop: one collective a step


def test_sigterm_to_one_rank_stops_both_at_the_same_step(tmp_path):
    # the signalled rank's flag travels in the loss's all-reduce: the other rank learns of it in
    # the same step
    argv = [
        "--data",
        "input.txt",
        *TINY,
        *"-B 2 -T 32 --total-batch 128 --max-steps 50 --device cpu".split(),
    ]
    proc = subprocess.Popen(
        [*TORCHRUN, "train_gpt2.py", *argv, "--log-dir", str(tmp_path)],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:
        if line.startswith("step     2 "):
            workers = subprocess.run(
                ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True
            ).stdout.split()
            rank_1 = next(
                pid for pid in workers if b"RANK=1\0" in Path(f"/proc/{pid}/environ").read_bytes()
            )
            os.kill(int(rank_1), signal.SIGTERM)  # not rank 0, which prints and saves
            break
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    stopped_at = int(re.search(r"stopped at step (\d+)", out)[1])
    assert [p.name for p in tmp_path.glob("model_*.pt")] == [f"model_{stopped_at:05d}.pt"]
    # both took the same steps
    assert 2 < stopped_at < 50 and "replicas differ by at most 0.000e+00" in out
