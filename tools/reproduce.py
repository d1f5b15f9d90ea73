"""
The whole reproduction in one command, from a rented node to a report card: the data, its check, preflight, the run
under torchrun on every GPU, HellaSwag on the final checkpoint, samples, curves and the export.

    python -m tools.reproduce --price 2.50   # on an 8-GPU node: FineWeb-Edu, the 124M run; $2.50 a GPU-hour

Every flag that is not reproduce.py's own is train_gpt2.py's, passed to preflight and the run as it is. Rerun the same
command after any interruption. A stage is skipped only if its record in --log-dir/stages/ says it finished on what it
has now: its command, the file it made (the manifest, the final checkpoint, the curves, the export) and what the stage
before it finished on. So a stage that runs again runs every stage after it again, and the programs decide what still
holds: fineweb.py finds its shards complete, the run resumes or says it is done. The report card comes last.
"""

import codecs
import contextlib
import hashlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import train_gpt2
from longrun.common import (
    STOP_SIGNALS,
    ArgumentParser,
    UserError,
    count,
    lock_folder,
    positive_float,
    run_cli,
    write_atomically,
)
from longrun.run_folder import checkpoints
from tools import report_card
from tools.report_card import STAGES

ROOT = Path(__file__).resolve().parents[1]  # the project's root: train_gpt2.py, fineweb.py, tools/


class Reproduction:
    def __init__(self, ours, argv):
        self.ours, self.argv = ours, argv  # argv: train_gpt2.py's flags, as given
        self.args = train_gpt2.parse_args(argv)
        if self.args.resume:
            raise UserError("--resume: reproduce.py resumes by itself: rerun the same command without it")
        self.log_dir, self.data = Path(self.args.log_dir), Path(self.args.data)
        self.stages = self.log_dir / "stages"
        self.final = self.log_dir / f"model_{self.args.max_steps:05d}.pt"  # what a finished run leaves
        self.export = Path(ours.export or self.log_dir / "hf")
        self.stopped = self.child = None  # the signal that asked us to stop; the stage's process

    def command(self, stage):
        """The stage's command line as a person would type it (run by `executable`), or None: nothing to do."""
        if stage in ("data", "verify") and self.data.is_file():
            return None  # a text file is read as it is
        files = ["--files", *map(str, self.ours.files)] if self.ours.files else []
        size = ["--shard-size", str(self.ours.shard_size)] if self.ours.shard_size else []
        hella = ["--data", self.args.hellaswag_data] if self.args.hellaswag_data else []
        hella += ["--limit", str(self.ours.hellaswag_limit)] if self.ours.hellaswag_limit else []
        device, final = ["--device", self.args.device], str(self.final)
        return {
            "data": ["python", "fineweb.py", "--out", str(self.data), *files, *size],
            "verify": ["python", "fineweb.py", "--verify", "--out", str(self.data)],
            "preflight": ["python", "-m", "tools.preflight", "--world-size", str(self.ours.nproc), *self.argv],
            "train": ["torchrun", "--standalone", f"--nproc_per_node={self.ours.nproc}", "train_gpt2.py", *self.argv],
            "hellaswag": ["python", "hellaswag.py", "--checkpoint", final, *hella, *device],
            "samples": ["python", "-m", "tools.sample", final, *device],
            "curves": ["python", "-m", "tools.plot_log", str(self.log_dir)]
            + (["--fineweb"] if report_card.is_fineweb_edu(self.data) else []),
            # --force replaces an earlier export (one export_hf.py made, and only that) with this final checkpoint's
            "export": ["python", "-m", "tools.export_hf", "--force", final, str(self.export)],
        }[stage]

    def made(self, stage):
        """The identity of the file the stage makes, None while it is missing ("-": the stage makes none). What
        HellaSwag and the samples print, in stages/, is theirs: the report card reads it."""
        path = {"data": self.data if self.data.is_file() else self.data / "manifest.json", "train": self.final}
        path |= {"curves": self.log_dir / "curves.png", "export": self.export / ".export_hf"}
        path |= {stage: self.stages / f"{stage}.txt" for stage in ("hellaswag", "samples")}
        if stage not in path:
            return "-"
        return "{0.st_size} {0.st_mtime_ns}".format(path[stage].stat()) if path[stage].is_file() else None

    def inputs(self, number):
        """What stage `number` (from 1) works on: its command, and what the stage before it finished on."""
        before = self.record(STAGES[number - 2]).get("token") if number > 1 else None
        return json.dumps([self.command(STAGES[number - 1]), before])

    def record(self, stage):
        """stages/NAME.json: what the stage last finished on (inputs, made, token), its time and, for the run, the
        machine it ran on and the command that made its checkpoint."""
        return report_card.record(self.stages, stage)

    def save(self, name, record):
        write_atomically(str(self.stages / f"{name}.json"), lambda f: f.write(json.dumps(record, indent=1).encode()))

    def run(self):
        self.ask_before_downloading()
        self.stages.mkdir(parents=True, exist_ok=True)
        self._lock = lock_folder(self.stages)  # one reproduction at a time in a folder (the run holds log/ itself)
        command = {"argv": ["python", "-m", "tools.reproduce", *sys.argv[1:]], "train_gpt2.py": self.argv}
        command |= {"nproc": self.ours.nproc, "price": self.ours.price}
        self.save("command", command)
        for signum in STOP_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup's SIGHUP, a background job's Ctrl-C: ignored
                signal.signal(signum, self.stop)
        for number, stage in enumerate(STAGES, 1):
            if self.stopped:
                return self.interrupted(f"before stage {stage}")
            try:
                self.stage(number, stage, command)
            except OSError as error:  # a full disk: the stage named, not our temporary file
                raise UserError(f"stage {stage}: {error.filename or ''}: {error.strerror or error}") from None
            if self.stopped:
                return self.interrupted(f"in stage {stage}")
        report_card.write(self.log_dir)
        print(f"reproduce.py: done: {self.log_dir / 'report.md'}")
        return 0

    def ask_before_downloading(self):
        """A first day downloads FineWeb-Edu: say so, and ask on a terminal (--yes answers for a script)."""
        if self.ours.files or self.data.exists() or self.ours.yes:
            return  # a local corpus, or a download begun (and agreed to) before
        print(f"the data stage downloads FineWeb-Edu sample-10BT from the Hugging Face Hub into {self.data}: about")
        print("30 GB of parquet files and their Arrow copy in the Hugging Face cache (HF_HOME), then 20 GB of shards")
        if not sys.stdin.isatty():
            raise UserError("no terminal to ask whether to download it: pass --yes to go ahead")
        if input("go ahead? [y/N] ").strip().lower() not in ("y", "yes"):
            raise UserError("nothing downloaded: pass --files for a local corpus, or --yes")

    def stage(self, number, stage, command):
        record, inputs, argv = self.record(stage), self.inputs(number), self.command(stage)
        said = f"== {number}/{len(STAGES)} {stage}:"
        if record.get("done") and record.get("inputs") == inputs and record.get("made") == self.made(stage):
            return print(f"{said} done", flush=True)
        if argv is None:
            self.finish(stage, record | {"note": f"{self.data} is a text file"}, inputs, self.made(stage))
            return print(f"{said} nothing to do ({self.data} is a text file)", flush=True)
        begun = stage in ("preflight", "train") and (self.log_dir / "log.txt").exists()
        typed = [*argv, "--resume"] if begun else argv  # preflight checks, and the run continues, the run begun
        estimate = report_card.preflight_estimate(self.stages) if stage == "train" else None
        print(f"{said} {shlex.join(typed)}", flush=True)
        print(f"   preflight measured the whole run at about {estimate}" if estimate else "   started", flush=True)
        if stage == "train":
            record["environment"] = report_card.environment()  # the machine the run ran on, for the card
        started, code = time.time(), self.attempt(stage, executable(typed))
        record["seconds"] = record.get("seconds", 0) + time.time() - started
        made = self.made(stage)
        # a later checkpoint than the final one: the run went past --max-steps, its end is not this command's
        longer = stage == "train" and made and (last := checkpoints(self.log_dir)[-1]) != str(self.final)
        if code or made is None or longer:
            self.save(stage, record | {"done": False})
            if longer:
                raise UserError(f"stage train: {self.log_dir} holds a longer run ({last}): pass its --max-steps")
            if self.stopped:
                return
            raise UserError(
                f"stage {stage} did not finish (exit status {code}; its output: {self.stages / stage}.txt):"
                " put right what it says, then rerun the same command"
            )
        if stage == "train" and made != record.get("made"):
            record["made_by"] = command  # the command whose run wrote the final checkpoint, for the card
        self.finish(stage, record, inputs, made)
        print(f"{said} done in {report_card.duration(record['seconds'])}", flush=True)

    def finish(self, stage, record, inputs, made):
        """The stage's record as done: what it worked on, what it made, and the token the next stage works on: the
        file it made, or else what it worked on (a run given another flag that leaves its checkpoint as it was changes
        nothing after it)."""
        token = hashlib.sha256((inputs if made == "-" else made).encode()).hexdigest()
        self.save(stage, record | {"done": True, "inputs": inputs, "made": made, "token": token})

    def attempt(self, stage, argv):
        """Run argv once, its output to the terminal and to stages/NAME.txt; its exit status. The stage runs in a
        session of its own, so that a signal from the terminal reaches it through us only, once."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")  # its lines as they come, not when a buffer fills
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))  # for -m tools.X
        with open(self.stages / f"{stage}.txt", "a") as log:
            log.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(argv)}\n")
            log.flush()
            pipe = subprocess.PIPE
            self.child = subprocess.Popen(argv, stdout=pipe, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            self.child.stage = stage
            if self.stopped:  # it came as the stage started, before there was a process
                self.stop(self.stopped, None)
            failed = tee(self.child.stdout, log)
            code, self.child = self.child.wait(), None
        if failed:
            raise failed
        return code

    def stop(self, signum, frame):
        """Ctrl-C, SIGTERM or a hang-up: passed on to the processes doing the stage's work (torchrun's workers,
        which stop cleanly; torchrun itself ends in a traceback when signalled); no stage starts after it."""
        self.stopped = signum
        if self.child:
            for pid in (self.child.stage == "train" and workers(self.child.pid)) or [self.child.pid]:
                os.kill(pid, signum)

    def interrupted(self, where):
        with contextlib.suppress(OSError):  # a terminal that hung up fails every write
            name = signal.Signals(self.stopped).name
            print(f"reproduce.py: stopped {where} ({name}): rerun the same command to continue", file=sys.stderr)
        return 128 + self.stopped


def executable(argv):
    """The argument list for a command line: this interpreter, and our scripts by their full path."""
    if argv[0] == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *argv[1:3], str(ROOT / argv[3]), *argv[4:]]
    if argv[1] == "-m":  # a tool: found through PYTHONPATH (see attempt)
        return [sys.executable, *argv[1:]]
    return [sys.executable, str(ROOT / argv[1]), *argv[2:]]


def tee(pipe, log):
    """Copy a child's output to our stdout and to log as it comes, to its end: a terminal that hung up, or a log on a
    full disk, fails its writes, and the rest goes to the other one. The log's error, if any."""
    decode, echo, failed = codecs.getincrementaldecoder("utf-8")("replace").decode, True, None
    while chunk := os.read(pipe.fileno(), 1 << 16):
        if not failed:
            try:
                log.write(decode(chunk))
                log.flush()
            except OSError as error:
                failed = error
        if echo:
            try:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            except OSError:
                echo = False
    return failed


def workers(pid):
    """The child processes of pid (torchrun's workers), where Linux lists them; else []."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def parse_args(argv):
    p = ArgumentParser(
        prog="reproduce.py",
        description="The reproduction in one resumable command; every other flag is train_gpt2.py's.",
        allow_abbrev=False,  # a train_gpt2.py flag is never read as an abbreviation of one of ours
    )
    p.add_argument("--nproc", type=count, help="processes for torchrun (default: the GPUs torch sees, or 1)")
    p.add_argument("--files", nargs="+", type=Path, metavar="FILE", help="fineweb.py's --files: local text")
    p.add_argument("--shard-size", type=count, metavar="N", help="fineweb.py's --shard-size (default: its own, 1e8)")
    p.add_argument("--price", type=positive_float, metavar="USD", help="per GPU-hour: the report card adds the cost")
    p.add_argument("--export", metavar="DIR", help="export_hf.py's folder (default: --log-dir/hf)")
    p.add_argument("--yes", action="store_true", help="download FineWeb-Edu without asking (for scripts)")
    p.add_argument("--hellaswag-limit", type=count, metavar="N", help="score the first N examples (a rehearsal)")
    ours, rest = p.parse_known_args(argv)
    if ours.nproc is None:
        import torch

        ours.nproc = torch.cuda.device_count() or 1
    return ours, rest


def main(argv=None):
    ours, rest = parse_args(argv)
    return run_cli("reproduce.py", lambda: Reproduction(ours, rest).run())


if __name__ == "__main__":
    sys.exit(main())
