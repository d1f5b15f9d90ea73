"""
The whole reproduction in one command, from a rented node to a report card: the data, its check, preflight, the run
under torchrun on every GPU, HellaSwag on the final checkpoint, samples, curves and the export.

    python -m tools.reproduce --price 2.50   # on an 8-GPU node: FineWeb-Edu, the 124M run; $2.50 a GPU-hour

Every flag that is not reproduce.py's own is train_gpt2.py's, passed to preflight.py and the run as it is. Rerun the
same command after any interruption: a stage whose result is on disk is skipped, the first one that is not continues
(fineweb.py and train_gpt2.py resume themselves), and no stage starts before the ones it reads from have finished.
Each stage's output is kept in --log-dir/stages/, and report.md and report.json (report_card.py) follow each stage.
"""

import codecs
import contextlib
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
    open_no_link,
    positive_float,
    run_cli,
    write_atomically,
)
from longrun.manifest import read_manifest
from longrun.meters import duration
from tools import report_card
from tools.report_card import STAGES

ROOT = Path(__file__).resolve().parents[1]  # the project's root: train_gpt2.py, fineweb.py, tools/


class Reproduction:
    """The stages of one reproduction, each a command and a way to tell that its result is on disk."""

    def __init__(self, ours, argv):
        self.ours, self.argv = ours, argv  # argv: train_gpt2.py's flags, as given
        self.args = train_gpt2.parse_args(argv)
        if self.args.resume:
            raise UserError("--resume: reproduce.py resumes by itself: rerun the same command without it")
        self.log_dir = Path(self.args.log_dir)
        self.stages_dir = self.log_dir / "stages"
        self.data = Path(self.args.data)
        self.final = self.log_dir / f"model_{self.args.max_steps:05d}.pt"  # what a finished run leaves
        self.export = Path(ours.export or self.log_dir / "hf")
        self.stopped = None  # the signal that asked us to stop
        self.stage = self.child = None  # the stage running, and its process
        self.passed_on = 0  # the signals passed on to it

    # ---- each stage: its command (None: nothing to do), and whether its result is on disk

    def command(self, stage):
        """The stage's command line as a person would type it (run by `executable`), or None: nothing to do."""
        device = ["--device", self.args.device]
        if stage in ("data", "verify") and self.data.is_file():
            return None  # a text file is read as it is
        if stage == "data":
            files = ["--files", *map(str, self.ours.files)] if self.ours.files else []
            size = ["--shard-size", str(self.ours.shard_size)] if self.ours.shard_size else []
            return ["python", "fineweb.py", "--out", str(self.data), *files, *size]
        if stage == "verify":
            return ["python", "fineweb.py", "--verify", "--out", str(self.data)]
        if stage == "preflight":
            return ["python", "-m", "tools.preflight", "--world-size", str(self.ours.nproc), *self.argv]
        if stage == "train":
            return ["torchrun", "--standalone", f"--nproc_per_node={self.ours.nproc}", "train_gpt2.py", *self.argv]
        if stage == "hellaswag":
            data = ["--data", self.args.hellaswag_data] if self.args.hellaswag_data else []
            limit = ["--limit", str(self.ours.hellaswag_limit)] if self.ours.hellaswag_limit else []
            return ["python", "hellaswag.py", "--checkpoint", str(self.final), *data, *limit, *device]
        if stage == "samples":
            return ["python", "-m", "tools.sample", str(self.final), *device]
        if stage == "curves":
            fineweb = ["--fineweb"] if report_card.is_fineweb_edu(self.data) else []
            return [
                "python",
                "-m",
                "tools.plot_log",
                str(self.log_dir),
                "--out",
                str(self.log_dir / "curves.png"),
                *fineweb,
            ]
        return ["python", "-m", "tools.export_hf", str(self.final), str(self.export)]

    def finished(self, stage):
        """Whether the stage's result is on disk: its own files, or the record of a command that ended well, this same
        command (other flags: it runs again, and the program it runs decides whether its earlier result still holds)."""
        record, argv = self.record(stage), self.command(stage)
        if record.get("argv", argv) != argv:
            return False
        if stage == "data":  # whoever made it: fineweb.py by hand too
            return (manifest := read_manifest(self.data)) is not None and manifest["complete"]
        if stage == "verify":  # the shards as they are now: a manifest written since was not verified
            return (verified := report_card.manifest_sha256(self.data)) is not None and record.get("done") == verified
        if stage == "train":
            return self.final.exists()
        if stage == "export":
            return (self.export / ".export_hf").exists()  # export_hf.py renames the folder into place whole
        return bool(record.get("done"))

    # ---- the records in --log-dir/stages: NAME.json (time spent, done) and NAME.txt (everything it printed)

    def record(self, stage):
        path = self.stages_dir / f"{stage}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def save_record(self, stage, record):
        data = json.dumps(record, indent=1).encode()
        write_atomically(str(self.stages_dir / f"{stage}.json"), lambda f: f.write(data))

    def save_command(self):
        """stages/command.json: this command, what report_card.py reads (the latest, where a rerun changed flags)."""
        ours = vars(self.ours) | {"files": list(map(str, self.ours.files or [])), "export": str(self.export)}
        command = {"argv": ["python", "-m", "tools.reproduce", *sys.argv[1:]], "train_gpt2.py": self.argv} | ours
        data = json.dumps(command, indent=1).encode()
        write_atomically(str(self.stages_dir / "command.json"), lambda f: f.write(data))

    # ---- running

    def run(self):
        self.stages_dir.mkdir(parents=True, exist_ok=True)
        self._lock = lock_folder(self.stages_dir)  # one reproduction at a time in a folder (train_gpt2.py's is its own)
        self.save_command()
        for signum in STOP_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup's SIGHUP, a background job's Ctrl-C: ignored
                signal.signal(signum, self.stop)
        try:
            for number, stage in enumerate(STAGES, 1):
                if self.stopped:
                    return self.interrupted(f"before stage {stage}")
                if (argv := self.command(stage)) is None:
                    self.save_record(stage, {"done": True, "nothing_to_do": f"{self.data} is a text file"})
                    print(f"== {number}/{len(STAGES)} {stage}: nothing to do ({self.data} is a text file)", flush=True)
                    continue
                if self.finished(stage):
                    if not self.record(stage).get("done"):  # finished before reproduce.py ran it (fineweb.py by hand)
                        self.save_record(stage, self.record(stage) | {"done": self.result_of(stage), "argv": argv})
                    print(f"== {number}/{len(STAGES)} {stage}: done", flush=True)
                    continue
                self.announce(number, stage, argv)
                code = self.attempt(stage, argv)
                if self.finished(stage) or (code == 0 and stage not in ("data", "train", "export")):
                    self.save_record(stage, self.record(stage) | {"done": self.result_of(stage)})
                    print(
                        f"== {number}/{len(STAGES)} {stage}: done in {duration(self.record(stage)['seconds'])}",
                        flush=True,
                    )
                elif self.stopped:
                    return self.interrupted(f"in stage {stage}")
                else:
                    raise UserError(
                        f"stage {stage} did not finish (exit status {code}; its output: {self.stages_dir / stage}.txt):"
                        " put right what it says, then rerun the same command"
                    )
                report_card.write(self.log_dir)
        finally:
            report_card.write(self.log_dir)
        print(f"reproduce.py: done: {self.log_dir / 'report.md'}")
        return 0

    def result_of(self, stage):
        return report_card.manifest_sha256(self.data) if stage == "verify" else True

    def announce(self, number, stage, argv):
        left = STAGES[number:]
        after = f"; after it: {', '.join(left)}" if left else ""
        estimate = report_card.preflight_estimate(self.stages_dir) if stage == "train" else None
        print(f"== {number}/{len(STAGES)} {stage}: {shlex.join(self.typed(stage, argv))}", flush=True)
        eta = f"preflight measured the whole run at about {estimate}, evaluation not counted" if estimate else "started"
        print(f"   {eta}{after}", flush=True)

    def attempt(self, stage, argv):
        """Run the stage's command once, its output to the terminal and to NAME.txt; its exit status. The time is
        counted as it goes: a killed attempt's lasted until NAME.txt last grew. The run's record keeps the machine it
        ran on, what the report card's GPU-hours count."""
        record, output = self.record(stage) | {"argv": argv}, self.stages_dir / f"{stage}.txt"
        record.pop("done", None)  # an earlier attempt's, perhaps of other flags: done again only if this one ends well
        if started := record.pop("started", None):  # an attempt that was killed
            record["seconds"] = record.get("seconds", 0) + max(0.0, output.stat().st_mtime - started)
        if stage == "train":
            record["environment"] = report_card.environment()
        self.save_record(stage, record | {"started": time.time()})
        started, argv = time.time(), executable(self.typed(stage, argv))
        with open_no_link(output, "a") as log:
            log.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(argv)}\n")
            log.flush()
            env = dict(os.environ, PYTHONUNBUFFERED="1")  # its lines as they come, not when a buffer fills
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))  # for -m tools.X
            self.stage, self.child = (
                stage,
                subprocess.Popen(
                    argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
                ),
            )
            if self.stopped and not self.passed_on:  # it came as the stage started, before there was a process
                self.stop(self.stopped, None)
            tee(self.child.stdout, log)
            code = self.child.wait()
            self.child = None
        record["seconds"] = record.get("seconds", 0) + time.time() - started
        self.save_record(stage, record)
        return code

    def typed(self, stage, argv):
        """The stage's command line as it runs now: preflight and the run get --resume once the run has begun (its
        log.txt is there), so that they check, and continue, the run in the folder."""
        begun = stage in ("preflight", "train") and (self.log_dir / "log.txt").exists()
        return [*argv, "--resume"] if begun else argv

    def stop(self, signum, frame):
        """Ctrl-C, SIGTERM or a hang-up: passed on to the processes doing the stage's work (torchrun's workers, which
        stop cleanly; torchrun itself ends in a traceback when signalled), and no stage starts after it. The stage runs
        in a session of its own, so that what the terminal sends reaches it through us only, once."""
        self.stopped = signum
        if self.child:
            for pid in (self.stage == "train" and workers(self.child.pid)) or [self.child.pid]:
                os.kill(pid, signum)
            self.passed_on += 1

    def interrupted(self, where):
        name = signal.Signals(self.stopped).name
        with contextlib.suppress(OSError):  # a terminal that hung up fails every write
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
    """Copy a child's output to our stdout and to log as it comes. A terminal that hung up fails every write: the
    rest goes to the log only."""
    decode, echo = codecs.getincrementaldecoder("utf-8")("replace").decode, True
    while chunk := os.read(pipe.fileno(), 1 << 16):
        log.write(decode(chunk))
        log.flush()
        if echo:
            try:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            except OSError:
                echo = False


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
    p.add_argument(
        "--files", nargs="+", type=Path, metavar="FILE", help="fineweb.py's --files: local text, not FineWeb"
    )
    p.add_argument("--shard-size", type=count, metavar="N", help="fineweb.py's --shard-size (default: its own, 1e8)")
    p.add_argument("--price", type=positive_float, metavar="USD", help="per GPU-hour: the report card adds the cost")
    p.add_argument("--export", metavar="DIR", help="export_hf.py's folder (default: --log-dir/hf)")
    p.add_argument(
        "--hellaswag-limit", type=count, metavar="N", help="score the first N examples only (a rehearsal; default: all)"
    )
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
