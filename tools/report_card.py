"""
A reproduction's report card: report.md and report.json in its run folder, every figure read from a file of the run
(log.txt, the stages' records and output in stages/, the shards' manifest.json), each target with its source.

    python -m tools.report_card log                # the folder reproduce.py ran in (it writes the card at the end)
    python -m tools.report_card log --price 2.50   # with the cost at $2.50 per GPU-hour
"""

import json
import platform
import re
import shlex
import statistics
import sys
import time
from pathlib import Path

import train_gpt2
from longrun.common import ArgumentParser, UserError, positive_float, run_cli, sha256_file, write_atomically
from longrun.manifest import read_manifest
from longrun.meters import duration
from tools.plot_log import GPT2_124M_HELLASWAG, GPT2_124M_VAL_LOSS, GPT3_124M_HELLASWAG, read_series

STAGES = ["data", "verify", "preflight", "train", "hellaswag", "samples", "curves", "export"]  # reproduce.py's
FINEWEB_EDU = "HuggingFaceFW/fineweb-edu"  # fineweb.py's dataset, where GPT-2's validation loss was measured
HELLASWAG_EXAMPLES = 10042  # the validation set's, which the targets score
TARGETS = {
    "val_loss": [(GPT2_124M_VAL_LOSS, "OpenAI's GPT-2 124M on FineWeb-Edu's val shard (the lecture's figure)")],
    "hellaswag": [
        (GPT2_124M_HELLASWAG, "OpenAI's GPT-2 124M, as our scorer rates it (the lecture's figure)"),
        (GPT3_124M_HELLASWAG, "GPT-3 124M (the GPT-3 paper, Brown et al. 2020)"),
    ],
}


def record(stages, stage):
    """What reproduce.py keeps of a stage in stages/NAME.json ({} before it first ran); a damaged one is one line."""
    path = stages / f"{stage}.json"
    try:
        found = json.loads(path.read_text()) if path.exists() else {}
        if isinstance(found, dict) and isinstance(found.get("seconds", 0), (int, float)):
            return found
    except (ValueError, UnicodeDecodeError):
        pass
    raise UserError(f"stage {stage}: {path} is damaged: delete it, and the stage runs again")


def is_fineweb_edu(data):
    manifest = read_manifest(Path(data)) if Path(data).is_dir() else None
    return bool(manifest) and manifest["settings"].get("dataset") == FINEWEB_EDU


def last_attempt(stages, stage):
    """What the stage printed in its last attempt (stages/NAME.txt holds every attempt, each after a == line)."""
    path = stages / f"{stage}.txt"
    return path.read_text(errors="replace").rsplit("\n== ", 1)[-1] if path.exists() else ""


def preflight_estimate(stages):
    """The run's time as preflight.py measured it ("58.2 min"), or None."""
    found = re.search(r"take about (.+?), evaluation", last_attempt(stages, "preflight"))
    return found[1] if found else None


def environment():
    """The machine and the code: what reproduce.py saves as the run starts."""
    import git
    import torch

    try:
        repo = git.Repo(Path(__file__).resolve().parents[1])
        commit, clean = repo.head.commit.hexsha, not repo.is_dirty(untracked_files=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError):  # ValueError: no commit yet
        commit = clean = None
    gpus = torch.cuda.device_count()
    name = f"{gpus} x {torch.cuda.get_device_name(0)}" if gpus else "none"
    return {"gpus": name, "gpu_count": gpus, "torch": torch.__version__, "cuda": torch.version.cuda} | {
        "python": platform.python_version(),
        "commit": commit,
        "clean": clean,
    }


def data_summary(data):
    if data.is_file():
        return {"file": str(data), "sha256": sha256_file(data)}
    if (manifest := read_manifest(data)) is None:
        return {"folder": str(data), "manifest": None}
    tokens = {"train": 0, "val": 0}
    for shard in manifest["shards"]:
        tokens[train_gpt2.SHARD.fullmatch(shard["file"])[1]] += shard["tokens"]  # the split, as the run reads it
    source = {k: v for k, v in manifest["settings"].items() if k in ("dataset", "name", "split", "files")}
    sha256 = sha256_file(data / "manifest.json")
    return {"folder": str(data), "shards": len(manifest["shards"]), "train_tokens": tokens["train"]} | {
        "val_tokens": tokens["val"],
        "manifest_sha256": sha256,
        "source": source,
    }


def collect(log_dir, price=None):
    """The card's data: the command whose run made the final checkpoint (else the latest), and what it made."""
    stages = log_dir / "stages"
    if not (stages / "command.json").is_file():
        raise UserError(f"{stages / 'command.json'}: not found: {log_dir} is not a folder reproduce.py ran in")
    records = {s: record(stages, s) for s in STAGES}
    train = records.get("train", {})
    command = train.get("made_by") or json.loads((stages / "command.json").read_text())
    args = train_gpt2.parse_args(command["train_gpt2.py"])
    data = Path(args.data)
    series = read_series(log_dir / "log.txt") if (log_dir / "log.txt").exists() else {}
    env = train.get("environment") or environment()
    seconds = {s: round(records.get(s, {}).get("seconds", 0.0), 3) for s in STAGES}
    gpus = env["gpu_count"] if args.device != "cpu" else 0
    day_gpu_hours = sum(seconds.values()) * gpus / 3600 if gpus else None
    price = price or command.get("price")
    steps = max((step for step, _ in series.get("train", [])), default=-1) + 1
    val, hellaswag = series.get("val", []), last_attempt(stages, "hellaswag")
    acc = {k: float(m[1]) for k in ("acc", "acc_norm") if (m := re.search(rf"^{k} ([\d.]+)$", hellaswag, re.M))}
    examples = int(m[1]) if (m := re.search(r"^(\d+) examples", hellaswag, re.M)) else None
    return {
        "command": shlex.join(command["argv"]),
        "written": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "environment": env,
        "data": data_summary(data),
        "stages": {s: {"done": bool(records.get(s, {}).get("done")), "seconds": seconds[s]} for s in STAGES},
        "run": {"steps": steps, "max_steps": args.max_steps, "tokens": steps * args.total_batch}
        | {k: statistics.median(v for _, v in series[k]) if series.get(k) else None for k in ("tok_s", "mfu")}
        | {"processes": command["nproc"], "seconds": seconds["train"], "day_gpu_hours": day_gpu_hours}
        | {"price_per_gpu_hour": price, "cost": day_gpu_hours * price if day_gpu_hours and price else None},
        "val_loss": {"value": val[-1][1] if val else None, "step": val[-1][0] if val else None}
        | {"comparable": is_fineweb_edu(data)},  # GPT-2's figure is FineWeb-Edu's val shard's
        "hellaswag": acc
        | {"examples": examples}
        | {"comparable": examples == HELLASWAG_EXAMPLES and not args.hellaswag_data},
        "curves": "curves.png" if (log_dir / "curves.png").exists() else None,
        "samples": re.findall(r"^sample \d+: (.*)$", last_attempt(stages, "samples"), re.M),
    }


def markdown(card):
    run, env, data, val, hella = card["run"], card["environment"], card["data"], card["val_loss"], card["hellaswag"]
    lines = ["# Report card: GPT-2 (124M) reproduction", "", f"`{card['command']}`, written {card['written']}", ""]
    lines += ["## Results", "", "| | this run | target | the target's source |", "|---|---|---|---|"]
    for what, figure, targets in [
        (f"validation loss, step {val['step']}", val["value"], TARGETS["val_loss"]),
        (f"HellaSwag acc_norm, {hella['examples']} examples", hella.get("acc_norm"), TARGETS["hellaswag"]),
    ]:
        for i, (value, source) in enumerate(targets if figure is not None else []):
            lines.append(f"| {what} | {figure:.4f} | {value} | {source} |" if i == 0 else f"| | | {value} | {source} |")
    if val["value"] is not None and not val["comparable"]:
        lines += ["", "This run did not validate on FineWeb-Edu: its loss is not comparable with GPT-2's."]
    if hella.get("acc_norm") is not None and not hella["comparable"]:
        lines += ["", f"HellaSwag scored {hella['examples']} examples, not the validation set's "]
        lines[-1] += f"{HELLASWAG_EXAMPLES:,}: its accuracy is not comparable with the targets'."
    lines += ["", "## Stages", "", "| stage | | wall time, all attempts |", "|---|---|---|"]
    lines += [
        f"| {s} | {'done' if t['done'] else 'not done'} | {duration(t['seconds'])} |" for s, t in card["stages"].items()
    ]
    lines += ["", "## Run", "", f"- {run['steps']:,} of {run['max_steps']:,} steps, {run['tokens']:,} tokens"]
    if run["tok_s"] is not None:
        mfu = f", MFU {run['mfu']:.1f}%" if run["mfu"] is not None else ", MFU not known for this device"
        lines.append(f"- {run['tok_s']:,.0f} tok/s (the median step in log.txt){mfu}; processes: {run['processes']}")
    if run["day_gpu_hours"] is not None:
        cost = f": ${run['cost']:,.2f} at ${run['price_per_gpu_hour']}/GPU-hour" if run["cost"] else ""
        lines.append(f"- {run['day_gpu_hours']:.2f} GPU-hours for the whole day, every GPU of the node{cost}")
    tree = f"{env['commit']} ({'clean' if env['clean'] else 'with changes'})" if env["commit"] else "not a git checkout"
    lines += ["", "## Environment", "", f"- GPUs: {env['gpus']}; torch {env['torch']}, CUDA {env['cuda'] or 'none'}"]
    lines += [f"- Python {env['python']}; code: {tree}", "", "## Data", ""]
    if "shards" in data:
        lines.append(f"- {data['folder']}: {data['shards']} shards, {data['train_tokens']:,} train tokens, ")
        lines[-1] += f"{data['val_tokens']:,} val tokens; manifest.json sha256 {data['manifest_sha256']}"
        lines.append(f"- source: {json.dumps(data['source'])}")
    else:
        lines.append(f"- {json.dumps(data)}")
    if card["curves"]:
        lines += ["", "## Curves", "", f"![loss and HellaSwag curves]({card['curves']})"]
    if card["samples"]:
        lines += ["", "## Samples", "", "```", *card["samples"], "```"]
    return "\n".join(lines) + "\n"


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
