"""
A reproduction's report card: report.md and report.json in its run folder, every figure read from a file of the run
(log.txt, the stages' records and output in stages/, the shards' manifest.json) or of the machine the run ran on,
each target with its source.

    python -m tools.report_card log   # the folder reproduce.py ran in (it writes the card after each stage)
    python -m tools.report_card log --price 2.50   # with the cost at $2.50 per GPU-hour
"""

import json
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import train_gpt2
from longrun.common import ArgumentParser, UserError, positive_float, run_cli, sha256_file, write_atomically
from longrun.manifest import read_manifest
from longrun.meters import duration
from tools.plot_log import GPT2_124M_HELLASWAG, GPT2_124M_VAL_LOSS, GPT3_124M_HELLASWAG, read_series

# fineweb.py's default dataset, where GPT-2's validation loss was measured (not imported: importing fineweb.py loads the
# tokenizer, which a report does not need)
FINEWEB_EDU = "HuggingFaceFW/fineweb-edu"
TARGETS = {
    "val_loss": [(GPT2_124M_VAL_LOSS, "OpenAI's GPT-2 124M on FineWeb-Edu's val shard (the lecture's figure)")],
    "hellaswag": [
        (GPT2_124M_HELLASWAG, "OpenAI's GPT-2 124M, as longrun/hellaswag_scoring.py scores it (the lecture's figure)"),
        (GPT3_124M_HELLASWAG, "GPT-3 124M (the GPT-3 paper, Brown et al. 2020)"),
    ],
}
# reproduce.py's stages, in order
HELLASWAG_EXAMPLES = 10042  # the validation set's, which the targets score
STAGES = ["data", "verify", "preflight", "train", "hellaswag", "samples", "curves", "export"]


# ---- what each part of the card reads


def manifest_sha256(data):
    """The fingerprint of a shard folder: its manifest.json's sha256 (which holds each shard's), or None."""
    path = Path(data) / "manifest.json"
    return sha256_file(path) if path.is_file() else None


def is_fineweb_edu(data):
    manifest = read_manifest(Path(data)) if Path(data).is_dir() else None
    return bool(manifest) and manifest["settings"].get("dataset") == FINEWEB_EDU


def last_attempt(stages, stage):
    """What the stage printed in its last attempt (stages/NAME.txt holds every attempt, each after a == line)."""
    path = stages / f"{stage}.txt"
    return path.read_text(errors="replace").rsplit("\n== ", 1)[-1] if path.exists() else ""


def preflight_estimate(stages):
    """The run's time as preflight.py measured it ("about 58.2 min"), or None."""
    found = re.search(r"take about (.+?), evaluation", last_attempt(stages, "preflight"))
    return found[1] if found else None


def environment():
    import torch

    gpus = torch.cuda.device_count()
    commit, clean = source_tree()
    return {
        "gpus": f"{gpus} x {torch.cuda.get_device_name(0)}" if gpus else "none",
        "gpu_count": gpus,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "driver": nvidia_driver() if gpus else None,
        "python": platform.python_version(),
        "commit": commit,
        "clean": clean,
    }


def source_tree():
    """(this code's git commit, whether its tree is clean), or (None, None) outside a git checkout."""
    import git

    try:
        repo = git.Repo(Path(__file__).resolve().parents[1])
        return repo.head.commit.hexsha, not repo.is_dirty(untracked_files=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError):  # ValueError: no commit yet
        return None, None


def nvidia_driver():
    if not (smi := shutil.which("nvidia-smi")):
        return None
    found = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True)
    return found.stdout.split("\n")[0].strip() or None


def data_summary(data):
    if data.is_file():
        return {"file": str(data), "sha256": sha256_file(data)}
    if (manifest := read_manifest(data)) is None:
        return {"folder": str(data), "manifest": None}
    tokens = {"train": 0, "val": 0}
    for shard in manifest["shards"]:
        tokens[train_gpt2.SHARD.fullmatch(shard["file"])[1]] += shard["tokens"]  # the split, as the run reads it
    return {
        "folder": str(data),
        "complete": manifest["complete"],
        "shards": len(manifest["shards"]),
        "train_tokens": tokens["train"],
        "val_tokens": tokens["val"],
        "manifest_sha256": manifest_sha256(data),
        "source": {
            k: manifest["settings"].get(k) for k in ("dataset", "name", "split", "files") if k in manifest["settings"]
        },
    }


def stage_times(stages):
    """{stage: {"done": bool, "seconds": float, "note": why there was nothing to do, or None}} from stages/NAME.json."""
    times = {}
    for stage in STAGES:
        path = stages / f"{stage}.json"
        record = json.loads(path.read_text()) if path.exists() else {}
        times[stage] = {
            "done": bool(record.get("done")),
            "seconds": round(record.get("seconds", 0.0), 3),
            "note": record.get("nothing_to_do"),
        }
    return times


def run_summary(args, series, times, nproc, gpus, price):
    """The run's steps, tokens and speed, and its GPU time: the run's (its processes' GPUs while it trained) and the
    day's (the node's GPUs through every stage, what a rental charges for), with the day's cost at price."""
    steps = max((step for step, _ in series.get("train", [])), default=-1) + 1
    seconds, day = times["train"]["seconds"], sum(t["seconds"] for t in times.values())
    median = {k: statistics.median(v for _, v in series[k]) if series.get(k) else None for k in ("tok_s", "mfu")}
    day_gpu_hours = day * gpus / 3600 if gpus else None
    return {
        "steps": steps,
        "max_steps": args.max_steps,
        "tokens": steps * args.total_batch,
        "processes": nproc,
        "seconds": seconds,
        "tok_s": median["tok_s"],
        "mfu": median["mfu"],
        "gpu_hours": seconds * nproc / 3600 if gpus else None,
        "day_gpu_hours": day_gpu_hours,
        "price_per_gpu_hour": price,
        "cost": day_gpu_hours * price if day_gpu_hours is not None and price else None,
    }


def results(series, stages, fineweb, hellaswag_data):
    val = series.get("val", [])
    printed = last_attempt(stages, "hellaswag")
    acc = {k: float(m[1]) for k in ("acc", "acc_norm") if (m := re.search(rf"^{k} ([\d.]+)$", printed, re.M))}
    examples = re.search(r"^(\d+) examples", printed, re.M)
    return {
        "val_loss": {
            "value": val[-1][1] if val else None,
            "step": val[-1][0] if val else None,
            "comparable": fineweb,  # GPT-2's figure is FineWeb-Edu's val shard's
            "targets": TARGETS["val_loss"],
        },
        "hellaswag": {
            "acc_norm": acc.get("acc_norm"),
            "acc": acc.get("acc"),
            "examples": int(examples[1]) if examples else None,
            "comparable": bool(examples) and int(examples[1]) == HELLASWAG_EXAMPLES and not hellaswag_data,
            "targets": TARGETS["hellaswag"],
        },
    }


def samples(stages):
    return re.findall(r"^sample \d+: (.*)$", last_attempt(stages, "samples"), re.M)


def collect(log_dir, price=None):
    """The card's data. The environment is the run's, as stages/train.json saved it where the run started (this machine
    as it is now before that); the price is the command's --price unless one is given."""
    stages = log_dir / "stages"
    if not (stages / "command.json").is_file():
        raise UserError(f"{stages / 'command.json'}: not found: {log_dir} is not a folder reproduce.py ran in")
    command = json.loads((stages / "command.json").read_text())
    args = train_gpt2.parse_args(command["train_gpt2.py"])
    train = json.loads((stages / "train.json").read_text()) if (stages / "train.json").exists() else {}
    env, data = train.get("environment") or environment(), Path(args.data)
    series = read_series(log_dir / "log.txt") if (log_dir / "log.txt").exists() else {}
    times = stage_times(stages)
    gpus = env["gpu_count"] if args.device != "cpu" else 0
    return {
        "command": shlex.join(command["argv"]),
        "written": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "environment": env | {"of": "the run" if "environment" in train else "the machine that wrote this card"},
        "data": data_summary(data),
        "stages": times,
        "run": run_summary(args, series, times, command["nproc"], gpus, price or command.get("price")),
        "results": results(series, stages, is_fineweb_edu(data), args.hellaswag_data),
        "curves": "curves.png" if times["curves"]["done"] and (log_dir / "curves.png").exists() else None,
        "samples": samples(stages),
    }


# ---- the card


def markdown(card):
    run, res, env, data = card["run"], card["results"], card["environment"], card["data"]
    val, hella = res["val_loss"], res["hellaswag"]
    lines = [
        "# Report card: GPT-2 (124M) reproduction",
        "",
        f"`{card['command']}`, written {card['written']}",
        "",
        "## Results",
        "",
        "| | this run | target | the target's source | this run's figure from |",
        "|---|---|---|---|---|",
    ]
    if val["value"] is not None:
        lines += rows(f"validation loss, step {val['step']:,}", f"{val['value']:.4f}", val["targets"], "log.txt")
    if hella["acc_norm"] is not None:
        figure, source = f"{hella['acc_norm']:.4f}", "stages/hellaswag.txt"
        lines += rows(f"HellaSwag acc_norm, {hella['examples']:,} examples", figure, hella["targets"], source)
    if val["value"] is not None and not val["comparable"]:
        lines += [
            "",
            f"This run validated on {data.get('folder') or data.get('file')}, not FineWeb-Edu: its loss is "
            "not comparable with GPT-2's.",
        ]
    if hella["acc_norm"] is not None and not hella["comparable"]:
        lines += [
            "",
            f"HellaSwag scored {hella['examples']:,} examples, not the validation set's {HELLASWAG_EXAMPLES:,}: its "
            "accuracy is not comparable with the targets'.",
        ]
    lines += ["", "## Stages", "", "| stage | | wall time |", "|---|---|---|"]
    for stage, t in card["stages"].items():
        status = f"nothing to do: {t['note']}" if t["note"] else "done" if t["done"] else "not done"
        lines.append(f"| {stage} | {status} | {duration(t['seconds'])} |")
    lines.append(f"| all | | {duration(sum(t['seconds'] for t in card['stages'].values()))} |")
    lines += ["", "## Run", ""]
    lines.append(
        f"- {run['steps']:,} of {run['max_steps']:,} steps, {run['tokens']:,} tokens, {run['processes']} processes"
    )
    if run["tok_s"] is not None:
        mfu = f", MFU {run['mfu']:.1f}%" if run["mfu"] is not None else ", MFU not known for this device"
        lines.append(f"- {run['tok_s']:,.0f} tok/s (the median step in log.txt){mfu}")
    if run["gpu_hours"] is None:
        lines.append("- GPU-hours: none (the run used no GPU)")
    else:
        lines.append(
            f"- {run['gpu_hours']:.2f} GPU-hours of training; {run['day_gpu_hours']:.2f} for the whole day "
            "(every stage, every GPU of the node)"
        )
        price = run["price_per_gpu_hour"]
        lines.append(f"- cost: ${run['cost']:,.2f} at ${price}/GPU-hour" if price else "- cost: pass --price")
    lines += ["", f"## Environment (of {env['of']})", ""]
    tree = (
        "not a git checkout"
        if env["commit"] is None
        else f"{env['commit']} ({'clean' if env['clean'] else 'with changes'})"
    )
    lines += [
        f"- GPUs: {env['gpus']}" + (f", driver {env['driver']}" if env["driver"] else ""),
        f"- torch {env['torch']}, CUDA {env['cuda'] or 'none'}, Python {env['python']}",
        f"- code: {tree}",
        "",
        "## Data",
        "",
    ]
    if "file" in data:
        lines.append(f"- {data['file']}: a text file, sha256 {data['sha256']}")
    elif data.get("manifest", True) is None:
        lines.append(f"- {data['folder']}: no manifest.json")
    else:
        lines.append(
            f"- {data['folder']}: {data['shards']} shards, {data['train_tokens']:,} train tokens, "
            f"{data['val_tokens']:,} val tokens; manifest.json sha256 {data['manifest_sha256']}"
        )
        lines.append(f"- source: {json.dumps(data['source'])}")
    if card["curves"]:
        lines += ["", "## Curves", "", f"![loss and HellaSwag curves]({card['curves']})"]
    if card["samples"]:
        lines += ["", "## Samples (stages/samples.txt)", "", "```", *card["samples"], "```"]
    return "\n".join(lines) + "\n"


def rows(what, figure, targets, source):
    """A result's table rows: the first with the figure, one for each further target."""
    return [
        f"| {what} | {figure} | {value} | {target} | {source} |" if i == 0 else f"| | | {value} | {target} | |"
        for i, (value, target) in enumerate(targets)
    ]


def write(log_dir, price=None):
    card = collect(Path(log_dir), price)
    write_atomically(str(Path(log_dir) / "report.json"), lambda f: f.write(json.dumps(card, indent=1).encode()))
    write_atomically(str(Path(log_dir) / "report.md"), lambda f: f.write(markdown(card).encode()))
    return card


def main(argv=None):
    p = ArgumentParser(description="Write a reproduction's report card: report.md and report.json in its folder.")
    p.add_argument("log_dir", help="the run folder reproduce.py ran in (its --log-dir)")
    p.add_argument("--price", type=positive_float, metavar="USD", help="per GPU-hour: adds the cost")
    args = p.parse_args(argv)
    return run_cli("report_card.py", lambda: show(args.log_dir, args.price))


def show(log_dir, price):
    write(log_dir, price)
    print(Path(log_dir) / "report.md")


if __name__ == "__main__":
    sys.exit(main())
