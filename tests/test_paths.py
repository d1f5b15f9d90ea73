"""Paths are data, never patterns: the whole CPU path (shards, training, resume, preflight, plot, sample, export) in
folders whose names hold `[ ] * ?` and spaces, beside decoys that those names would match as glob patterns."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
SMALL = "--n-layer 2 --n-head 2 --n-embd 32 -B 2 -T 32 --total-batch 64 --device cpu --val-every 2 --val-steps 1"
SMALL += " --hellaswag-every 0 --sample-every 0 --checkpoint-every 2"


def ok(script, *args):
    proc = subprocess.run(
        [sys.executable, script, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=300, env=ENV
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (script, proc.stderr)
    return proc.stdout


def test_the_cpu_path_in_folders_named_like_patterns(tmp_path):
    here = tmp_path / "my [1] * ? runs"
    here.mkdir()
    text = (ROOT / "input.txt").read_text()
    (here / "in[1].txt").write_text(text[:60_000])
    (here / "in1.txt").write_text("a decoy that in[1].txt would match as a pattern\n")
    shards, log_dir, export = here / "sh[1] *", here / "run[1] ?", here / "gpt2 [ours]"
    (here / "sh1 x").mkdir()  # what `sh[1] *` would match

    ok("fineweb.py", "--files", here / "in[1].txt", "--out", shards, "--shard-size", 4000, "--workers", 1)
    assert "all" in ok("fineweb.py", "--verify", "--out", shards)
    flags = ["--data", shards, *SMALL.split(), "--log-dir", log_dir]
    ok("train_gpt2.py", *flags, "--max-steps", 2)
    assert "resumed from step 2" in ok("train_gpt2.py", *flags, "--max-steps", 4, "--resume")
    assert sorted(p.name for p in log_dir.glob("model_*.pt")) == ["model_00002.pt", "model_00004.pt"]
    assert "the run is done" in ok("preflight.py", *flags, "--max-steps", 4, "--resume")
    ok("plot_log.py", log_dir)
    assert (log_dir / "curves.png").stat().st_size > 0
    assert ok("sample.py", log_dir / "model_00004.pt", "--num", 1, "--length", 12, "--device", "cpu").startswith(
        "sample 0:"
    )
    ok("export_hf.py", log_dir / "model_00004.pt", export)
    assert (export / "config.json").exists()
    assert sorted(p.name for p in here.iterdir()) == sorted(
        ["in[1].txt", "in1.txt", "sh[1] *", "sh1 x", "run[1] ?", "gpt2 [ours]"]
    )
