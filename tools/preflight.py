"""
Check a training run's setup before it starts: train_gpt2.py's flags, one line per check, nothing
trained.

    python -m tools.preflight --preset cpu
    python -m tools.preflight --world-size 8   # before torchrun --nproc_per_node=8 train_gpt2.py

--world-size is the number of processes the run will have (default: the GPUs torch sees, or 1). The
data (against fineweb.py's manifest, every byte), the disk the checkpoints need, the batch
arithmetic, the device, the run folder (a fresh run or what --resume continues, with the
checkpoint's settings), the HellaSwag file, and the run's time from a few measured steps. Exit
status 0 only when the run would start.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import torch

import train_gpt2
from longrun.common import ArgumentParser, UserError, count, lock_folder, run_cli
from longrun.manifest import read_manifest, shard_problems
from longrun.meters import duration
from train_gpt2 import (
    GPT,
    DataLoaderLite,
    GPTConfig,
    RunFolder,
    accumulate_gradients,
    compile_on,
    load_model,
    precision,
)

MEASURED_STEPS = 3  # timed after one warm-up step (compilation, allocator, caches)


class Plan:
    """What the checks learn about the run, each from the ones before it."""

    def __init__(self, args, world_size):
        self.args, self.world_size = args, world_size
        self.config = GPTConfig(
            vocab_size=args.vocab_size, n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd
        )
        self.train_shards = self.device = self.grad_accum_steps = None
        self.start_step = 0


def check_data(plan):
    args, B, T = plan.args, plan.args.batch_size, plan.args.seq_len
    verified = ""
    if os.path.isdir(args.data):
        verified = verify_shards(Path(args.data))
    min_tokens = B * T * plan.world_size + 1
    # the checks the run makes
    plan.train_shards = train_gpt2.load_split(args.data, "train", min_tokens)
    train_tokens = sum(map(len, plan.train_shards))
    val_tokens = sum(map(len, train_gpt2.load_split(args.data, "val", min_tokens)))
    epochs = args.max_steps * args.total_batch / train_tokens
    return (
        f"{args.data}{verified}: train {train_tokens:,} tokens, val {val_tokens:,}; "
        f"{args.max_steps:,} steps x {args.total_batch:,} tokens = {epochs:.2f} epochs"
    )


def verify_shards(folder):
    """' (N shards match manifest.json)', each checked as `fineweb.py --verify` checks it (sha256
    included), or a note that a folder without a manifest cannot be verified."""
    manifest = read_manifest(folder)
    if manifest is None:
        return " (no manifest.json: not made by fineweb.py, so not verified)"
    for shard in manifest["shards"]:
        if problems := shard_problems(folder / shard["file"], shard):
            raise UserError(
                f"{folder / shard['file']}: {'; '.join(problems)}: run python fineweb.py --verify "
                f"--out {folder}"
            )
    return f" ({len(manifest['shards'])} shards match manifest.json)"


def check_batch(plan):
    args = plan.args
    plan.grad_accum_steps = train_gpt2.micro_steps(
        args.total_batch,
        args.batch_size,
        args.seq_len,
        plan.world_size,
        args.max_steps,
        bool(args.resume),
    )
    micro = args.batch_size * args.seq_len * plan.world_size
    return (
        f"B {args.batch_size} x T {args.seq_len} x world {plan.world_size} = {micro:,} tokens per "
        "micro-step; "
        f"{args.total_batch:,} per step: grad accum {plan.grad_accum_steps}"
    )


def check_device(plan):
    args = plan.args
    device = train_gpt2.pick_device(args.device)
    kind = torch.device(device).type
    if kind == "cuda":
        # this machine's: --world-size counts the processes on every machine
        gpus = torch.cuda.device_count()
        if plan.world_size > gpus and plan.world_size % gpus:
            raise UserError(f"{plan.world_size} processes do not fill machines of {gpus} GPUs each")
        name = f"{min(plan.world_size, gpus)} x {torch.cuda.get_device_name(0)}"
        if plan.world_size > gpus:
            name += f" on each of {plan.world_size // gpus} machines"
    else:
        name = f"{device} x{plan.world_size}"
    dtype, _ = precision(args.dtype, kind)
    if dtype == "bfloat16" and kind == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError(f"{torch.cuda.get_device_name(0)} has no bfloat16: pass --dtype float32")
    compiled = compile_on(args, kind)
    if compiled and (problem := compiler_missing()):
        raise UserError(f"torch.compile needs {problem}: install it, or pass --no-compile")
    plan.device = device
    return f"{name}, {dtype}, compile {'on' if compiled else 'off'}"


def compiler_missing():
    """What torch.compile's code generation needs and this machine lacks (a C compiler, Python's
    headers), or None. The compiler is tried on a file that includes Python.h, as Triton's launcher
    does: one that is there but fails (a broken gcc first on PATH) is found here, not at the run's
    first step."""
    if not (cc := shutil.which("gcc") or shutil.which("cc")):
        return "a C compiler (gcc)"
    if not os.path.exists(os.path.join(include := sysconfig.get_paths()["include"], "Python.h")):
        return "Python's headers (Python.h: the python3-dev package)"
    probe = [cc, "-fsyntax-only", "-I", include, "-x", "c", "-"]  # checks the code, writes nothing
    tried = subprocess.run(probe, input="#include <Python.h>\n", capture_output=True, text=True)
    if tried.returncode:
        why = (tried.stderr.strip().splitlines() or [f"exit status {tried.returncode}"])[0]
        return f"a C compiler that works ({cc} on #include <Python.h>: {why})"
    return None


def check_run(plan):
    args = plan.args
    if os.path.isdir(args.log_dir):  # a run going on in it holds its lock
        lock_folder(args.log_dir, hold=False)
    # the run's checks, without taking the folder
    run = RunFolder(args, master_process=False, device=None)
    if not run.checkpoint:
        state = "holds no checkpoint: the run starts at step 0" if args.resume else "a fresh run"
        return f"{args.log_dir}: {state}"
    run.check_config(plan.config)
    plan.start_step = min(run.checkpoint["step"], args.max_steps)
    if finished := run.finished():
        return f"{args.log_dir}: the run is done: {finished}; --resume only says so"
    where = f"{run.checkpoint['path']} at step {plan.start_step:,} of {args.max_steps:,}"
    return f"{args.log_dir}: resumes {where}"


def check_disk(plan):
    args = plan.args
    with torch.device("meta"):  # the shapes only: no memory, no initialisation
        n_params = sum(p.numel() for p in GPT(plan.config).parameters())
    checkpoint = 3 * 4 * n_params  # float32 weights and AdamW's two moments
    every, start, end = args.checkpoint_every, plan.start_step, args.max_steps
    # the checkpoints still to come: the end's, and each multiple of --checkpoint-every between the
    # start and the end
    saves = (end > start) + ((end - 1) // every - start // every if every else 0)
    # a step line in console.txt and log.txt, with room to spare
    logs = 200 * (args.max_steps - plan.start_step)
    need = saves * checkpoint + logs
    folder = Path(args.log_dir).absolute()
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    line = (
        f"{saves} x {checkpoint / 1e9:.2f} GB of checkpoints + logs = {need / 1e9:.2f} GB, "
        f"{free / 1e9:.1f} GB free"
    )
    if free < need:
        raise UserError(f"{args.log_dir}: {line}")
    return f"{args.log_dir}: {line}"


def check_hellaswag(plan):
    args = plan.args
    if args.hellaswag_every == 0:
        return "off (--hellaswag-every 0)"
    # downloads the validation set as the run would, if not cached
    examples = train_gpt2.load_hellaswag(args)
    source = args.hellaswag_data or "the validation set"
    return f"{len(examples):,} examples from {source}, every {args.hellaswag_every} steps"


def check_time(plan):
    args, device = plan.args, plan.device
    if plan.train_shards is None or device is None or plan.grad_accum_steps is None:
        raise UserError("not measured: the data, batch and device checks must pass first")
    device_type = torch.device(device).type
    torch.manual_seed(args.seed)
    model = load_model(pretrained=args.pretrained, config=plan.config).to(device)
    optimizer = model.configure_optimizers(args.weight_decay, args.max_lr, device_type)
    if compile_on(args, device_type):
        model = torch.compile(model)
    loader = DataLoaderLite(plan.train_shards, args.batch_size, args.seq_len, seed=args.seed)
    _, autocast = precision(args.dtype, device_type)
    times = [
        timed_step(model, optimizer, loader, plan.grad_accum_steps, device, autocast)
        for _ in range(1 + MEASURED_STEPS)
    ]
    dt = sum(times[1:]) / MEASURED_STEPS
    steps = args.max_steps - plan.start_step
    memory = (
        f", {torch.cuda.max_memory_allocated(device) / 1e9:.1f} GB of GPU memory"
        if device_type == "cuda"
        else ""
    )
    return (
        f"{1000 * dt:.1f}ms per step ({MEASURED_STEPS} after a warm-up, one process{memory}): "
        f"{steps:,} steps take about {duration(dt * steps)}, evaluation not counted"
    )


def timed_step(model, optimizer, loader, grad_accum_steps, device, autocast):
    """Seconds for one optimizer step as the run takes it, with its own micro-steps (without DDP's
    all-reduce)."""
    started = time.time()
    optimizer.zero_grad(set_to_none=True)
    accumulate_gradients(model, loader, grad_accum_steps, device, autocast, ddp=False)
    optimizer.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.time() - started


CHECKS = {  # in order: a check may use what the ones before it learned
    "data": check_data,
    "batch": check_batch,
    "device": check_device,
    "run": check_run,
    "disk": check_disk,
    "hellaswag": check_hellaswag,
    "time": check_time,
}


def preflight(args, world_size):
    plan, failed = Plan(args, world_size), 0
    for name, check in CHECKS.items():
        try:
            print(f"{name:9s} ok    {check(plan)}", flush=True)
        except (UserError, OSError) as e:
            print(f"{name:9s} FAIL  {e}", flush=True)
            failed += 1
    print(
        "the run would start"
        if not failed
        else f"{failed} of {len(CHECKS)} checks failed: the run would not start"
    )
    return 1 if failed else 0


def main(argv=None):
    # preflight's one flag; the rest are train_gpt2.py's, --help included
    own = ArgumentParser(add_help=False)
    own.add_argument(
        "--world-size", type=count, default=torch.cuda.device_count() or 1, help="default: the GPUs"
    )
    ours, rest = own.parse_known_args(argv)
    args = train_gpt2.parse_args(rest)
    return run_cli(
        "preflight.py",
        lambda: preflight(args, ours.world_size),
        interrupted="preflight writes nothing",
    )


if __name__ == "__main__":
    sys.exit(main())
