import fcntl
import json
import math
import os
import pty
import signal
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest
import tiktoken
import torch

import helpers
import train_gpt2
from helpers import ROOT
from longrun import meters
from train_gpt2 import GPT, DataLoaderLite, GPTConfig, get_lr, sample

# and the recipe these tests train with: the vocabulary padded as the real run does, a short
# warmup, a low peak
TINY = [*helpers.TINY, *"--vocab-size 50304 --warmup-steps 2 --max-lr 1e-3".split()]


# one thread per run: the comparisons below are exact, and a thread count that varies with a
# busy machine's load would change the order of float sums between two runs that should agree to
# the last digit
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def run(args, **kwargs):
    return helpers.run_python("train_gpt2.py", *args, env=ENV, **kwargs)


def train_losses(log_dir):
    lines = (Path(log_dir) / "log.txt").read_text().splitlines()
    assert lines[0].startswith("# run ")  # the run's id heads its log
    return {
        int(s): float(v) for s, kind, v in (line.split() for line in lines[1:]) if kind == "train"
    }


def timeless(log_text):
    """A log's lines but the throughput's, which no two runs share."""
    return [line for line in log_text.splitlines() if line.split()[1:2] not in (["tok_s"], ["mfu"])]


def final_weights(log_dir):
    path = sorted(Path(log_dir).glob("model_*.pt"))[-1]
    return torch.load(path, weights_only=True)["model"]


def assert_same_run(log_dir, straight_dir):
    """A stopped-and-resumed run is the uninterrupted one: the same losses to the last digit, the
    same final weights to the last bit."""
    assert train_losses(log_dir) == train_losses(straight_dir)
    wa, wb = final_weights(log_dir), final_weights(straight_dir)
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key


# The uninterrupted runs that stopped-and-resumed ones are compared with, each run once: one
# process (20 steps, evaluated every 5), and two ranks under torchrun (two micro-steps a rank)
ONE = ["--data", "input.txt", *TINY, "--max-steps", "20", "--val-every", "5"]
TWO = ["--data", "input.txt", *TINY, "--total-batch", "256", "--max-steps", "12"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("straight")
    proc = run([*ONE, "--log-dir", str(log_dir)])
    assert proc.returncode == 0, proc.stderr
    return log_dir


def torchrun(*args):
    # run_python puts its interpreter first: TORCHRUN's own is left out
    return helpers.run_python(*helpers.TORCHRUN[1:], "train_gpt2.py", *args, env=ENV)


@pytest.fixture(scope="module")
def straight_ddp(tmp_path_factory):
    """(its log folder, its output)"""
    log_dir = tmp_path_factory.mktemp("straight_ddp")
    proc = torchrun(*TWO, "--log-dir", str(log_dir))
    assert proc.returncode == 0, proc.stderr
    return log_dir, proc.stdout


# ---- model


def test_from_pretrained_matches_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.GPT2Config(
        n_positions=64, n_embd=48, n_layer=3, n_head=4, vocab_size=300
    )
    torch.manual_seed(0)
    hf_model = transformers.GPT2LMHeadModel(hf_config).eval()
    # GELU's inputs grown to where its tanh form and the exact one differ (logits by 1e-4)
    with torch.no_grad():
        for name, weight in hf_model.named_parameters():
            if name.endswith("mlp.c_fc.weight"):
                weight.mul_(25)
    hf_model.save_pretrained(tmp_path)
    model = GPT.from_pretrained(str(tmp_path)).eval()
    idx = torch.randint(0, 300, (2, 40))
    with torch.no_grad():
        ours, _ = model(idx)
        theirs = hf_model(idx).logits
    assert ours.shape == theirs.shape == (2, 40, 300)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    # logits at chosen positions only (HellaSwag's way): the same numbers, at positions 3 and 39 of
    # row 0, 7 of row 1
    positions = torch.tensor([3, 39, 40 + 7])
    with torch.no_grad():
        picked, _ = model(idx, positions=positions)
    assert picked.shape == (3, 300)
    torch.testing.assert_close(picked, theirs.flatten(0, 1)[positions], atol=1e-5, rtol=0)


def test_training_starts_from_pretrained_weights(tmp_path):
    """--pretrained: the run trains the transformers model's own weights (its size, not
    the size flags)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    # the vocabulary left at GPT-2's 50257 tokens
    hf_config = transformers.GPT2Config(n_positions=64, n_embd=48, n_layer=3, n_head=4)
    hf_model = transformers.GPT2LMHeadModel(hf_config).eval()
    hf_model.save_pretrained(tmp_path / "hf")
    args = [
        "--data",
        "input.txt",
        *TINY,
        "-B",
        "2",
        "-T",
        "32",
        "--total-batch",
        "64",
        "--max-steps",
        "1",
    ]
    proc = run(
        [
            *args,
            "--no-shuffle",
            "--pretrained",
            str(tmp_path / "hf"),
            "--log-dir",
            str(tmp_path / "log"),
        ]
    )
    assert proc.returncode == 0, proc.stderr
    # tied: wte is counted once, as in our GPT
    n_params = sum(p.numel() for p in hf_model.parameters())
    assert f"{n_params / 1e6:.2f}M parameters" in proc.stdout  # 3 layers of 48, not TINY's 2 of 32
    # step 0's loss is the transformers model's own loss on the first batch: the first
    # B*T+1 tokens, unshuffled
    tokens = tiktoken.get_encoding("gpt2").encode_ordinary((ROOT / "input.txt").read_text())[:65]
    x, y = torch.tensor(tokens[:-1]).view(2, 32), torch.tensor(tokens[1:]).view(2, 32)
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(
            hf_model(x).logits.flatten(0, 1), y.flatten()
        ).item()
    assert train_losses(tmp_path / "log")[0] == pytest.approx(expected, abs=1e-4)


def test_gpt2_init_scales_residual_projections():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=8, n_head=4, n_embd=256, vocab_size=1000))
    assert model.lm_head.weight is model.transformer.wte.weight  # tied
    c_fc, c_proj = model.transformer.h[0].mlp.c_fc.weight, model.transformer.h[0].mlp.c_proj.weight
    assert c_fc.std().item() == pytest.approx(0.02, rel=0.05)
    assert c_proj.std().item() == pytest.approx(0.02 / math.sqrt(2 * 8), rel=0.05)


def test_seeded_sampling_is_deterministic():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=64, n_layer=2, n_head=2, n_embd=32, vocab_size=50257))
    no_autocast = lambda: torch.autocast("cpu", enabled=False)  # noqa: E731
    first = sample(
        model, "Hello, I'm a language model,", 3, 24, "cpu", seed=42, autocast=no_autocast
    )
    again = sample(
        model, "Hello, I'm a language model,", 3, 24, "cpu", seed=42, autocast=no_autocast
    )
    other = sample(
        model, "Hello, I'm a language model,", 3, 24, "cpu", seed=7, autocast=no_autocast
    )
    assert first == again
    assert first != other
    assert all(text.startswith("Hello, I'm a language model,") for text in first)


# ---- optimizer and schedule


def test_lr_schedule():
    kw = dict(max_lr=6e-4, min_lr=6e-5, warmup_steps=10, max_steps=110)
    assert get_lr(0, **kw) == pytest.approx(6e-5)  # warmup starts at max_lr / warmup_steps
    assert get_lr(9, **kw) == pytest.approx(6e-4)
    assert get_lr(10, **kw) == pytest.approx(6e-4)  # the cosine starts at its top
    assert get_lr(60, **kw) == pytest.approx((6e-4 + 6e-5) / 2)  # halfway down
    assert get_lr(110, **kw) == pytest.approx(6e-5)
    assert get_lr(500, **kw) == pytest.approx(6e-5)
    lrs = [get_lr(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_weight_decay_groups():
    model = GPT(GPTConfig(block_size=32, n_layer=2, n_head=2, n_embd=16, vocab_size=100))
    opt = model.configure_optimizers(weight_decay=0.1, learning_rate=6e-4, device_type="cpu")
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(
        p.dim() < 2 for p in no_decay["params"]
    )
    # every parameter exactly once (the tied wte/lm_head counts once)
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    # 2-D: wte, wpe, and per block c_attn, attn.c_proj, c_fc, mlp.c_proj
    assert len(decay["params"]) == 2 + 4 * 2
    assert opt.defaults["betas"] == (0.9, 0.95) and opt.defaults["eps"] == 1e-8


# ---- MFU: the part's peak


@pytest.mark.parametrize(
    "name, sms, part, tflops",
    [
        # the SXM part's name says neither SXM nor PCIe
        ("NVIDIA H100 80GB HBM3", 132, "H100 SXM", 989),
        ("NVIDIA H100 PCIe", 114, "H100 PCIe", 756),
        ("NVIDIA H100 NVL", 132, "H100 NVL", 835),
        ("NVIDIA H200", 132, "H200 SXM", 989),
        ("NVIDIA H200 NVL", 132, "H200 NVL", 835),
        ("NVIDIA GH200 480GB", 132, "GH200", 989),
        ("NVIDIA H800", 132, "H800 SXM", 989),
        ("NVIDIA H800 PCIe", 114, "H800 PCIe", 756),
        ("NVIDIA A100-SXM4-80GB", 108, "A100", 312),
        ("NVIDIA A100-PCIE-40GB", 108, "A100", 312),
        ("NVIDIA A100 80GB PCIe", 108, "A100", 312),
        ("NVIDIA A800-SXM4-80GB", 108, "A800", 312),
    ],
)
def test_mfu_peak_of_each_known_part(name, sms, part, tflops):
    assert meters.MFU.lookup(name, sms) == (tflops, part)


@pytest.mark.parametrize(
    "name, sms, why",
    [
        ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", 42, "MIG slice"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 16, "MIG slice"),
        ("NVIDIA H100 80GB HBM3", 66, "has 66 SMs"),  # a slice that does not say so
        # a PCIe part by its SMs, whatever its name: never the SXM peak
        ("NVIDIA H100", 114, "has 114 SMs"),
        ("NVIDIA L40S", 142, "no peak bf16 throughput known"),
        ("NVIDIA B200", 148, "no peak bf16 throughput known"),
        ("NVIDIA GeForce RTX 4090", 128, "no peak bf16 throughput known"),
        ("cpu", None, "no peak bf16 throughput known for cpu"),
    ],
)
def test_mfu_peak_unknown(name, sms, why):
    tflops, reason = meters.MFU.lookup(name, sms)
    assert tflops is None and why in reason


def test_mfu_line_on_a_faked_gpu(monkeypatch):
    h100_pcie = type("Properties", (), {"name": "NVIDIA H100 PCIe", "multi_processor_count": 114})
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: h100_pcie)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32))
    mfu = meters.MFU(model, 64, "cuda:0", world_size=8)
    per_token = meters.flops_per_token(model, 64)
    assert mfu.basis() == (
        f"mfu: {per_token / 1e9:.3f} GFLOPs per token against 8 x 756 TFLOPS "
        "(NVIDIA H100 PCIe: H100 PCIe)"
    )
    tokens_per_sec = 0.4 * 8 * 756e12 / per_token  # 40% of the eight GPUs' peak
    assert mfu(tokens_per_sec) == " | mfu 40.0%"
    assert meters.MFU(model, 64, "cpu", world_size=1)(tokens_per_sec) == ""


# ---- data loader


def numbered_shards(lengths):
    """Shards whose tokens count up 0, 1, 2, ... across shard ends, so a token tells where
    it came from."""
    ends = np.cumsum(lengths)
    return [np.arange(end - n, end, dtype=np.uint16) for n, end in zip(lengths, ends)]


def test_loader_every_token_once_across_ranks_and_shards():
    shards = numbered_shards([1000, 537, 1200])  # shard ends fall mid-batch
    B, T, world = 2, 16, 3
    loaders = [DataLoaderLite(shards, B, T, rank, world) for rank in range(world)]
    seen = []
    for _ in range(2737 // (B * T * world)):
        for loader in loaders:
            x, y = loader.next_batch()
            assert x.dtype == torch.int64 and x.shape == (B, T)
            # targets are the inputs shifted by one
            assert torch.equal(x.flatten()[1:], y.flatten()[:-1])
            # across shard ends
            assert torch.equal(y.flatten() - x.flatten(), torch.ones(B * T, dtype=torch.int64))
            seen.extend(x.flatten().tolist())
    # every token once, none dropped at the shard ends
    assert sorted(seen) == list(range(len(seen)))


def test_loader_shuffles_documents_and_shards_with_a_seed():
    rng = np.random.default_rng(0)
    docs = [
        np.concatenate(([50256], rng.integers(0, 50000, size=rng.integers(5, 40))))
        for _ in range(60)
    ]
    stream = np.concatenate(docs).astype(np.uint16)
    shards = [stream[:700], stream[700:]]
    n = len(stream) // 8 * 8
    B, T = 1, 8

    def one_epoch(seed):
        loader = DataLoaderLite(shards, B, T, seed=seed)
        out = [loader.next_batch()[0].flatten() for _ in range(n // (B * T))]
        return torch.cat(out).numpy()

    plain, shuffled, again = one_epoch(None), one_epoch(5), one_epoch(5)
    assert np.array_equal(plain, stream[:n])
    assert np.array_equal(shuffled, again)  # seeded: the same order on every rank and every run
    assert not np.array_equal(shuffled, plain)
    # a permutation of whole documents: the same multiset of tokens and the same number
    # of document starts
    full = DataLoaderLite(shards, 1, len(stream) - 1, seed=5).next_batch()
    tokens = torch.cat([full[0][0], full[1][0, -1:]]).numpy()
    assert sorted(tokens.tolist()) == sorted(stream.tolist())
    doc_starts = np.flatnonzero(tokens == 50256)
    pieces = [tuple(p) for p in np.split(tokens, doc_starts) if len(p)]
    originals = {tuple(d) for d in docs}
    split_docs = [p for p in pieces if p not in originals]
    assert len(split_docs) <= 2  # only the document cut by the shard boundary can be in two pieces


def test_loader_state_round_trip():
    shards = numbered_shards([300, 200])
    a = DataLoaderLite(shards, 2, 8, seed=3)
    for _ in range(20):
        a.next_batch()
    b = DataLoaderLite(shards, 2, 8, seed=3)
    b.load_state_dict(a.state_dict())
    for _ in range(30):  # crosses shards and epochs
        xa, ya = a.next_batch()
        xb, yb = b.next_batch()
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert a.state_dict()["epoch"] >= 1


def test_loader_reads_shards_memory_mapped(tmp_path):
    for split, n in [("val", 500), ("train", 2000), ("train", 1500)]:
        index = len(list(tmp_path.glob("*.npy")))
        np.save(tmp_path / f"edufineweb_{split}_{index:06d}.npy", np.arange(n, dtype=np.uint16))
    shards = train_gpt2.load_split(str(tmp_path), "train", 1)
    assert [len(s) for s in shards] == [2000, 1500]
    assert all(isinstance(s, np.memmap) for s in shards)
    assert len(train_gpt2.load_split(str(tmp_path), "val", 1)[0]) == 500


def test_a_split_is_read_from_the_end_of_a_name_in_a_folder_named_like_a_pattern(tmp_path):
    """A prefix holding `_train_` keeps its validation shard out of training, and a folder called
    `sh[1]` is the folder of that name (a glob would read it as `sh1`, and find nothing)."""
    folder = tmp_path / "sh[1]"
    folder.mkdir()
    (tmp_path / "sh1").mkdir()  # what the pattern would match
    np.save(tmp_path / "sh1" / "x_train_000001.npy", np.arange(9, dtype=np.uint16))
    for i, (split, n) in enumerate([("val", 500), ("train", 2000), ("train", 1500)]):
        np.save(folder / f"my_train_data_{split}_{i:06d}.npy", np.arange(n, dtype=np.uint16))
    assert [len(s) for s in train_gpt2.load_split(str(folder), "train", 1)] == [2000, 1500]
    assert [len(s) for s in train_gpt2.load_split(str(folder), "val", 1)] == [500]


def test_a_run_folder_named_like_a_pattern_resumes_its_own_checkpoints(tmp_path):
    """--log-dir 'run[1]': --resume finds the folder's checkpoints (a glob found none, restarted at
    step 0 and wrote over them)."""
    log_dir = tmp_path / "run[1]"
    common = [
        "--data",
        "input.txt",
        *TINY,
        *"-B 2 -T 32 --total-batch 64 --device cpu --checkpoint-every 2".split(),
    ]
    first = run([*common, "--max-steps", "4", "--log-dir", str(log_dir)])
    assert first.returncode == 0, first.stderr
    saved = (log_dir / "model_00004.pt").read_bytes()
    resumed = run([*common, "--max-steps", "6", "--log-dir", str(log_dir), "--resume"])
    assert resumed.returncode == 0 and "resumed from step 4" in resumed.stdout, resumed.stderr
    assert (log_dir / "model_00004.pt").read_bytes() == saved and sorted(
        train_losses(log_dir)
    ) == list(range(6))


def test_resume_on_a_shard_folder_that_changed_is_refused(tmp_path):
    """The checkpoint's data position is a position in the shards it was trained on: a
    folder that gained a shard would train on other data unsaid, one that lost a shard
    failed with an IndexError."""
    shards = tmp_path / "shards"
    shards.mkdir()
    tokens = np.array(
        tiktoken.get_encoding("gpt2").encode_ordinary((ROOT / "input.txt").read_text()),
        dtype=np.uint16,
    )
    for i, split in enumerate(["val", "train", "train"]):
        np.save(shards / f"x_{split}_{i:06d}.npy", tokens[i * 20_000 : (i + 1) * 20_000])
    log_dir = tmp_path / "log"
    common = [
        "--data",
        str(shards),
        *TINY,
        *"-B 2 -T 32 --total-batch 64 --device cpu --checkpoint-every 2".split(),
    ]
    assert run([*common, "--max-steps", "2", "--log-dir", str(log_dir)]).returncode == 0
    np.save(shards / "x_train_000003.npy", tokens[60_000:80_000])  # gained a shard
    gained = run([*common, "--max-steps", "4", "--log-dir", str(log_dir), "--resume"])
    assert gained.returncode == 1 and "Traceback" not in gained.stderr
    expected = (
        f"model_00002.pt was trained on 2 shards of {shards}, which now holds 3 other ones: "
        "resume it on the"
    )
    assert expected in gained.stderr.strip().splitlines()[-1]
    (shards / "x_train_000003.npy").unlink()
    (shards / "x_train_000002.npy").unlink()  # lost one
    lost = run([*common, "--max-steps", "4", "--log-dir", str(log_dir), "--resume"])
    assert (
        lost.returncode == 1
        and "Traceback" not in lost.stderr
        and "which now holds 1 other ones" in lost.stderr
    )


# ---- whole runs


def test_cpu_preset_loss_falls(tmp_path):
    proc = run(
        [
            "--preset",
            "cpu",
            "--val-every",
            "20",
            "--log-dir",
            str(tmp_path),
        ]
    )
    assert proc.returncode == 0, proc.stderr
    losses = train_losses(tmp_path)
    # at init every token is about equally likely
    assert losses[0] == pytest.approx(math.log(50257), abs=0.3)
    assert sum(losses[s] for s in range(15, 20)) / 5 < losses[0] - 2.5  # the preset's 20 steps
    assert "sample 0: \"Hello, I'm a language model," in proc.stdout
    assert (tmp_path / "model_00020.pt").exists()


def test_ddp_two_ranks_equal_one_process(tmp_path, straight_ddp):
    # two micro-steps per rank: the gradient must be synced on the last one only (the lecture's
    # placement of require_backward_grad_sync synced the first one and let the replicas drift apart)
    single = run([*TWO, "--log-dir", str(tmp_path / "single")])
    assert single.returncode == 0, single.stderr
    ddp_dir, ddp_out = straight_ddp
    assert "grad accum 4" in single.stdout and "grad accum 2" in ddp_out and "x2" in ddp_out
    assert "replicas differ by at most 0.000e+00" in ddp_out
    a, b = train_losses(tmp_path / "single"), train_losses(ddp_dir)
    assert a.keys() == b.keys() == set(range(12))
    for step in a:
        assert a[step] == pytest.approx(b[step], abs=1e-5)
    wa, wb = final_weights(tmp_path / "single"), final_weights(ddp_dir)
    for key in wa:
        # AdamW divides by sqrt(v): where a gradient is near zero (a rare token's row of wte),
        # summing it in another order can change that element's step by a few percent of lr (once
        # 1.4e-5 here; typically under 1e-6; the key bias in c_attn has only such gradients, as
        # softmax ignores it). So: every element within a tenth of one step at lr 1e-3, and each
        # tensor on average within a thousandth of one
        torch.testing.assert_close(wa[key], wb[key], atol=1e-4, rtol=0)
        assert (wa[key] - wb[key]).abs().mean() < 1e-6, key


def test_a_diverged_step_is_never_resumed_and_a_lower_max_lr_goes_on(tmp_path):
    """--max-lr 1e30: step 0's update leaves huge but finite weights, whose loss at step 1 is not
    finite. The run stops before step 1's update and sets aside the checkpoint of step 1 (exactly
    those weights), so that the advice it prints can be followed: --resume with a lower --max-lr
    trains on, with finite losses."""
    log_dir = tmp_path / "nan"
    common = [
        "--data",
        "input.txt",
        *TINY,
        *"-B 2 -T 32 --total-batch 64 --max-steps 4 --device cpu".split(),
    ]
    common += ["--checkpoint-every", "1", "--log-dir", str(log_dir)]
    diverged = run([*common, "--max-lr", "1e30"])
    assert diverged.returncode == 1 and "Traceback" not in diverged.stderr, diverged.stderr
    assert "at step 1: stopped before the update" in diverged.stderr
    assert not list(log_dir.glob("model_*.pt"))
    aside = torch.load(log_dir / "diverged_00001.pt", weights_only=True)
    assert aside["step"] == 1 and max(float(w.abs().max()) for w in aside["model"].values()) > 1e20

    resumed = run([*common, "--max-lr", "1e-3", "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    losses = train_losses(log_dir)
    assert sorted(losses) == [0, 1, 2, 3] and all(math.isfinite(loss) for loss in losses.values())

    # from a checkpoint, another --max-lr is allowed, and said to change the run
    lowered = run([*common, "--max-lr", "5e-4", "--resume", str(log_dir / "model_00002.pt")])
    assert lowered.returncode == 0, lowered.stderr
    assert (
        "was trained with --max-lr 0.001: from step 2 on, this run changes it to 0.0005"
        in lowered.stderr
    )


def test_sigterm_then_resume_equals_uninterrupted(tmp_path, straight):
    interrupted = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [sys.executable, "train_gpt2.py", *ONE, "--log-dir", str(interrupted)],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:
        if line.startswith("step     3 "):
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "stopped at step" in out
    (checkpoint,) = interrupted.glob("model_*.pt")
    stopped_at = int(checkpoint.stem.split("_")[1])
    assert 3 < stopped_at < 20

    resumed = run([*ONE, "--log-dir", str(interrupted), "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from step {stopped_at}" in resumed.stdout
    # the same log, line for line, under its own run id (kept across the resume)
    resumed_log, straight_log = (
        (interrupted / "log.txt").read_text(),
        (straight / "log.txt").read_text(),
    )
    assert timeless(resumed_log)[1:] == timeless(straight_log)[1:]
    assert (
        resumed_log.startswith("# run ")
        and resumed_log.split("\n", 1)[0] != straight_log.split("\n", 1)[0]
    )
    assert_same_run(interrupted, straight)


def run_until_hang_up(argv, line):
    """Run argv on a terminal of its own (a pseudo-terminal, as sshd gives a login) and hang the
    terminal up as a dropped SSH connection does once `line` is shown: the kernel sends SIGHUP to
    the process that owns it, and every write to it fails from then on. Returns the exit status."""
    terminal, far_end = pty.openpty()

    def own_the_terminal():  # in the child, after start_new_session's setsid()
        fcntl.ioctl(1, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=ENV,
        stdin=far_end,
        stdout=far_end,
        stderr=far_end,
        start_new_session=True,
        preexec_fn=own_the_terminal,
    )
    os.close(far_end)
    shown = b""
    try:
        while line.encode() not in shown:
            shown += os.read(terminal, 4096)
    except OSError:  # the run ended before it showed the line
        raise AssertionError(shown.decode()) from None
    os.close(terminal)
    return proc.wait(timeout=120)


def test_hang_up_then_resume_equals_uninterrupted(tmp_path, straight):
    hung_up = tmp_path / "hung_up"
    assert (
        run_until_hang_up(
            [sys.executable, "train_gpt2.py", *ONE, "--log-dir", str(hung_up)], "step     3 "
        )
        == 0
    )
    (checkpoint,) = hung_up.glob("model_*.pt")  # written although its terminal was gone
    stopped_at = int(checkpoint.stem.split("_")[1])
    assert 3 < stopped_at < 20

    resumed = run([*ONE, "--log-dir", str(hung_up), "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from step {stopped_at}" in resumed.stdout
    assert_same_run(hung_up, straight)


def test_a_write_the_hung_up_terminal_refuses_before_its_sighup_stops_the_run_as_the_sighup_would(
    tmp_path,
):
    # under torchrun the agent owns the terminal and forwards its SIGHUP; a worker that prints
    # before it arrives gets EIO. Here the owner takes the SIGHUP and forwards nothing, so the run
    # only ever sees the failed write
    owner = "import signal, subprocess, sys; signal.signal(signal.SIGHUP, lambda *a: None); "
    owner += "sys.exit(subprocess.call(sys.argv[1:]))"
    argv = [
        "--data",
        "input.txt",
        *TINY,
        *"-B 2 -T 32 --total-batch 64 --max-steps 20 --device cpu".split(),
    ]
    argv += ["--log-dir", str(tmp_path)]
    assert (
        run_until_hang_up(
            [sys.executable, "-c", owner, sys.executable, "train_gpt2.py", *argv], "step     3 "
        )
        == 0
    )
    (checkpoint,) = tmp_path.glob("model_*.pt")
    assert 3 < int(checkpoint.stem.split("_")[1]) < 20


def test_hang_up_under_torchrun_then_resume_equals_uninterrupted(tmp_path, straight_ddp):
    # the hang-up reaches torchrun's agent, which owns the terminal; it forwards SIGHUP to
    # the two workers
    hung_up = tmp_path / "hung_up"
    # the workers stop cleanly; the agent then exits 1 with a traceback, as on SIGTERM
    # (torchrun's own doing)
    run_until_hang_up(
        [*helpers.TORCHRUN, "train_gpt2.py", *TWO, "--log-dir", str(hung_up)], "step     3 "
    )
    (checkpoint,) = hung_up.glob("model_*.pt")
    stopped_at = int(checkpoint.stem.split("_")[1])
    assert 3 < stopped_at < 12

    resumed = torchrun(*TWO, "--log-dir", str(hung_up), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from step {stopped_at}" in resumed.stdout
    assert_same_run(hung_up, straight_ddp[0])


def test_sigterm_to_the_workers_stops_before_the_next_evaluation(tmp_path):
    # what the README tells a torchrun user to do: signal the workers
    # (pkill -TERM -P <torchrun's pid>), not torchrun, whose agent ends in a traceback and status 1
    # when signalled itself; then torchrun exits 0
    argv = [
        "--data",
        "input.txt",
        *TINY,
        *"-B 2 -T 32 --total-batch 128 --max-steps 20 --device cpu".split(),
    ]
    argv += [*"--val-every 1 --val-steps 8 --sample-every 1 --log-dir".split(), str(tmp_path)]
    proc = subprocess.Popen(
        [
            *helpers.TORCHRUN,
            "train_gpt2.py",
            *argv,
        ],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    after_step_2 = False
    for line in proc.stdout:
        after_step_2 = after_step_2 or line.startswith("step     2 ")
        # step 3's: its sampling and training still to come
        if after_step_2 and line.startswith("validation loss"):
            subprocess.run(["pkill", "-TERM", "-P", str(proc.pid)], check=True)
            break
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "Traceback" not in err, err
    # stopped before step 3's training (before its sampling too, unless the signal came
    # after that check)
    assert "stopped at step 3: resume with --resume" in out and "step     3 " not in out
    assert [p.name for p in tmp_path.glob("model_*.pt")] == ["model_00003.pt"]


def test_hang_up_under_nohup_goes_on(tmp_path):
    # nohup runs a command with SIGHUP ignored, so that it outlives the terminal: the run
    # keeps that choice
    argv = [
        sys.executable,
        "train_gpt2.py",
        "--data",
        "input.txt",
        *TINY,
        *"-B 2 -T 32 --max-steps 6".split(),
    ]
    proc = subprocess.Popen(
        [*argv, "--total-batch", "64", "--device", "cpu", "--log-dir", str(tmp_path)],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    for line in proc.stdout:
        if line.startswith("step     1 "):
            proc.send_signal(signal.SIGHUP)
            break
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "stopped" not in out and "step     5 " in out
    assert [p.name for p in tmp_path.glob("model_*.pt")] == ["model_00006.pt"]


# ---- bad input: one line, non-zero exit, nothing written over


def assert_fails(proc, message):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert message in proc.stderr
    return proc


def test_missing_data(tmp_path):
    assert_fails(
        run(["--data", str(tmp_path / "nowhere"), "--log-dir", str(tmp_path / "log")]),
        "does not exist",
    )
    assert_fails(
        run(["--data", str(tmp_path), "--log-dir", str(tmp_path / "log")]), "no train shards"
    )
    assert not (tmp_path / "log").exists()


def test_corrupt_and_truncated_shards(tmp_path):
    np.save(tmp_path / "x_val_000000.npy", np.arange(100, dtype=np.uint16))
    good = tmp_path / "x_train_000001.npy"
    np.save(good, np.arange(5000, dtype=np.uint16))
    truncated = tmp_path / "x_train_000002.npy"
    truncated.write_bytes(good.read_bytes()[:4000])
    assert_fails(
        run(["--data", str(tmp_path), "--log-dir", str(tmp_path / "log")]), "x_train_000002.npy"
    )
    truncated.write_bytes(b"not a numpy file at all")
    assert_fails(
        run(["--data", str(tmp_path), "--log-dir", str(tmp_path / "log")]),
        "not a readable .npy shard",
    )
    np.save(truncated, np.arange(10, dtype=np.int32))
    assert_fails(
        run(["--data", str(tmp_path), "--log-dir", str(tmp_path / "log")]), "expected a 1-D uint16"
    )


def test_impossible_batch_and_bad_flags(tmp_path):
    proc = assert_fails(
        run(["--preset", "cpu", "--total-batch", "1000", "--log-dir", str(tmp_path)]),
        "--total-batch 1000 is not a multiple of B*T*processes = 8*64*1 = 512: "
        "pass --total-batch 1024 --max-steps 20",
    )
    assert len(proc.stderr.strip().splitlines()) == 1
    assert_fails(run(["--preset", "d99"]), "invalid choice")
    assert_fails(run(["--preset", "cpu", "--max-steps", "many"]), "expected a whole number")
    assert_fails(
        run(
            [
                "--preset",
                "cpu",
                "--resume",
                str(tmp_path / "missing.pt"),
                "--log-dir",
                str(tmp_path),
            ]
        ),
        "no checkpoint at",
    )
    assert list(tmp_path.iterdir()) == []


def test_existing_run_is_never_written_over(tmp_path):
    (tmp_path / "log.txt").write_text("0 train 10.9\n")
    assert_fails(run(["--preset", "cpu", "--log-dir", str(tmp_path)]), "already holds a run")
    assert (tmp_path / "log.txt").read_text() == "0 train 10.9\n"
    (tmp_path / "model_00010.pt").write_bytes(b"torn")
    assert_fails(
        run(["--preset", "cpu", "--log-dir", str(tmp_path), "--resume"]),
        "not a readable checkpoint",
    )
    assert (tmp_path / "model_00010.pt").read_bytes() == b"torn"


def test_compiled_run_with_every_evaluation(tmp_path):
    """torch.compile ON through training, validation, HellaSwag and sampling (the reference must
    turn compile off)."""
    rows = [
        {
            "ctx": f"A man walks to the {w}. He",
            "label": i % 4,
            "endings": [
                "opens the door.",
                "sits down.",
                "eats a fish quickly.",
                "looks at the sky.",
            ],
        }
        for i, w in enumerate(["door", "park", "shop", "river", "house", "car"])
    ]
    hella = tmp_path / "hellaswag.jsonl"
    hella.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log_dir = tmp_path / "log"
    proc = run(
        [
            "--data",
            "input.txt",
            *TINY,
            "-B",
            "4",
            "-T",
            "32",
            "--total-batch",
            "128",
            "--max-steps",
            "2",
            "--device",
            "cpu",
            "--compile",
            "--val-every",
            "1",
            "--val-steps",
            "2",
            "--hellaswag-every",
            "1",
            "--hellaswag-data",
            str(hella),
            "--sample-every",
            "1",
            "--log-dir",
            str(log_dir),
        ]
    )
    assert proc.returncode == 0, proc.stderr
    lines = (log_dir / "log.txt").read_text().splitlines()[1:]
    kinds = [line.split()[:2] for line in lines if line.split()[1] in ("val", "hella", "train")]
    assert kinds == [
        ["0", "val"],
        ["0", "hella"],
        ["0", "train"],
        ["1", "val"],
        ["1", "hella"],
        ["1", "train"],
        ["2", "val"],
        ["2", "hella"],
    ]
    assert "HellaSwag accuracy: " in proc.stdout and "/6=" in proc.stdout
    assert proc.stdout.count("sample 0:") == 2  # at steps 1 and 2


def test_a_killed_runs_half_written_checkpoint_goes_when_the_next_run_takes_the_folder(tmp_path):
    log_dir = tmp_path / "log"
    common = [
        "--data",
        "input.txt",
        *TINY,
        *"-B 2 -T 32 --total-batch 64 --device cpu --checkpoint-every 2".split(),
    ]
    assert run([*common, "--max-steps", "2", "--log-dir", str(log_dir)]).returncode == 0
    # no process has this pid: its writer was killed
    dead = log_dir / f"model_00003.pt.{2**22 + 1}.tmp"
    live = log_dir / f"model_00003.pt.{os.getpid()}.tmp"  # a writer that still runs keeps its own
    dead.write_bytes(b"half")
    live.write_bytes(b"half")
    assert run([*common, "--max-steps", "3", "--log-dir", str(log_dir), "--resume"]).returncode == 0
    assert not dead.exists() and live.exists()
