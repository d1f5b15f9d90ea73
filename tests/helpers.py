"""What the tests share: where the project is, the tiny model they train, and how they
run its programs."""

import subprocess
import sys
from pathlib import Path

# the project: train_gpt2.py, fineweb.py, part0/, longrun/, tools/
ROOT = Path(__file__).resolve().parents[1]
# the tiny GPT the tests train: 2 layers of width 32, one batch of 2 x 32 tokens a step on the
# CPU, no evaluations
TINY = (
    "--n-layer 2 --n-head 2 --n-embd 32 -B 2 -T 32 --total-batch 64 --device cpu "
    "--val-every 0 --hellaswag-every 0 --sample-every 0"
).split()
# torchrun with two processes on this machine (the program and its flags follow)
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def run_python(*args, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    """`python ARGS` in the project's root, its output captured as text. The timeout bounds a hang
    (generous, as a busy machine is slow), never a timing."""
    argv = [sys.executable, *map(str, args)]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kwargs)
