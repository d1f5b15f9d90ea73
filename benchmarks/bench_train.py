"""
Training throughput on this machine: tok/sec and, on GPUs with a known peak, MFU.

    python benchmarks/bench_train.py                # the 124M model at B=64, T=1024 (needs a GPU)
    python benchmarks/bench_train.py --preset cpu   # the CPU demo's model
    torchrun --standalone --nproc_per_node=8 benchmarks/bench_train.py

Any train_gpt2.py flag works; the run trains on input.txt for 20 steps without evaluation, in a
throw-away log dir.
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import train_gpt2  # noqa: E402

if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as log_dir:
        quick = "--data input.txt --max-steps 20 --val-every 0".split()
        quick += "--hellaswag-every 0 --sample-every 0".split()
        quick += ["--log-dir", log_dir]
        sys.exit(train_gpt2.main(quick + sys.argv[1:]))
