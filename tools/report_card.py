"""
A reproduction's report card, report.md and report.json, which reproduce.py writes at the end of the
day: every figure read from a file of the run (log.txt, stages/, the shards' manifest.json), each
target with its source.
"""

import json
import re
import shlex
import statistics
import time
from pathlib import Path

import train_gpt2
from longrun.common import UserError, sha256_file, write_atomically
from longrun.manifest import read_manifest
from longrun.meters import duration
from longrun.shards import SHARD
from tools.plot_log import GPT2_124M_HELLASWAG, GPT2_124M_VAL_LOSS, GPT3_124M_HELLASWAG, read_series

# reproduce.py's
STAGES = ["data", "verify", "preflight", "train", "hellaswag", "samples", "curves", "export"]
# fineweb.py's dataset, where GPT-2's validation loss was measured
FINEWEB_EDU = "HuggingFaceFW/fineweb-edu"
HELLASWAG_EXAMPLES = 10042  # the validation set's, which the targets score
TARGETS = {  # each with its source
    "val_loss": f"{GPT2_124M_VAL_LOSS}: OpenAI's GPT-2 124M on FineWeb-Edu's val shard "
    "(the lecture's figure)",
    "hellaswag": f"{GPT2_124M_HELLASWAG}: OpenAI's GPT-2 124M, as our scorer rates it "
    f"(the lecture's figure); {GPT3_124M_HELLASWAG}: GPT-3 124M (the GPT-3 paper, Brown et al. "
    "2020)",
}


def record(stages, stage):
    """What reproduce.py keeps of a stage in stages/NAME.json ({} before it first ran); a damaged
    one is one line."""
    path = stages / f"{stage}.json"
    try:
        found = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:  # not JSON, or not UTF-8
        found = None
    if isinstance(found, dict) and isinstance(found.get("seconds", 0), (int, float)):
        return found
    raise UserError(f"stage {stage}: {path} is damaged: delete it, and the stage runs again")


def is_fineweb_edu(data):
    return (read_manifest(Path(data)) or {"settings": {}})["settings"].get("dataset") == FINEWEB_EDU


def last_attempt(stages, stage):
    """What the stage printed in its last attempt (stages/NAME.txt holds every attempt, each after a
    == line)."""
    path = stages / f"{stage}.txt"
    return path.read_text(errors="replace").rsplit("\n== ", 1)[-1] if path.exists() else ""


def data_summary(data):
    manifest, tokens = read_manifest(data), {"train": 0, "val": 0}
    for shard in manifest["shards"]:
        # the split, as the run reads it
        tokens[SHARD.fullmatch(shard["file"])[1]] += shard["tokens"]
    source = {
        k: v for k, v in manifest["settings"].items() if k in ("dataset", "name", "split", "files")
    }
    return dict(
        folder=str(data), shards=len(manifest["shards"]), train_tokens=tokens["train"]
    ) | dict(
        val_tokens=tokens["val"], manifest_sha256=sha256_file(data / "manifest.json"), source=source
    )


def collect(log_dir, price):
    """The card's data: the command whose run made the final checkpoint, what it made, and its cost
    at price."""
    stages = log_dir / "stages"
    records = {s: record(stages, s) for s in STAGES}
    command = records["train"]["made_by"]  # the command whose run made the final checkpoint
    args = train_gpt2.parse_args(command["train_gpt2.py"])
    # to the final checkpoint: a run cut back logged past it
    logged = read_series(log_dir / "log.txt").items()
    series = {
        k: [(s, v) for s, v in vs if s < args.max_steps + (k in ("val", "hella"))]
        for k, vs in logged
    }
    env = records["train"]["environment"]  # the machine the run ran on, which reproduce.py saved
    seconds = {s: round(records[s].get("seconds", 0.0), 3) for s in STAGES}
    gpus = env["gpu_count"] if args.device != "cpu" else 0
    gpu_hours = sum(seconds.values()) * gpus / 3600 if gpus else None
    steps = max((step for step, _ in series.get("train", [])), default=-1) + 1
    val, hellaswag = series.get("val", [(None, None)]), last_attempt(stages, "hellaswag")
    acc = {
        k: float(m[1])
        for k in ("acc", "acc_norm")
        if (m := re.search(rf"^{k} ([\d.]+)$", hellaswag, re.M))
    }
    examples = int(m[1]) if (m := re.search(r"^(\d+) examples", hellaswag, re.M)) else None
    return {
        "command": shlex.join(command["argv"]),
        "written": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "environment": env,
        "data": data_summary(Path(args.data)),
        "stages": seconds,  # each done: the card is written at the end of the day
        "run": {"steps": steps, "max_steps": args.max_steps, "tokens": steps * args.total_batch}
        | {
            k: statistics.median(v for _, v in series[k]) if series.get(k) else None
            for k in ("tok_s", "mfu")
        }
        | {"processes": command["nproc"], "seconds": seconds["train"], "day_gpu_hours": gpu_hours}
        | {"price_per_gpu_hour": price, "cost": gpu_hours * price if gpu_hours and price else None},
        # GPT-2's figures are FineWeb-Edu's val shard's, and HellaSwag's whole validation set's
        "val_loss": {
            "value": val[-1][1],
            "step": val[-1][0],
            "comparable": is_fineweb_edu(args.data),
        },
        "hellaswag": acc
        | {"examples": examples}
        | {"comparable": examples == HELLASWAG_EXAMPLES and not args.hellaswag_data},
        "samples": re.findall(r"^sample \d+: (.*)$", last_attempt(stages, "samples"), re.M),
    }


def markdown(card):
    run, val, hella = card["run"], card["val_loss"], card["hellaswag"]
    lines = [
        "# Report card: GPT-2 (124M) reproduction",
        "",
        f"`{card['command']}`, written {card['written']}",
        "",
    ]
    lines += ["## Results", "", "| | this run | targets |", "|---|---|---|"]
    if val["value"] is not None:
        lines.append(
            f"| validation loss, step {val['step']} | {val['value']:.4f} | {TARGETS['val_loss']} |"
        )
    what = f"HellaSwag acc_norm, {hella['examples']} examples"
    lines.append(f"| {what} | {hella['acc_norm']:.4f} | {TARGETS['hellaswag']} |")
    if val["value"] is not None and not val["comparable"]:
        lines += [
            "",
            "This run did not validate on FineWeb-Edu: its loss is not comparable with GPT-2's.",
        ]
    if not hella["comparable"]:
        lines += [
            "",
            f"HellaSwag scored {hella['examples']} examples, not all {HELLASWAG_EXAMPLES:,}: not "
            "comparable.",
        ]
    lines += ["", "## Stages (wall time, all attempts)", ""]
    lines += [f"- {stage}: {duration(seconds)}" for stage, seconds in card["stages"].items()]
    lines += ["", "## Run (tok_s, mfu: log.txt's median step), environment and data", ""]
    lines += [
        f"- {k}: {v}"
        for k, v in (run | card["environment"] | card["data"]).items()
        if v is not None
    ]
    lines += [
        "",
        "## Curves",
        "",
        "![loss curves](curves.png)",
        "",
        "## Samples",
        "",
        "```",
        *card["samples"],
        "```",
    ]
    return "\n".join(lines) + "\n"


def write(log_dir, price=None):
    card = collect(Path(log_dir), price)
    write_atomically(
        str(Path(log_dir) / "report.json"), lambda f: f.write(json.dumps(card, indent=1).encode())
    )
    write_atomically(str(Path(log_dir) / "report.md"), lambda f: f.write(markdown(card).encode()))
    return card
