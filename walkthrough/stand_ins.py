"""Local stand-ins for what needs the network: a step's **Stand-in** line names the one its Try-it
runs offline, and the CPU reproduction can score HellaSwag on one. `walkthrough stand-ins` makes
them in ./stand-ins."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .errors import WalkthroughError

# tiny shakespeare: the HellaSwag stand-in's text
CORPUS = Path(__file__).resolve().parent.parent / "input.txt"


def make_stand_ins(folder: Path, corpus: Path = CORPUS) -> Path:
    """folder/tiny-gpt2 (a random GPT-2 of GPT-2's vocabulary, saved by transformers, for
    `--pretrained gpt2`) and folder/hellaswag.jsonl (8 HellaSwag-format examples made of the
    corpus's paragraphs); each written aside and renamed into place, so a killed run leaves nothing
    half-made under their names. What is there already is kept."""
    if folder.is_symlink() or folder.exists() and not folder.is_dir():
        raise WalkthroughError(
            f"{folder} is in the way (a link or a file): move it, then run this again"
        )
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "tiny-gpt2"
    if not model.is_dir():
        try:
            import torch
            import transformers
        except ImportError:
            raise WalkthroughError(
                "the stand-ins need transformers: pip install -e '.[hf]'"
            ) from None
        torch.manual_seed(0)
        # small, with GPT-2's vocabulary (the config's default: 50257 tokens)
        config = transformers.GPT2Config(n_positions=128, n_embd=32, n_layer=2, n_head=2)
        aside = folder / f".tiny-gpt2.{os.getpid()}"
        shutil.rmtree(aside, ignore_errors=True)
        transformers.GPT2LMHeadModel(config).save_pretrained(aside)
        try:
            aside.rename(model)
        except OSError:
            # another run made it meanwhile (its copy is as good as ours), or something went wrong
            shutil.rmtree(aside, ignore_errors=True)
            if not model.is_dir():
                raise
    examples = folder / "hellaswag.jsonl"
    if not examples.is_file():
        paragraphs = [p.replace("\n", " ") for p in corpus.read_text().split("\n\n")[:40]]
        lines = []
        for i in range(8):
            ctx, endings = (
                paragraphs[5 * i][:120],
                [p[:60] for p in paragraphs[5 * i + 1 : 5 * i + 5]],
            )
            lines.append(json.dumps({"ctx": ctx, "endings": endings, "label": i % 4}) + "\n")
        aside = folder / f".hellaswag.jsonl.{os.getpid()}"
        aside.write_text("".join(lines))
        aside.rename(examples)
    return folder
