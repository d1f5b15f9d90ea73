"""
A shard folder's manifest.json, read and checked, and a shard checked against its entry: what
fineweb.py writes, --verify checks, and the trainer and preflight read before a run. A module of its
own, so that reading a folder's manifest never imports datasets.
"""

import json
import os
from pathlib import Path

import numpy as np

from longrun.common import EOT, UserError, sha256_file

SHARD_ENTRY = {"file": str, "tokens": int, "documents": int, "sha256": str, "resume_at": dict}


def manifest_problem(manifest):
    """What makes a manifest.json unusable (a hand edit, a damaged disk), or None; later code can
    trust its types."""
    if not isinstance(manifest, dict):
        return "not a JSON object"
    for key, kind in {"settings": dict, "complete": bool, "shards": list}.items():
        if not isinstance(manifest.get(key), kind):
            return f"{key!r} is missing or not {kind.__name__}"
    if manifest["complete"] and not isinstance(manifest.get("tokens"), int):
        return "'tokens' is missing or not int"
    for i, shard in enumerate(manifest["shards"]):
        if not (
            isinstance(shard, dict)
            and all(isinstance(shard.get(key), kind) for key, kind in SHARD_ENTRY.items())
            and all(isinstance(shard["resume_at"].get(key), int) for key in ("document", "token"))
        ):
            return f"shard entry {i} is not a shard entry"
    return None


def read_manifest(out):
    path = out / "manifest.json"
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        problem = f"not JSON: {e}"
    else:
        problem = manifest_problem(manifest)
    if problem:
        raise UserError(f"{path} is damaged ({problem}): delete {out} and rerun to start over")
    return manifest


def shard_problems(path, expected):
    try:
        tokens = np.load(path, mmap_mode="r")
    except Exception as e:
        # a damaged header makes numpy raise ValueError, SyntaxError, tokenize.TokenError, ...
        return [f"unreadable ({(str(e).splitlines() or [type(e).__name__])[0]})"]
    problems = []
    if tokens.dtype != np.uint16 or tokens.ndim != 1:
        problems.append(f"a {tokens.dtype} array of shape {tokens.shape}, not uint16 tokens")
    elif tokens.shape != (expected["tokens"],):
        problems.append(f"{tokens.size:,} tokens, not {expected['tokens']:,}")
    elif tokens.size and tokens.max() > EOT:
        problems.append(f"token ids above {EOT}")
    elif (documents := np.count_nonzero(tokens == EOT)) != expected["documents"]:
        problems.append(f"{documents:,} <|endoftext|> tokens, not {expected['documents']:,}")
    if sha256_file(path) != expected["sha256"]:
        problems.append("sha256 differs")
    return problems


def check_shard_folder(data):
    """Refuse a folder fineweb.py has not finished, or whose .npy files are not the shards its
    manifest lists: a run on it would loop over partial data. Only names and sizes (the files'
    headers): `fineweb.py --verify` reads every byte. A folder without a manifest.json (shards from
    another tool) is taken as it is."""
    manifest = read_manifest(Path(data))
    if manifest is None:
        return
    verify = f"python fineweb.py --verify --out {data}"
    if not manifest["complete"]:
        raise UserError(
            f"{data} is unfinished: rerun the fineweb.py command that made it, then check it with: "
            f"{verify}"
        )
    listed = {shard["file"]: shard["tokens"] for shard in manifest["shards"]}
    found = {name for name in os.listdir(data) if name.endswith(".npy")}
    problems = [f"{name} missing" for name in sorted(listed.keys() - found)]
    problems += [f"{name} not in manifest.json" for name in sorted(found - listed.keys())]
    for name in sorted(listed.keys() & found):
        try:
            size = np.load(os.path.join(data, name), mmap_mode="r").size  # the header alone
        except Exception:
            # a damaged header (ValueError, SyntaxError, ...): the trainer's loader names it
            continue
        if size != listed[name]:
            problems.append(f"{name} holds {size:,} tokens, not {listed[name]:,}")
    if problems:
        raise UserError(
            f"{data} does not match its manifest.json ({'; '.join(problems[:3])}): run {verify}"
        )
