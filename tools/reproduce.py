"""
The whole reproduction in one command, from a rented node to a report card: the data, its check,
preflight, the run under torchrun on every GPU, HellaSwag on the final checkpoint, samples, curves
and the export.

    python -m tools.reproduce --price 2.50   # on an 8-GPU node, at $2.50 a GPU-hour

Other flags are train_gpt2.py's. Rerun the same command after any interruption: a stage whose record
in stages/ says it finished on what it has now (its command, its file, the stage before) is skipped;
any other runs, and all after it.
"""

import contextlib
import hashlib
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

import train_gpt2
from longrun import common, flags
from longrun.common import UserError
from longrun.meters import duration
from longrun.run_folder import checkpoints
from tools import report_card
from tools.report_card import STAGES

ROOT = Path(__file__).resolve().parents[1]  # the project's root: train_gpt2.py, fineweb.py, tools/


class Reproduction:
    def __init__(self, ours, argv):
        # argv: train_gpt2.py's flags
        self.ours, self.argv, self.args = ours, argv, train_gpt2.parse_args(argv)
        if self.args.resume:
            raise UserError(
                "--resume: reproduce.py resumes by itself: rerun the same command without it"
            )
        if Path(self.args.data).is_file():
            raise UserError(
                f"--data {self.args.data}: a file: reproduce.py makes shards, pass its text with "
                "--files"
            )
        self.log_dir, self.data = Path(self.args.log_dir), Path(self.args.data)
        self.stages, self.export = self.log_dir / "stages", Path(ours.export or self.log_dir / "hf")
        # what a finished run leaves
        self.final = self.log_dir / f"model_{self.args.max_steps:05d}.pt"
        self.stopped = self.child = None  # the signal that asked us to stop; the stage's process

    def command(self, stage):
        """The stage's command line as a person would type it at the project's root."""
        ours, final, device = self.ours, str(self.final), ["--device", self.args.device]
        files = ["--files", *map(str, ours.files)] if ours.files else []
        size = ["--shard-size", str(ours.shard_size)] if ours.shard_size else []
        hella = ["--data", self.args.hellaswag_data] if self.args.hellaswag_data else []
        hella += ["--limit", str(ours.hellaswag_limit)] if ours.hellaswag_limit else []
        return {
            "data": ["python", "-m", "fineweb", "--out", str(self.data), *files, *size],
            "verify": ["python", "-m", "fineweb", "--verify", "--out", str(self.data)],
            "preflight": [
                "python",
                "-m",
                "tools.preflight",
                "--world-size",
                str(ours.nproc),
                *self.argv,
            ],
            "train": [
                "torchrun",
                "--standalone",
                f"--nproc_per_node={ours.nproc}",
                "-m",
                "train_gpt2",
                *self.argv,
            ],
            "hellaswag": ["python", "-m", "hellaswag", "--checkpoint", final, *hella, *device],
            "samples": ["python", "-m", "tools.sample", final, *device],
            "curves": ["python", "-m", "tools.plot_log", str(self.log_dir)]
            + (["--fineweb"] if report_card.is_fineweb_edu(self.data) else []),
            # --force replaces an earlier export (one export_hf.py made, and only that) with this
            # final checkpoint's
            "export": ["python", "-m", "tools.export_hf", "--force", final, str(self.export)],
        }[stage]

    def made(self, stage):
        """The file the stage makes, by size and time; None while it is missing, "-" for a stage
        that makes none."""
        path = {
            "data": self.data / "manifest.json",
            "train": self.final,
            "curves": self.log_dir / "curves.png",
        }
        path |= {"export": self.export / ".export_hf"} | {
            s: self.stages / f"{s}.txt" for s in ("hellaswag", "samples")
        }
        if stage not in path:
            return "-"
        return (
            "{0.st_size} {0.st_mtime_ns}".format(path[stage].stat())
            if path[stage].is_file()
            else None
        )

    def save(self, name, record):
        common.write_atomically(
            str(self.stages / f"{name}.json"), lambda f: f.write(json.dumps(record).encode())
        )

    def run(self):
        self.ask_before_downloading()
        self.stages.mkdir(parents=True, exist_ok=True)
        # one reproduction at a time (the run holds log/ itself)
        self._lock = common.lock_folder(self.stages)
        command = {
            "argv": ["python", "-m", "tools.reproduce", *sys.argv[1:]],
            "train_gpt2.py": self.argv,
        }
        command["nproc"] = self.ours.nproc
        for signum in common.STOP_SIGNALS:
            # nohup's SIGHUP, a background job's Ctrl-C: ignored
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, self.stop)
        for number, stage in enumerate(STAGES, 1):
            try:
                self.stopped or self.stage(number, stage, command)
            except OSError as error:  # a full disk: the stage named, not our temporary file
                raise UserError(
                    f"stage {stage}: {error.filename or ''}: {error.strerror or error}"
                ) from None
            if self.stopped:
                with contextlib.suppress(OSError):  # a terminal that hung up fails every write
                    why = f"stopped at stage {stage} ({signal.Signals(self.stopped).name})"
                    print(
                        f"reproduce.py: {why}: rerun the same command to continue", file=sys.stderr
                    )
                return 128 + self.stopped
        report_card.write(self.log_dir, self.ours.price)
        print(f"reproduce.py: done: {self.log_dir / 'report.md'}")
        return 0

    def ask_before_downloading(self):
        """A first day downloads FineWeb-Edu: say so, and ask on a terminal (--yes answers for a
        script)."""
        if self.ours.files or self.data.exists() or self.ours.yes:
            return  # a local corpus, or a download begun (and agreed to) before
        print(
            f"the data stage downloads FineWeb-Edu sample-10BT into {self.data}: about 30 GB of "
            "parquet files and"
        )
        print("their Arrow copy in the Hugging Face cache (HF_HOME), then 20 GB of shards")
        if not sys.stdin.isatty():
            raise UserError("no terminal to ask whether to download it: pass --yes to go ahead")
        if input("go ahead? [y/N] ").strip().lower() not in ("y", "yes"):
            raise UserError("nothing downloaded: pass --files for a local corpus, or --yes")

    def stage(self, number, stage, command):
        record, argv = report_card.record(self.stages, stage), self.command(stage)
        # what the stage works on: its command, and the token of what the stage before it finished
        # on
        before = (
            report_card.record(self.stages, STAGES[number - 2]).get("token") if number > 1 else None
        )
        inputs, said = json.dumps([argv, before]), f"== {number}/{len(STAGES)} {stage}:"
        if (
            record.get("done")
            and record.get("inputs") == inputs
            and record.get("made") == self.made(stage)
        ):
            return print(f"{said} done", flush=True)
        begun = stage in ("preflight", "train") and (self.log_dir / "log.txt").exists()
        # preflight checks, and the run continues, the run begun
        typed = [*argv, "--resume"] if begun else argv
        print(f"{said} {shlex.join(typed)}", flush=True)
        # the run's machine, for the card
        record |= {"environment": environment()} if stage == "train" else {}
        started, code = time.time(), self.attempt(stage, typed)
        record["seconds"] = record.get("seconds", 0) + time.time() - started
        made = self.made(stage)
        # a later checkpoint than the final one: the run went past --max-steps, its end is not this
        # command's
        longer = (
            stage == "train" and made and (last := checkpoints(self.log_dir)[-1]) != str(self.final)
        )
        if code or made is None or longer:
            self.save(stage, record | {"done": False})
            if self.stopped and not longer:
                return
            if longer:
                why = f"{self.log_dir} holds a longer run ({last}): pass its --max-steps"
            else:
                output = self.stages / f"{stage}.txt"
                why = f"did not finish (exit status {code}; its output: {output})"
                why += ": put right what it says"
            raise UserError(f"stage {stage}: {why}, then run the command again")
        if stage == "train" and made != record.get("made"):
            # the command whose run wrote the final checkpoint, for the card
            record["made_by"] = command
        # the next stage works on the file this one made, else on its inputs: a flag that leaves the
        # run's checkpoint as it was changes nothing after it
        token = hashlib.sha256((inputs if made == "-" else made).encode()).hexdigest()
        self.save(stage, record | {"done": True, "inputs": inputs, "made": made, "token": token})
        print(f"{said} done in {duration(record['seconds'])}", flush=True)

    def attempt(self, stage, argv):
        """Run argv with this Python, its output to the terminal and to stages/NAME.txt: its exit
        status."""
        # its lines as they come, not when a buffer fills
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # for -m NAME
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        argv = [
            sys.executable,
            *(["-m", "torch.distributed.run"] if argv[0] == "torchrun" else []),
            *argv[1:],
        ]
        # bytes: what the stage printed, as it printed it
        with open(self.stages / f"{stage}.txt", "ab") as log:
            log.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(argv)}\n".encode())
            # in a session of its own, a signal from the terminal reaches it through us only, once
            out = subprocess.PIPE
            self.child = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            self.child.stage = stage
            if self.stopped:  # it came as the stage started, before there was a process
                self.stop(self.stopped, None)
            failed = tee(self.child.stdout, log)
            code, self.child = self.child.wait(), None
        if failed:
            raise failed
        return code

    def stop(self, signum, frame):
        """Ctrl-C, SIGTERM or a hang-up: passed on to the stage (torchrun's workers, which stop
        cleanly: torchrun itself ends in a traceback); no stage starts after it."""
        self.stopped = signum
        if self.child:
            for pid in (self.child.stage == "train" and workers(self.child.pid)) or [
                self.child.pid
            ]:
                os.kill(pid, signum)


def environment():
    """The machine and the code the run ran on."""
    import git

    try:  # the commit, and -dirty if the code was changed
        code = git.Repo(ROOT).git.describe("--always", "--dirty")
    except (git.InvalidGitRepositoryError, git.GitCommandError):
        code = "not a git checkout"
    gpus = torch.cuda.device_count()
    return dict(
        gpus=f"{gpus} x {torch.cuda.get_device_name(0)}" if gpus else "none", gpu_count=gpus
    ) | dict(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        python=platform.python_version(),
        code=code,
    )


def tee(pipe, log):
    """Copy a child's output to our stdout and to log; when one fails, the rest goes to the other.
    The log's error."""
    failed = None
    while chunk := os.read(pipe.fileno(), 1 << 16):
        try:
            if not failed:
                log.write(chunk)
                log.flush()
        except OSError as error:
            failed = error
        with contextlib.suppress(OSError):
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
    return failed


def workers(pid):
    """The child processes of pid (torchrun's workers), where Linux lists them; else []."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def parse_args(argv):
    # allow_abbrev=False: a train_gpt2.py flag is never read as an abbreviation of one of ours
    p = common.ArgumentParser(
        prog="reproduce.py", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    p.add_argument(
        "--nproc",
        type=common.count,
        help="processes for torchrun (default: the GPUs torch sees, or 1)",
    )
    p.add_argument(
        "--files", nargs="+", type=Path, metavar="FILE", help="fineweb.py's --files: local text"
    )
    p.add_argument(
        "--shard-size",
        type=common.count,
        metavar="N",
        help="fineweb.py's --shard-size (default: 1e8)",
    )
    p.add_argument(
        "--price",
        type=flags.positive_float,
        metavar="USD",
        help="per GPU-hour: the card adds the cost",
    )
    p.add_argument("--export", metavar="DIR", help="export_hf.py's folder (default: --log-dir/hf)")
    p.add_argument(
        "--yes", action="store_true", help="download FineWeb-Edu without asking (for scripts)"
    )
    p.add_argument(
        "--hellaswag-limit",
        type=common.count,
        metavar="N",
        help="score the first N examples (a rehearsal)",
    )
    ours, rest = p.parse_known_args(argv)
    ours.nproc = ours.nproc or torch.cuda.device_count() or 1
    return ours, rest


def main(argv=None):
    return common.run_cli("reproduce.py", lambda: Reproduction(*parse_args(argv)).run())


if __name__ == "__main__":
    sys.exit(main())
