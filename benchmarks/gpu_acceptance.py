"""
A GPU machine's acceptance in one command: the series' speed ladder, the final script at the real
settings, a short real training interrupted and resumed, DDP over all GPUs, and an estimate of the
full run. One table, one JSON file.

    python benchmarks/gpu_acceptance.py                # on a CUDA machine with a C compiler
    python benchmarks/gpu_acceptance.py --skip ladder  # the phases left, when GPU time is short
    python benchmarks/gpu_acceptance.py --smoke        # every code path on CPU in about a minute:
                                                       # a tiny model, gloo

Phases, each in processes of its own (a failing phase is a row with its error; the others still
run):

  ladder   each performance step of the series (found in history/ by its Step-Id, e.g. tf32,
           flash), that step's own train_gpt2.py on GPT-2 124M at B=16, T=1024: ms/step (median
           after warm-up) beside the lecture's A100 figure
  final    today's train_gpt2.py at the real settings (B=64, T=1024, 524,288 tokens a step, bf16,
           compile, flash, fused AdamW): tok/s, MFU against the device's dense bf16 peak, peak
           memory (compiled and eager); the largest B that fits when 64 does not
  resume   a short compiled training through every evaluation (validation, HellaSwag on a local
           stand-in, samples), SIGTERM mid-run, --resume: its losses against an uninterrupted
           run's, and the worst case from SIGTERM to exit (torchrun kills a worker 30 s after
           forwarding SIGTERM)
  ddp      torchrun over all GPUs at the final run's settings: losses against the single process,
           tok/s, and a SIGTERM to the workers at the end (does the run stop cleanly?)

and an estimate of the 19,073-step run on 8 such GPUs from the measured throughput. The JSON (--out)
is rewritten after every phase, so a run cut short keeps what it measured.
"""

import json
import math
import os
import queue
import re
import resource
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the product, and the synthetic HellaSwag examples the tests use
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
# tiktoken's files from the shared cache: the machines may be offline
os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ROOT.parent / "shared" / "tiktoken"))

from longrun.common import ArgumentParser, UserError, run_cli  # noqa: E402

PHASES = ("ladder", "final", "resume", "ddp")
ORDER = ("device", *PHASES, "estimate")  # of the rows
# train_gpt2.py's defaults: one epoch of FineWeb-Edu 10B
FULL_RUN_STEPS, FULL_RUN_BATCH = 19073, 524288
# seconds torchrun's agent waits after forwarding SIGTERM before it kills the workers
TORCHRUN_GRACE = 30


@dataclass(frozen=True)
class Rung:
    slug: str  # the Step-Id of the step that adds it
    adds: str
    lecture_ms: float  # the lecture's ms/step on one A100 at B=16, T=1024
    before: bool = False  # the step *before* slug (the float32 baseline is the step before TF32)


LADDER = (
    Rung("tf32", "float32, the baseline", 1000, before=True),
    Rung("tf32", "TF32 matmuls", 333),
    Rung("bf16", "bfloat16 autocast", 300),
    Rung("compile", "torch.compile", 130),
    Rung("flash", "flash attention", 96),
    Rung("vocab", "vocabulary of 50,304", 93),
    Rung("weight-decay", "fused AdamW", 90),
)
LECTURE_TOK_S = 16 * 1024 / (LADDER[-1].lecture_ms / 1000)  # the last rung's tokens per second


# --------------------------------------------------------------------------------------------------
# ---- GPU counts


def ddp_processes(total_batch, B, T, gpus):
    """The most of gpus processes that split total_batch into whole B*T micro-batches (524,288
    tokens at B=64, T=1024: 1, 2, 4 or 8)."""
    return max(n for n in range(1, gpus + 1) if total_batch % (B * T * n) == 0)


def gpu_counts_not_dividing(total_batch=FULL_RUN_BATCH, B=64, T=1024, up_to=16):
    """The GPU counts for which total_batch tokens is not a whole number of B*T micro-batches per
    GPU."""
    return [n for n in range(1, up_to + 1) if total_batch % (B * T * n)]


# --------------------------------------------------------------------------------------------------
# ---- the plan: the real settings, or the CPU smoke mode's tiny ones


@dataclass
class Plan:
    smoke: bool
    device: str  # "cuda" or "cpu"
    model: list  # model-size flags for every run (empty: GPT-2 124M)
    ladder: list  # flags for each ladder step's own train_gpt2.py
    ladder_steps: int
    ladder_warmup: int  # step intervals left out of the median (compilation, warm-up)
    # train the ladder on this many characters of tiny shakespeare (0: the step's whole input.txt)
    ladder_text: int
    ladder_rungs: tuple  # which rungs run (empty: all)
    T: int
    total_batch: int
    batches: tuple  # B to try for the final run, largest first
    final_steps: int
    final_warmup: int
    resume: list  # flags of the resume phase's runs
    resume_steps: int
    # SIGTERM when this step's validation line is printed (worst case: evaluations still to run)
    resume_stop_at: int
    hellaswag_examples: int
    # largest |loss difference| accepted between resumed and uninterrupted runs
    resume_tolerance: float
    ddp_tolerance: float  # ... between the DDP run and the single process
    gpus: int
    timeout: float  # seconds for any one process
    # smoke only: a run with a larger B fails as out of memory, so the B search runs
    fake_oom_above: int = 0


def make_plan(smoke, gpus):
    if smoke:
        tiny = "--n-layer 2 --n-head 2 --n-embd 32".split()
        return Plan(
            smoke=True,
            device="cpu",
            model=tiny,
            ladder=[*tiny, *"-B 2 -T 32 --device cpu".split()],
            ladder_steps=3,
            ladder_warmup=1,
            ladder_text=50_000,  # tokenizing all 1.1 MB is a second of every rung's process
            # a process is ~5 CPU-seconds of imports: the first rung and the last
            ladder_rungs=(0, -1),
            T=32,
            total_batch=256,
            batches=(8, 4),
            final_steps=4,
            final_warmup=1,
            resume=[*tiny, *"-B 2 -T 32 --total-batch 128 --val-steps 2".split()],
            resume_steps=6,
            resume_stop_at=4,
            hellaswag_examples=4,
            resume_tolerance=0.0,  # on CPU a resumed run is bitwise the uninterrupted one
            ddp_tolerance=1e-5,  # another order of float sums (tests/test_train.py's two-rank test)
            gpus=2,  # gloo processes standing in for GPUs
            timeout=120,
            fake_oom_above=4,
        )
    return Plan(
        smoke=False,
        device="cuda",
        model=[],
        ladder="-B 16 -T 1024 --device cuda".split(),
        ladder_steps=12,
        ladder_warmup=3,
        ladder_text=0,
        ladder_rungs=(),
        T=1024,
        total_batch=FULL_RUN_BATCH,
        batches=(64, 32, 16, 8),
        final_steps=8,
        final_warmup=2,
        # a small model (16M) keeps three compilations and their checkpoints short; every GPU code
        # path still runs
        resume=(
            "--n-layer 4 --n-head 4 --n-embd 256 -B 16 -T 256 --total-batch 8192 --val-steps 4"
        ).split(),
        resume_steps=20,
        resume_stop_at=10,
        hellaswag_examples=16,
        # not bitwise on CUDA: the embedding's backward and flash attention's backward add with
        # atomics, in an order that changes from run to run, so two runs drift apart by rounding
        # from the first step on
        resume_tolerance=0.01,
        ddp_tolerance=0.01,
        gpus=gpus,
        timeout=600,
    )


# --------------------------------------------------------------------------------------------------
# ---- processes, their lines and when each arrived


@dataclass
class Run:
    argv: list
    rc: int
    lines: list  # (seconds since the start, stdout line)
    stderr: str
    wall: float
    timed_out: bool
    signalled_at: float | None = None

    def failure(self):
        """Why this run failed, in one line, or None."""
        if self.timed_out:
            return f"still running after {self.wall:.0f} s: stopped"
        if self.rc == 0:
            return None
        tail = [
            line
            for line in self.stderr.strip().splitlines()
            if line.strip() and not line.startswith(" ")
        ]
        return f"exit status {self.rc}: {tail[-1] if tail else 'no error output'}"

    def steps(self):
        """The step lines: {step: (time, loss, dt_ms or None)}."""
        found = {}
        for t, line in self.lines:
            if m := STEP_LINE.match(line):
                found[int(m[1])] = (t, float(m[2]), float(m[3]) if m[3] else None)
        return found

    def first(self, prefix):
        return next((t for t, line in self.lines if line.startswith(prefix)), None)

    def value(self, pattern):
        return next((m for _, line in self.lines if (m := re.search(pattern, line))), None)


STEP_LINE = re.compile(r"step\s+(\d+) \| loss ([-\d.naif]+)(?:.*?\| dt ([\d.]+)ms)?")


class Stopped(Exception):
    """The command is stopping (Ctrl-C, an error): no new process starts."""


LIVE, LIVE_LOCK, STOPPING = set(), threading.Lock(), threading.Event()


def stop_all():
    """End every process group this command started that is still running (they run in sessions of
    their own)."""
    with LIVE_LOCK:
        STOPPING.set()
        for proc in LIVE:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


def launch(argv, *, cwd, env, timeout, on_line=None):
    """Run argv, its stdout read line by line as it comes (on_line(proc, t, line) may signal it),
    stderr kept."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        with LIVE_LOCK:
            if STOPPING.is_set():
                raise Stopped()
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
            LIVE.add(proc)
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            # the process and any workers it started (its own session)
            os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        lines, signalled = [], {}
        try:
            for line in proc.stdout:
                t = time.monotonic() - start
                lines.append((t, line.rstrip("\n")))
                if on_line and on_line(proc, t, line):
                    signalled["at"] = t
            proc.wait()
        finally:
            timer.cancel()
            # interrupted ourselves (Ctrl-C): take the whole group down with us
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            with LIVE_LOCK:
                LIVE.discard(proc)
        err.seek(0)
        stderr = err.read()
    wall = time.monotonic() - start
    return Run(argv, proc.returncode, lines, stderr, wall, timed_out.is_set(), signalled.get("at"))


class Places:
    """The GPUs that processes take turns on (in smoke mode, as many CPU places): one process per
    GPU at a time, so each clock measures a GPU of its own; a DDP run waits until it has them all.
    --serial: one process at a time."""

    def __init__(self, plan, serial):
        self.plan, self.free = plan, queue.Queue()
        self.count = 1 if serial else plan.gpus
        for gpu in range(self.count):
            self.free.put(gpu)

    def environment(self, gpus):
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
        }
        if self.plan.smoke:
            env["OMP_NUM_THREADS"] = "1"  # small processes side by side on a few cores
        else:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
        return env

    @contextmanager
    def one(self):
        """The environment of a process that has one GPU to itself."""
        gpu = self.free.get()
        try:
            yield self.environment([gpu])
        finally:
            self.free.put(gpu)

    @contextmanager
    def all(self, nproc):
        """The environment of a process that runs on the first nproc GPUs, once nothing else
        runs."""
        taken = [self.free.get() for _ in range(self.count)]
        try:
            yield self.environment(range(nproc))
        finally:
            for gpu in taken:
                self.free.put(gpu)


def train_argv(*flags, fake_oom_above=0):
    """train_gpt2.py with flags, through this script's child mode, which prints the peak memory at
    the end."""
    extra = [f"--fake-oom-above={fake_oom_above}"] if fake_oom_above else []
    return [sys.executable, str(Path(__file__).resolve()), "train", *extra, *map(str, flags)]


def torchrun_argv(nproc, *flags):
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(ROOT / "train_gpt2.py"),
        *map(str, flags),
    ]


def child(argv):
    """`gpu_acceptance.py train [--fake-oom-above=N] FLAGS`: train_gpt2.py's main(FLAGS) in this
    process, then a line with the peak memory it took (CUDA's allocator, or the process's resident
    set on a CPU)."""
    if argv and argv[0].startswith("--fake-oom-above="):
        limit, argv = int(argv[0].split("=", 1)[1]), argv[1:]
        B = int(argv[argv.index("-B") + 1])
        # the smoke mode's stand-in for a GPU's out-of-memory error, so the search for B runs
        if B > limit:
            print(
                f"torch.OutOfMemoryError: CUDA out of memory (simulated: -B {B} > {limit})",
                file=sys.stderr,
            )
            return 1
    import torch

    import train_gpt2

    rc = train_gpt2.main(argv)
    if rc == 0:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            allocated, reserved = (
                torch.cuda.max_memory_allocated(),
                torch.cuda.max_memory_reserved(),
            )
            total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
            gib = [f"{n / 2**30:.2f}" for n in (allocated, reserved, total)]
            print(f"peak memory: {gib[0]} GiB allocated, {gib[1]} GiB reserved, of {gib[2]} GiB")
        else:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux
            print(f"peak memory: {rss / 2**30:.2f} GiB resident (cpu)")
    return rc


PEAK_LINE = (
    r"peak memory: ([\d.]+) GiB (allocated|resident)(?:, ([\d.]+) GiB reserved, of ([\d.]+) GiB)?"
)


def out_of_memory(run):
    return "OutOfMemoryError" in run.stderr or "out of memory" in run.stderr


# --------------------------------------------------------------------------------------------------
# ---- the report: rows, the table, the JSON


class Report:
    def __init__(self, path, plan, device):
        self.path, self.plan, self.device = Path(path), plan, device
        self.rows, self.phases, self.started = [], {}, time.time()
        self.measured = {}  # figures later phases use (the final run's tok/s, ...)
        self.lock = threading.Lock()  # phases run side by side

    def add(self, phase, check, measured, reference="", status="ok", **details):
        row = {
            "phase": phase,
            "check": check,
            "measured": measured,
            "reference": reference,
            "status": status,
        }
        with self.lock:
            self.rows.append(row | ({"details": details} if details else {}))
            # in the phases' order, each phase's rows in the order they came
            self.rows.sort(key=lambda row: ORDER.index(row["phase"]))
            print(f"  [{status}] {check}: {measured}", flush=True)
        return row

    def write(self, complete=False):
        with self.lock:
            self._write(complete)

    def _write(self, complete):
        data = {
            "device": self.device,
            "smoke": self.plan.smoke,
            "complete": complete,
            "wall_s": round(time.time() - self.started, 1),
            "phases_wall_s": self.phases,
            "rows": self.rows,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.path)

    def table(self):
        head = ("check", "measured", "reference", "status")
        cells = [head] + [
            tuple(str(row[k]) for k in ("check", "measured", "reference", "status"))
            for row in self.rows
        ]
        widths = [max(len(c[i]) for c in cells) for i in range(4)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(cell, widths)).rstrip() for cell in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)


def median_interval(run, warmup):
    """The median time between consecutive step lines, leaving out the first `warmup` intervals;
    None if too few."""
    times = [t for _, (t, _, _) in sorted(run.steps().items())]
    intervals = [b - a for a, b in zip(times, times[1:])][warmup:]
    return statistics.median(intervals) if intervals else None


def median_dt(run, warmup):
    """The median of the dt each step line reports (train_gpt2.py's own clock), after `warmup`
    steps."""
    dts = [dt for _, (_, _, dt) in sorted(run.steps().items()) if dt is not None][warmup:]
    return statistics.median(dts) / 1000 if dts else None


# the lines that end a stretch between two checks of the stop flag (and the step lines)
STOP_CHECKED = ("mfu:", "validation loss", "HellaSwag accuracy", "sample 0:")


def stop_check_gaps(run):
    """[(seconds, what)] between consecutive checks of the stop flag. train_gpt2.py checks it before
    each evaluation and each training step, so each stretch ends with the line its work printed
    ("mfu: ..." comes just before the handler is installed)."""
    marks = [
        (t, line) for t, line in run.lines if line.startswith(STOP_CHECKED) or STEP_LINE.match(line)
    ]
    return [
        (b - a, what.split(" |")[0].split(":")[0]) for (a, _), (b, what) in zip(marks, marks[1:])
    ]


def log_values(log_dir, kind):
    path = Path(log_dir) / "log.txt"
    if not path.exists():
        return {}
    values = {}
    for line in path.read_text().splitlines()[1:]:
        step, what, value = line.split()
        if what == kind:
            values[int(step)] = float(value)
    return values


def max_difference(a, b):
    common = sorted(a.keys() & b.keys())
    return max((abs(a[k] - b[k]) for k in common), default=math.nan), len(common)


# --------------------------------------------------------------------------------------------------
# ---- the phases


def phase_ladder(plan, places, report, work):
    """Each rung's step checked out of the step history and its train_gpt2.py run as the step wrote
    it."""
    from walkthrough.history import load_series
    from walkthrough.patches import HISTORY_RANGE, open_history

    history = report.measured.get("history")
    steps = load_series(Path(history), HISTORY_RANGE).steps if history else open_history(ROOT).steps
    by_slug = {step.slug: i for i, step in enumerate(steps) if step.slug}
    rungs = []
    for rung in LADDER:
        if rung.slug not in by_slug:
            raise UserError(
                f"history/ has no step with Step-Id {rung.slug!r}: "
                "the ladder finds its steps by Step-Id"
            )
        step = steps[by_slug[rung.slug] - rung.before]
        folder = work / "steps" / f"step-{step.number:02d}"
        if not folder.exists():
            checkout(history or ROOT / "history", step.rev, folder)
        rungs.append((rung, step, folder))

    data = []
    if plan.ladder_text:
        text = work / "ladder.txt"
        text.write_text(
            (ROOT / "input.txt").read_text(encoding="utf-8")[: plan.ladder_text], encoding="utf-8"
        )
        data = ["--data", str(text)]

    def measure(item):
        rung, step, folder = item
        argv = [
            sys.executable,
            "train_gpt2.py",
            *plan.model,
            *plan.ladder,
            *data,
            "--max-steps",
            str(plan.ladder_steps),
        ]
        with places.one() as env:
            return launch(argv, cwd=folder, env=env, timeout=plan.timeout)

    if plan.ladder_rungs:  # smoke mode: every rung checked out, a few of them run
        ran = [rungs[i] for i in plan.ladder_rungs]
        report.add(
            "ladder",
            "ladder: rungs run",
            f"{len(ran)} of {len(rungs)} "
            f"(steps {', '.join(str(step.number) for _, step, _ in ran)})",
            "all of them on a GPU",
            "info",
        )
        rungs = ran
    with ThreadPoolExecutor(max_workers=places.count) as pool:
        runs = list(pool.map(measure, rungs))
    B, T = (
        int(plan.ladder[plan.ladder.index("-B") + 1]),
        int(plan.ladder[plan.ladder.index("-T") + 1]),
    )
    for (rung, step, _), run in zip(rungs, runs):
        check = f"ladder: step {step.number} {step.slug} ({rung.adds})"
        lecture_tok_s = B * T / (rung.lecture_ms / 1000)
        reference = f"lecture (A100): {rung.lecture_ms:.0f} ms, {lecture_tok_s:,.0f} tok/s"
        seconds = median_interval(run, plan.ladder_warmup)
        if (why := run.failure()) or seconds is None:
            report.add(
                "ladder",
                check,
                why or "too few step lines to time",
                reference,
                "error",
                step=step.number,
            )
            continue
        own = median_dt(run, plan.ladder_warmup)
        report.add(
            "ladder",
            check,
            f"{1000 * seconds:.1f} ms/step, {B * T / seconds:,.0f} tok/s",
            reference,
            step=step.number,
            slug=step.slug,
            ms_per_step=round(1000 * seconds, 2),
            tok_per_s=round(B * T / seconds),
            # the step's printed dt, where it prints one
            own_dt_ms=None if own is None else round(1000 * own, 2),
            lecture_ms=rung.lecture_ms,
            wall_s=round(run.wall, 1),
        )


def checkout(history, rev, folder):
    """The files of one step of the history in folder (git archive, unpacked)."""
    tar = subprocess.run(
        ["git", "-C", str(history), "archive", rev], capture_output=True, check=True
    )
    folder.mkdir(parents=True)
    with tempfile.TemporaryFile() as f:
        f.write(tar.stdout)
        f.seek(0)
        with tarfile.open(fileobj=f) as archive:
            archive.extractall(folder, filter="data")


def make_data(plan, work):
    """Token shards of tiny shakespeare repeated (val: its last tenth), each large enough for every
    rank's batch."""
    import numpy as np
    import tiktoken

    tokens = np.array(
        tiktoken.get_encoding("gpt2").encode_ordinary(
            (ROOT / "input.txt").read_text(encoding="utf-8")
        ),
        dtype=np.uint16,
    )
    cut = int(0.9 * len(tokens))
    need = 2 * max(plan.batches) * plan.T * plan.gpus + 1
    folder = work / "shards"
    folder.mkdir(parents=True, exist_ok=True)
    for index, (split, part) in enumerate([("val", tokens[cut:]), ("train", tokens[:cut])]):
        np.save(
            folder / f"shakespeare_{split}_{index:06d}.npy", np.tile(part, -(-need // len(part)))
        )
    return folder


def final_flags(plan, data, B, steps, log_dir):
    return [
        *plan.model,
        *f"--data {data} -B {B} -T {plan.T}".split(),
        *f"--total-batch {plan.total_batch} --max-steps {steps}".split(),
        *"--val-every 0 --hellaswag-every 0 --sample-every 0 --checkpoint-every 0".split(),
        *["--device", plan.device, "--log-dir", str(log_dir)],
    ]


def phase_final(plan, places, report, work):
    data = report.measured["data"]
    fitted = None
    for B in plan.batches:
        if plan.total_batch % (B * plan.T):
            continue
        flags = final_flags(plan, data, B, plan.final_steps, work / f"final-B{B}")
        with places.one() as env:
            run = launch(
                train_argv(*flags, fake_oom_above=plan.fake_oom_above),
                cwd=ROOT,
                env=env,
                timeout=plan.timeout,
            )
        if out_of_memory(run):
            report.add(
                "final",
                f"final: B={B}",
                "out of memory",
                f"the real setting is B={plan.batches[0]}",
                "info",
            )
            continue
        if why := run.failure():
            report.add("final", f"final: B={B}", why, "", "error")
            return
        fitted = (B, run)
        break
    if fitted is None:
        report.add("final", "final: largest B that fits", f"none of {plan.batches}", "", "FAIL")
        return
    B, run = fitted
    report.measured.update(B=B, final_log=str(work / f"final-B{B}"))
    biggest = (
        "the real setting"
        if B == plan.batches[0]
        else f"{plan.batches[0]} does not fit: use -B {B}"
    )
    report.add(
        "final",
        "final: largest B that fits",
        f"B={B}",
        biggest,
        "ok" if B == plan.batches[0] else "info",
    )

    seconds = median_dt(run, plan.final_warmup)
    if seconds is None:
        report.add("final", "final: throughput", "too few step lines to time", "", "error")
        return
    tok_s = plan.total_batch / seconds
    report.measured["tok_s"] = tok_s
    report.add(
        "final",
        f"final: throughput (B={B}, T={plan.T}, {plan.total_batch:,} tokens/step)",
        f"{1000 * seconds:.0f} ms/step, {tok_s:,.0f} tok/s",
        f"lecture's last rung: {LECTURE_TOK_S:,.0f} tok/s on one A100 (B=16)",
        tok_per_s=round(tok_s),
        ms_per_step=round(1000 * seconds, 1),
    )
    mfu_row(plan, report, run, tok_s)
    if plan.device != "cuda":  # compile is off on a CPU: the run above was the eager one
        memory_row(report, run, f"final: peak memory, eager (B={B})")
        return
    memory_row(report, run, f"final: peak memory, compiled (B={B})")
    # eager (--no-compile): the model's activations without the compiler's fusions
    flags = final_flags(plan, data, B, 2, work / f"eager-B{B}") + ["--no-compile"]
    with places.one() as env:
        run = launch(train_argv(*flags), cwd=ROOT, env=env, timeout=plan.timeout)
    check = f"final: peak memory, eager --no-compile (B={B})"
    if out_of_memory(run):
        report.add(
            "final",
            check,
            "out of memory",
            "--no-compile needs a smaller -B here (issue 13, defect 6)",
            "info",
        )
    elif why := run.failure():
        report.add("final", check, why, "", "error")
    else:
        memory_row(report, run, check)


def mfu_row(plan, report, run, tok_s):
    import torch

    from longrun.meters import flops_per_token
    from train_gpt2 import GPT, GPTConfig

    sizes = dict(zip(plan.model[::2], plan.model[1::2]))
    config = GPTConfig(
        vocab_size=50304,
        n_layer=int(sizes.get("--n-layer", 12)),
        n_head=int(sizes.get("--n-head", 12)),
        n_embd=int(sizes.get("--n-embd", 768)),
    )
    with torch.device("meta"):  # shapes only: nothing allocated
        per_token = flops_per_token(GPT(config), plan.T)
    device = report.device
    basis = run.value(r"against \d+ x (\d+) TFLOPS")  # what train_gpt2.py's own MFU divides by
    theirs = (
        f"train_gpt2.py assumes {basis[1]} TFLOPS"
        if basis
        else "train_gpt2.py knows no peak for it"
    )
    if not device.get("peak_tflops"):
        report.add("final", "final: MFU", f"unknown: {device['peak_reason']}", theirs, "info")
        return
    mfu = tok_s * per_token / (device["peak_tflops"] * 1e12)
    agrees = basis and float(basis[1]) == device["peak_tflops"]
    report.add(
        "final",
        "final: MFU",
        f"{100 * mfu:.1f}% of {device['peak_tflops']:.0f} TFLOPS ({device['part']})",
        theirs + ("" if agrees else ": not the peak MFU.lookup gives this device"),
        "ok" if agrees else "FAIL",
        mfu=round(mfu, 4),
        flops_per_token=per_token,
    )


def memory_row(report, run, check):
    m = run.value(PEAK_LINE)
    if not m:
        report.add("final", check, "no peak memory line", "", "error")
        return
    if m[2] == "resident":
        report.add(
            "final", check, f"{m[1]} GiB resident (CPU process)", "", "info", gib=float(m[1])
        )
    else:
        report.add(
            "final",
            check,
            f"{m[1]} GiB allocated, {m[3]} GiB reserved",
            f"of {m[4]} GiB",
            gib=float(m[1]),
            reserved_gib=float(m[3]),
        )


def phase_resume(plan, places, report, work):
    from fixtures import synthetic_examples

    data = report.measured["data"]
    words = (ROOT / "input.txt").read_text(encoding="utf-8").split()
    hella = work / "hellaswag_standin.jsonl"
    examples = synthetic_examples(
        plan.hellaswag_examples, words=words, context=(10, 40), ending=(3, 12)
    )
    hella.write_text("".join(json.dumps(example) + "\n" for example in examples))
    every = plan.resume_stop_at // 2
    flags = [
        *plan.resume,
        *["--data", str(data), "--max-steps", str(plan.resume_steps), "--device", plan.device],
        *["--val-every", str(every), "--hellaswag-every", str(every), "--sample-every", str(every)],
        *["--checkpoint-every", str(plan.resume_stop_at), "--hellaswag-data", str(hella)],
        "--compile" if plan.device == "cuda" else "--no-compile",
    ]
    with places.one() as env:
        straight = launch(
            train_argv(*flags, "--log-dir", work / "straight"),
            cwd=ROOT,
            env=env,
            timeout=plan.timeout,
        )
    if why := straight.failure():
        report.add("resume", "resume: uninterrupted run", why, "", "error")
        return

    last = {"step": None}

    def stop_at_validation(proc, t, line):
        # SIGTERM at resume_stop_at's validation line: the flag is read again before its HellaSwag,
        # so the time to stop is one check, a checkpoint and the exit
        if m := STEP_LINE.match(line):
            last["step"] = int(m[1])
        elif line.startswith("validation loss") and last["step"] == plan.resume_stop_at - 1:
            proc.send_signal(signal.SIGTERM)
            last["step"] = None
            return True
        return False

    log_dir = work / "interrupted"
    with places.one() as env:
        stopped = launch(
            train_argv(*flags, "--log-dir", log_dir),
            cwd=ROOT,
            env=env,
            timeout=plan.timeout,
            on_line=stop_at_validation,
        )
    if why := stopped.failure():
        report.add("resume", "resume: SIGTERM", why, "exit status 0, a checkpoint", "FAIL")
        return
    at = stopped.value(r"stopped at step (\d+)")
    latency = stopped.wall - stopped.signalled_at if stopped.signalled_at is not None else math.nan
    report.add(
        "resume",
        "resume: SIGTERM during an evaluation step",
        f"stopped at step {at[1] if at else '?'} {latency:.1f} s after the signal, "
        f"exit status {stopped.rc}",
        f"under {TORCHRUN_GRACE} s (torchrun's grace)",
        "ok" if at and latency < TORCHRUN_GRACE else "FAIL",
        seconds=round(latency, 2),
    )
    with places.one() as env:
        resumed = launch(
            train_argv(*flags, "--log-dir", log_dir, "--resume"),
            cwd=ROOT,
            env=env,
            timeout=plan.timeout,
        )
    if why := resumed.failure():
        report.add("resume", "resume: --resume", why, "", "error")
        return
    train_diff, n = max_difference(
        log_values(work / "straight", "train"), log_values(log_dir, "train")
    )
    val_diff, n_val = max_difference(
        log_values(work / "straight", "val"), log_values(log_dir, "val")
    )
    complete = n == plan.resume_steps and n_val > 0
    worst = max(train_diff, val_diff)
    tolerance = (
        "bitwise (CPU)"
        if plan.resume_tolerance == 0
        else f"within {plan.resume_tolerance} (not bitwise on CUDA)"
    )
    report.add(
        "resume",
        "resume: losses against the uninterrupted run",
        f"max |difference| {worst:.2e} over {n} train and {n_val} val losses",
        tolerance,
        "ok" if complete and worst <= plan.resume_tolerance else "FAIL",
        max_train_difference=train_diff,
        max_val_difference=val_diff,
        tolerance=plan.resume_tolerance,
    )
    # a signal just after a check waits for the longest stretch without one, then stops as the one
    # above did
    longest, what = max(
        stop_check_gaps(straight) + stop_check_gaps(resumed), default=(math.nan, "?")
    )
    first_after_resume = (stop_check_gaps(resumed) or [(math.nan, "")])[0][0]
    worst = longest + latency
    report.add(
        "resume",
        "resume: worst case from SIGTERM to exit",
        f"{worst:.1f} s: the longest stretch without a stop check "
        f"({longest:.1f} s, ending in '{what}') + {latency:.1f} s to stop; "
        f"the first after --resume (compiled on a GPU) took {first_after_resume:.1f} s",
        f"under {TORCHRUN_GRACE} s, or torchrun kills the run before its checkpoint",
        "ok" if worst < TORCHRUN_GRACE else "FAIL",
        seconds=round(worst, 2),
        longest_stretch_s=round(longest, 2),
        longest_stretch_ends=what,
        first_after_resume_s=round(first_after_resume, 2),
    )


def phase_ddp(plan, places, report, work):
    if "tok_s" not in report.measured:
        report.add(
            "ddp",
            "ddp",
            "needs the final phase's run (its single-process losses and tok/s)",
            "",
            "error",
        )
        return
    B = report.measured["B"]
    nproc = ddp_processes(plan.total_batch, B, plan.T, plan.gpus)
    if nproc < plan.gpus:
        report.add(
            "ddp",
            "ddp: GPUs used",
            f"{nproc} of {plan.gpus}",
            f"{plan.total_batch:,} tokens is not a multiple of "
            f"B*T*{plan.gpus} = {B}*{plan.T}*{plan.gpus}",
            "info",
        )
    steps = plan.final_steps
    log_dir = work / "ddp"
    flags = final_flags(plan, report.measured["data"], B, steps + 2, log_dir)

    def stop_after_last_compared(proc, t, line):
        if (m := STEP_LINE.match(line)) and int(m[1]) == steps - 1:
            # to the workers, as the README says: torchrun's agent, signalled itself, ends in a
            # traceback and status 1
            subprocess.run(["pkill", "-TERM", "-P", str(proc.pid)])
            return True
        return False

    with places.all(nproc) as env:
        run = launch(
            torchrun_argv(nproc, *flags),
            cwd=ROOT,
            env=env,
            timeout=plan.timeout,
            on_line=stop_after_last_compared,
        )
    single = log_values(report.measured["final_log"], "train")
    ours = log_values(log_dir, "train")
    diff, n = max_difference(single, ours)
    if n < steps:
        report.add(
            "ddp",
            f"ddp: {nproc} processes",
            run.failure() or f"{n} of {steps} steps logged",
            "",
            "error",
        )
        return
    seconds = median_dt(run, plan.final_warmup)
    tok_s = plan.total_batch / seconds
    report.measured.update(ddp_tok_s=tok_s, ddp_nproc=nproc)
    drift = run.value(r"replicas differ by at most (\S+)")
    report.add(
        "ddp",
        f"ddp: {nproc} processes ({'NCCL' if plan.device == 'cuda' else 'gloo'}) against one",
        f"max |loss difference| {diff:.2e} over {n} steps; {tok_s:,.0f} tok/s; "
        f"replicas differ by {drift[1] if drift else '?'}",
        f"within {plan.ddp_tolerance}",
        "ok" if diff <= plan.ddp_tolerance else "FAIL",
        max_loss_difference=diff,
        tok_per_s=round(tok_s),
        scaling=round(tok_s / (nproc * report.measured["tok_s"]), 3),
    )
    checkpoint = sorted(log_dir.glob("model_*.pt"))
    latency = run.wall - run.signalled_at if run.signalled_at is not None else math.nan
    clean = run.rc == 0 and "Traceback" not in run.stderr
    report.add(
        "ddp",
        "ddp: SIGTERM to the workers (pkill -TERM -P <torchrun>)",
        f"exit status {run.rc}{'' if clean else ' with a traceback'}, "
        f"{'checkpoint ' + checkpoint[-1].name if checkpoint else 'no checkpoint'}, "
        f"{latency:.1f} s after the signal",
        "a clean stop: exit status 0 and a checkpoint",
        "ok" if clean and checkpoint else "FAIL",
        exit_status=run.rc,
        traceback="Traceback" in run.stderr,
        checkpoint=checkpoint[-1].name if checkpoint else None,
    )


def estimate(plan, report):
    single = report.measured.get("tok_s")
    if not single:
        return
    nproc, ddp = report.measured.get("ddp_nproc", 1), report.measured.get("ddp_tok_s")
    if ddp and nproc == 8:
        tok_s, how = ddp, "DDP over 8 GPUs as measured"
    elif ddp and nproc > 1:
        efficiency = ddp / (nproc * single)
        tok_s = 8 * single * efficiency
        how = f"8 x one GPU's tok/s x the DDP efficiency measured on {nproc} ({efficiency:.2f})"
    else:
        tok_s = 8 * single
        how = "8 x one GPU's tok/s, perfect scaling assumed (no DDP scaling measured)"
    hours = FULL_RUN_STEPS * FULL_RUN_BATCH / tok_s / 3600
    lecture_hours = FULL_RUN_STEPS * FULL_RUN_BATCH / (8 * LECTURE_TOK_S) / 3600
    device = report.device.get("part") or report.device["name"]
    report.add(
        "estimate",
        f"estimate: the {FULL_RUN_STEPS:,}-step run on 8 x {device}",
        f"{hours:.1f} h at {tok_s:,.0f} tok/s (an estimate)",
        f"8 x the lecture's last rung: {lecture_hours:.1f} h; "
        "evaluations and checkpoints not included",
        "info",
        hours=round(hours, 2),
        tok_per_s=round(tok_s),
        basis=how,
    )


# --------------------------------------------------------------------------------------------------
# ---- the command


def describe_device(plan):
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if plan.device == "cpu":
        return info | {
            "name": "cpu",
            "part": None,
            "peak_tflops": None,
            "peak_reason": "a CPU",
            "count": plan.gpus,
        }
    from longrun.meters import MFU

    props = torch.cuda.get_device_properties(0)
    # the part's dense bf16 peak, as the run's
    tflops, about = MFU.lookup(props.name, props.multi_processor_count)
    return info | {
        "name": props.name,
        "count": torch.cuda.device_count(),
        "sms": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "part": about if tflops else None,
        "peak_tflops": tflops,
        "peak_reason": None if tflops else about,
    }


def main(argv=None):
    p = ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument(
        "--smoke",
        action="store_true",
        help="CPU, a tiny model, gloo: every code path in about a minute",
    )
    p.add_argument("--skip", nargs="+", choices=PHASES, default=[], help="phases not to run")
    p.add_argument("--gpus", type=int, help="how many of the visible GPUs to use (default: all)")
    p.add_argument(
        "--serial", action="store_true", help="one process at a time, even with several GPUs"
    )
    p.add_argument(
        "--out", default="log/gpu_acceptance.json", help="the JSON written after every phase"
    )
    p.add_argument(
        "--history", help="a built step history (default: history/, built from steps/ when needed)"
    )
    p.add_argument(
        "--work", help="a folder for checkouts, data and runs (default: a temporary one, removed)"
    )
    args = p.parse_args(argv)
    try:
        return run_cli("gpu_acceptance.py", lambda: accept(args))
    except KeyboardInterrupt:
        print(
            "gpu_acceptance.py: interrupted: every process it started was stopped", file=sys.stderr
        )
        return 130


def accept(args):
    import torch

    if not args.smoke and not torch.cuda.is_available():
        raise UserError("no CUDA GPU here: `--smoke` runs the same checks on CPU with a tiny model")
    gpus = args.gpus or (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    if not args.smoke and not 1 <= gpus <= torch.cuda.device_count():
        raise UserError(f"--gpus {args.gpus}: this machine shows {torch.cuda.device_count()} GPUs")
    plan = make_plan(args.smoke, gpus)
    device = describe_device(plan)
    report = Report(args.out, plan, device)
    where = device["name"] + (f" x{device['count']}" if plan.device == "cuda" else " (smoke mode)")
    phases = ", ".join(name for name in PHASES if name not in args.skip)
    print(f"gpu_acceptance: {where}, torch {device['torch']}, phases: {phases}")
    report.add(
        "device",
        "device",
        f"{device['name']} x{device['count']}"
        + (f", {device['memory_gib']} GiB, {device['sms']} SMs" if plan.device == "cuda" else ""),
        f"dense bf16 peak {device['peak_tflops']:.0f} TFLOPS ({device['part']})"
        if device["peak_tflops"]
        else f"peak: unknown, {device['peak_reason']}",
        "info",
    )
    report.add(
        "device",
        "GPU counts that do not split 524,288 tokens into B=64, T=1024 micro-batches",
        ", ".join(map(str, gpu_counts_not_dividing())),
        "with those, pass --total-batch k*B*T*GPUs or a smaller -B",
        "info",
    )
    with tempfile.TemporaryDirectory(prefix="gpu_acceptance_") as scratch:
        work = Path(args.work).resolve() if args.work else Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        report.measured.update(data=str(make_data(plan, work)), history=args.history)
        places = Places(plan, args.serial)

        def run_phase(name):
            print(f"-- {name}", flush=True)
            start = time.monotonic()
            try:
                PHASE_FUNCTIONS[name](plan, places, report, work)
            except (UserError, Stopped):
                raise
            except Exception as e:  # a phase that cannot run is its row; the other phases still run
                report.add(
                    name,
                    name,
                    f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}",
                    "",
                    "error",
                )
            report.phases[name] = round(time.monotonic() - start, 1)
            report.write()

        # ladder, final and resume side by side (each process has a GPU to itself); then ddp, which
        # takes them all
        side_by_side = [name for name in ("ladder", "final", "resume") if name not in args.skip]
        with ThreadPoolExecutor(max_workers=max(1, len(side_by_side))) as pool:
            futures = [pool.submit(run_phase, name) for name in side_by_side]
            try:
                for future in futures:
                    future.result()
                if "ddp" not in args.skip:
                    run_phase("ddp")
            except BaseException:
                # Ctrl-C, a user's mistake: no phase starts another process, the running ones end
                stop_all()
                raise
        estimate(plan, report)
        report.write(complete=True)
    print()
    print(report.table())
    wall = time.time() - report.started
    print(f"\n{len(report.rows)} rows in {wall:.0f} s, written to {args.out}")
    return 0 if all(row["status"] in ("ok", "info") for row in report.rows) else 1


PHASE_FUNCTIONS = {
    "ladder": phase_ladder,
    "final": phase_final,
    "resume": phase_resume,
    "ddp": phase_ddp,
}

if __name__ == "__main__":
    if sys.argv[1:2] == ["train"]:
        sys.exit(child(sys.argv[2:]))
    sys.exit(main())
