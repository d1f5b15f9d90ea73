"""
What one run writes into its folder (--log-dir) and reads back: checkpoints, log.txt, console.txt,
and the rules that keep a run's record whole (one writer at a time, --resume continues only its own
run). A module of its own: train_gpt2.py trains, this keeps the record.
"""

import errno
import hashlib
import os
import re
import signal
import sys
import time
import uuid
import warnings
from dataclasses import asdict

import torch
import torch.distributed as dist

from longrun.common import (
    UserError,
    lock_folder,
    open_no_link,
    remove_stale_temporaries,
    write_atomically,
)

# what a resumed run must share with the run it continues: the model's sizes, the optimisation and
# the data order (--max-lr may change, with a word: a lower one is how a run goes on after a loss
# spike)
RUN_SETTINGS = "n_layer n_head n_embd vocab_size data seq_len total_batch seed shuffle".split()
RUN_SETTINGS += "min_lr_ratio warmup_steps weight_decay".split()


# what a checkpoint needs besides its weights and config to be resumed, and of which type
RESUME_ENTRIES = {
    "optimizer": dict,
    "step": int,
    "loader": dict,
    "args": dict,
    "run_id": str,
    "shards": list,
}


def shard_list(loader):
    """The shards a loader reads, as a checkpoint records them: each one's file name (none for a
    text file's tokens) and length. The loader's position means something in these shards only."""
    return [
        [os.path.basename(getattr(shard, "filename", None) or ""), len(shard)]
        for shard in loader.shards
    ]


class RunFolder:
    """The folder one run writes (--log-dir): log.txt (the metrics), console.txt (everything the run
    printed, with the time) and checkpoints model_NNNNN.pt, held by one process at a time.

    Each run has an id, at the top of its log and in each checkpoint, so --resume never continues a
    checkpoint or a log of another run. A run stopped before its first checkpoint resumes from step
    0.
    """

    def __init__(self, args, master_process, device):
        self.args, self.dir, self.master = args, args.log_dir, master_process
        self.log_file = os.path.join(self.dir, "log.txt")
        # appended to: a resumed run's output follows on
        self.console_file = os.path.join(self.dir, "console.txt")
        if os.path.exists(self.dir) and not os.path.isdir(self.dir):
            raise UserError(f"--log-dir {self.dir} is a file, not a folder")
        # every rank checks the same files, at once, so a mistake stops them all together, each with
        # the same line
        if dist.is_initialized():
            self._check_shared(device)
        paths, has_log = checkpoints(self.dir), os.path.exists(self.log_file)
        # read once: restore() keeps the lines before its step
        log_id, self.log_lines = read_log(self.log_file)
        if not args.resume and (has_log or paths):
            raise UserError(
                f"{self.dir} already holds a run: continue it with --resume, or choose another "
                "--log-dir"
            )
        if args.resume == "latest" and not (has_log or paths):
            raise UserError(
                f"--resume: {self.dir} holds no run to continue (no log.txt, no model_*.pt)"
            )
        self.checkpoint = None
        if args.resume not in (None, "latest"):
            self.checkpoint = read_checkpoint(args.resume)
        elif args.resume and paths:
            self.checkpoint = read_checkpoint(paths[-1])
        if self.checkpoint:
            self._check_same_run(log_id)
        self.run_id = (
            self.checkpoint["run_id"] if self.checkpoint else log_id or uuid.uuid4().hex[:12]
        )
        if dist.is_initialized():
            dist.barrier()  # all ranks have looked before the master writes anything
        # checked, so now the folder is ours: a second writer is refused until we exit
        if master_process:
            os.makedirs(self.dir, exist_ok=True)
            self.lock = lock_folder(self.dir)
            # a killed run's half-written checkpoints (model_NNNNN.pt.PID.tmp)
            remove_stale_temporaries(self.dir)
            # from here on, what the run prints is also in console.txt
            Console.start(self.console_file)
            if args.resume and not self.checkpoint:
                print(
                    f"{self.dir} holds no checkpoint yet: the run starts again from step 0",
                    file=sys.stderr,
                )

    def _check_shared(self, device):
        """Every rank must see the folder that rank 0 writes: on several machines, a filesystem they
        all share. Otherwise each machine's ranks would find a run of their own (and resume from
        another checkpoint, or none). Rank 0 leaves a fresh mark in the folder, every rank looks for
        it, and one all-reduce counts who missed it."""
        token = [uuid.uuid4().hex if self.master else None]
        if self.master:
            os.makedirs(self.dir, exist_ok=True)
            write_atomically(os.path.join(self.dir, f".shared-{token[0]}"), lambda f: None)
        dist.broadcast_object_list(token, src=0)  # rank 0's, to every rank, once it is written
        mark = os.path.join(self.dir, f".shared-{token[0]}")
        missed = torch.tensor(float(not os.path.exists(mark)), device=device)
        dist.all_reduce(missed)  # a sum: how many ranks do not see it
        missed = int(missed.item())
        if self.master:
            os.remove(mark)
        if missed:
            raise UserError(
                f"{missed} of {dist.get_world_size()} processes do not see the --log-dir "
                f"{self.dir} that rank 0 writes: on several machines, --log-dir must be on a "
                "filesystem they all share"
            )

    def _check_same_run(self, log_id):
        where = self.checkpoint["path"]
        if wrong := [
            k for k, kind in RESUME_ENTRIES.items() if not isinstance(self.checkpoint.get(k), kind)
        ]:
            raise UserError(
                f"{where} cannot be resumed: {', '.join(wrong)} missing or of the wrong type"
            )
        saved, run_id = self.checkpoint["args"], self.checkpoint["run_id"]
        if log_id and log_id != run_id:
            raise UserError(
                f"{where} is from run {run_id}, but {self.log_file} is the log of run {log_id}: "
                "resume into the checkpoint's own --log-dir"
            )
        differ = [
            f"--{k.replace('_', '-')} {saved.get(k)} (this run: {getattr(self.args, k)})"
            for k in RUN_SETTINGS
            if saved.get(k) != getattr(self.args, k)
        ]
        if differ:
            raise UserError(
                f"{where} was trained with {', '.join(differ)}: pass its settings to --resume it"
            )
        if saved.get("max_lr") != self.args.max_lr and self.master:
            print(
                f"{where} was trained with --max-lr {saved.get('max_lr')}: from step "
                f"{self.checkpoint['step']} on, "
                f"this run changes it to {self.args.max_lr}",
                file=sys.stderr,
            )

    def finished(self):
        """Why --resume has nothing to do (the checkpoint it continues is at --max-steps, or past
        it), or None."""
        if self.checkpoint and self.checkpoint["step"] >= self.args.max_steps:
            step = self.checkpoint["step"]
            return f"{self.checkpoint['path']} is step {step}, --max-steps is {self.args.max_steps}"
        return None

    def check_config(self, config):
        """Refuse to resume a checkpoint of another model's shape than the flags' (config)."""
        saved, ours = self.checkpoint["config"], asdict(config)
        if differ := [
            f"{k} {saved.get(k)} (this run: {v})" for k, v in ours.items() if saved.get(k) != v
        ]:
            raise UserError(
                f"{self.checkpoint['path']} is a model with {', '.join(differ)}: pass its sizes"
            )

    def restore(self, model, optimizer, loader):
        """The step to start from: 0 for a fresh run, or the checkpoint's step with its whole state
        put back."""
        step = self.checkpoint["step"] if self.checkpoint else 0
        if self.checkpoint:
            self.check_config(model.config)
            load_weights(model, self.checkpoint["model"], self.checkpoint["path"])
            optimizer.load_state_dict(self.checkpoint["optimizer"])
            # not the same data
            if (then := self.checkpoint.get("shards")) != (now := shard_list(loader)):
                raise UserError(
                    f"{self.checkpoint['path']} was trained on {len(then or [])} shards of "
                    f"{self.args.data}, which now "
                    f"holds {len(now)} other ones: resume it on the data it was trained on"
                )
            loader.load_state_dict(self.checkpoint["loader"])
        # the log continues from the checkpoint: what the interrupted run logged after it goes
        if self.master:
            kept = [line for line in self.log_lines if int(line.split()[0]) < step]
            lines = [f"# run {self.run_id}\n", *kept]
            write_atomically(self.log_file, lambda f: f.write("".join(lines).encode()))
        return step

    def set_aside(self, step):
        """Rename the checkpoint of `step` to diverged_NNNNN.pt, out of --resume's way; say so, or
        ''."""
        path = os.path.join(self.dir, f"model_{step:05d}.pt")
        if not (self.master and os.path.exists(path)):
            return ""
        aside = os.path.join(self.dir, f"diverged_{step:05d}.pt")
        os.replace(path, aside)
        return f" ({path}, the weights that gave it, is now {aside})"

    def log(self, step, **values):
        """A line `step kind value` for each of `values`, all of them in one write."""
        with open_no_link(self.log_file, "a") as f:
            f.write("".join(f"{step} {kind} {value}\n" for kind, value in values.items()))

    def log_step(self, step, loss, lr, norm, tokens_per_sec, mfu):
        """A training step's loss and its health (lr, gradient norm, tok/s, MFU where the GPU's peak
        is known), in one write."""
        health = {"lr": f"{lr:.4e}", "norm": f"{norm:.4f}", "tok_s": f"{tokens_per_sec:.0f}"}
        if mfu.tflops:
            health["mfu"] = f"{mfu.percent(tokens_per_sec):.1f}"
        self.log(step, train=f"{loss:.6f}", **health)

    def save_checkpoint(self, step, model, optimizer, loader):
        state = {
            "model": model.state_dict(),
            # AdamW's two moments per parameter: what continuing a run needs
            "optimizer": optimizer.state_dict(),
            "step": step,
            "config": asdict(model.config),
            "loader": loader.state_dict(),
            "shards": shard_list(loader),  # what the position is a position in
            "args": vars(self.args),
            "run_id": self.run_id,
        }
        # checked when it is read
        state["sha256"] = tensor_digest(state["model"], state["optimizer"])
        write_atomically(
            os.path.join(self.dir, f"model_{step:05d}.pt"), lambda f: torch.save(state, f)
        )


class Console:
    """What the run prints, on stdout and stderr, also goes to console.txt, each line after the time
    it was printed: the output outlives the terminal (a hang-up sends it to /dev/null) and tmux's
    scrollback, errors included."""

    # sys.stdout and sys.stderr as they were, and console.txt, while copied
    streams, path, file = None, None, None

    def __init__(self, stream):
        self.stream, self.line = stream, ""

    @classmethod
    def start(cls, path):
        # appended to: a resumed run's output follows on
        cls.path, cls.file = path, open_no_link(path, "a")
        cls.streams = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = cls(sys.stdout), cls(sys.stderr)

    @classmethod
    def stop(cls):
        if cls.streams:
            sys.stdout, sys.stderr = cls.streams
            if cls.file:
                cls.file.close()
            cls.streams, cls.file = None, None

    @classmethod
    def copy(cls, text):
        """Whole lines into console.txt, or none: a write the disk cuts short is taken back and the
        copy ends, with a word on the terminal, which goes on showing everything."""
        fd, data = cls.file.fileno(), text.encode()
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            written, reason = os.write(fd, data), os.strerror(errno.ENOSPC)
        except OSError as e:
            written, reason = 0, e.strerror
        if written < len(data):
            os.ftruncate(fd, end)
            cls.file.close()
            cls.file = None
            print(
                f"warning: {cls.path}: {reason}; the copy of the output stops here",
                file=cls.streams[1],
            )

    def write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except OSError as e:
            if e.errno != errno.EIO:
                raise
            # the terminal hung up before its SIGHUP reached us (torchrun forwards it a moment
            # later): take it now
            signal.raise_signal(signal.SIGHUP)
        *lines, self.line = (self.line + text).split("\n")
        if lines and Console.file:
            Console.copy(
                "".join(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n" for line in lines)
            )
        return len(text)

    def flush(self):
        self.stream.flush()

    def __getattr__(self, name):  # isatty, fileno, encoding...: the terminal's
        return getattr(self.stream, name)


CKPT = re.compile(r"model_(\d+)\.pt")  # what save_checkpoint names a checkpoint


def checkpoints(log_dir):
    """The checkpoints in log_dir, oldest first, by step number (as text, model_100000.pt would sort
    first)."""
    # listed, not globbed: run[1] is a name
    names = os.listdir(log_dir) if os.path.isdir(log_dir) else []
    found = {
        int(m[1]): os.path.join(log_dir, name) for name in names if (m := CKPT.fullmatch(name))
    }
    return [found[step] for step in sorted(found)]


def tensor_digest(*trees):
    """The sha256 of every tensor in these nested dicts and lists, in their order (which torch.save
    keeps): the checksum a checkpoint carries for its weights and optimizer state."""
    digest = hashlib.sha256()

    def add(x):
        if isinstance(x, torch.Tensor):
            digest.update(f"{x.dtype} {tuple(x.shape)}".encode())
            digest.update(x.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
        elif isinstance(x, dict):
            for value in x.values():
                add(value)
        elif isinstance(x, (list, tuple)):
            for value in x:
                add(value)

    for tree in trees:
        add(tree)
    return digest.hexdigest()


def read_checkpoint(path):
    """The dict save_checkpoint wrote ("model", "config", "step", ...), plus "path"."""
    if not os.path.isfile(path):
        raise UserError(f"no checkpoint at {path}")
    try:
        # torch warns about pickle protocols before it refuses a file anyway
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # loading never runs code
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        # torch.load fails in many ways (pickle, zip, EOF) on a file that isn't a checkpoint
        reason = (str(e).splitlines() or [type(e).__name__])[0]
        # and torch's advice to unpickle it anyway is not ours
        if reason.startswith("Weights only load failed"):
            reason = (
                "it holds Python objects, not only tensors and plain data; we never unpickle those"
            )
        raise UserError(f"{path} is not a readable checkpoint: {reason}") from None
    if not (
        isinstance(checkpoint, dict)
        and all(isinstance(checkpoint.get(k), dict) for k in ("model", "config"))
    ):
        raise UserError(
            f"{path} is not a train_gpt2.py checkpoint (no 'model' and 'config' entries)"
        )
    sizes = checkpoint["config"]  # GPTConfig's fields, which GPT.from_checkpoint checks by name
    positive = all(type(v) is int and v > 0 for v in sizes.values())
    if not positive or sizes.get("n_embd", 1) % sizes.get("n_head", 1):
        raise UserError(f"{path}: its config is not a model's shape ({sizes})")
    if checkpoint.get("sha256") != tensor_digest(checkpoint["model"], checkpoint.get("optimizer")):
        raise UserError(f"{path} is damaged: its tensors do not match the checksum saved with them")
    return checkpoint | {"path": path}


def load_weights(model, state, path):
    """model.load_state_dict(state), with a mismatch named in one line instead of torch's page of
    keys."""
    expected = model.state_dict()
    problems = [f"missing {k}" for k in expected.keys() - state.keys()]
    problems += [f"unexpected {k}" for k in state.keys() - expected.keys()]
    problems += [
        f"{k} is {tuple(getattr(state[k], 'shape', ()))}, the model wants {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and getattr(state[k], "shape", None) != v.shape
    ]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise UserError(
            f"{path} does not match the model of its config: "
            f"{'; '.join(sorted(problems)[:3])}{more}"
        )
    model.load_state_dict(state)


def read_log(path):
    """(run id, the step lines) of a log.txt. A half-written last line (a kill mid-write) is dropped
    with a warning; any other line that is not `{step} {kind} {value}` is an error naming it."""
    if not os.path.exists(path):
        return None, []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    run_id, kept = None, []
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if number == 1 and line.startswith("# run ") and len(fields) == 3:
            run_id = fields[2]
        elif (
            len(fields) == 3
            and fields[0].isascii()
            and fields[0].isdigit()
            and is_number(fields[2])
            and line.endswith("\n")
        ):
            kept.append(line)
        elif number == len(lines) and not line.endswith("\n"):
            print(
                f"warning: {path}:{number}: dropped a half-written line {line.strip()!r}",
                file=sys.stderr,
            )
        else:
            raise UserError(
                f"{path}:{number}: expected '<step> <kind> <value>', got {line.strip()!r}"
            )
    return run_id, kept


def is_number(text):
    """A value as the run writes one: any float, nan and inf included (a diverged run logs its nan
    validation loss)."""
    try:
        float(text)
    except ValueError:
        return False
    return True
