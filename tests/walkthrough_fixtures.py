"""A small series written from Python data, for the walkthrough's tests and its benchmark, and a
repository with hostile names.

`write_series` commits each step in a scratch repository the way an author would, then exports it,
so what lands in steps/ is exactly what `walkthrough export` writes.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from git import Git

from repos import commit, git
from walkthrough.gitcmd import ISOLATED, run_git
from walkthrough.patches import AUTHOR, export

# title, narration (Markdown), {path: new content, or None to delete the file}
DemoStep = tuple[str, str, dict[str, "str | bytes | None"]]


def write_series(steps_dir: Path, steps: list[DemoStep]) -> list[Path]:
    name, email = AUTHOR
    env = {**ISOLATED, "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email}
    env |= {"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
    with tempfile.TemporaryDirectory() as tmp:
        git = Git(tmp)
        run_git(git, "init", "-q", "-b", "main", env=env)
        run_git(git, "commit", "-q", "--allow-empty", "-m", "start", env=env)
        run_git(git, "tag", "step-00", env=env)
        for n, (title, narration, changes) in enumerate(steps, 1):
            for path, content in changes.items():
                target = Path(tmp, path)
                if content is None:
                    target.unlink()
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content if isinstance(content, bytes) else content.encode())
            run_git(git, "add", "-A", env=env)
            message = f"Step {n:02d}: {title}\n\n{narration}"
            run_git(git, "commit", "-q", "--cleanup=whitespace", "-m", message, env=env)
        return export(Path(tmp), steps_dir)


READ = """\
# ---- data
with open("input.txt", "r", encoding="utf-8") as f:
    text = f.read()
print(f"{len(text):,} characters")
print(text[:200])
"""

TOKENS = """\
import tiktoken

# ---- data
with open("input.txt", "r", encoding="utf-8") as f:
    text = f.read()
enc = tiktoken.get_encoding("gpt2")
tokens = enc.encode(text)
print(f"{len(text):,} characters -> {len(tokens):,} tokens")
print(tokens[:24])
"""

CONFIG = """\
from dataclasses import dataclass

import tiktoken
import torch
import torch.nn as nn
from torch.nn import functional as F

# ---- model


@dataclass
class GPTConfig:
    block_size: int = 1024  # longest context the model sees
    vocab_size: int = 50257  # 50,000 BPE merges + 256 bytes + <|endoftext|>
    n_layer: int = 12  # transformer blocks
    n_head: int = 12  # attention heads per block
    n_embd: int = 768  # width of the residual stream

"""

ATTENTION = """\


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # key, query, value for all heads in one matmul, as in OpenAI's checkpoint
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.n_head = config.n_head
        self.n_embd = config.n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        nh, hs = self.n_head, C // self.n_head
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        att = (q @ k.transpose(-2, -1)) / hs**0.5  # (B, nh, T, T)
        mask = torch.tril(torch.ones(T, T, device=x.device, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf"))  # no peeking at the future
        att = F.softmax(att, dim=-1)
        y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble the heads side by side
        return self.c_proj(y)
"""

DATA = """\

# ---- data
with open("input.txt", "r", encoding="utf-8") as f:
    text = f.read()
enc = tiktoken.get_encoding("gpt2")
tokens = enc.encode(text)
print(f"{len(text):,} characters -> {len(tokens):,} tokens")
"""

SHAKESPEARE = """\
First Citizen:
Before we proceed any further, hear me speak.

All:
Speak, speak.

First Citizen:
You are all resolved rather to die than to famish?
"""

DEMO_STEPS: list[DemoStep] = [
    (
        "Read the text",
        "Everything starts from one file of text: tiny Shakespeare.\n\n"
        "## Why\n\n"
        "A language model learns to continue text, "
        "so before any model there is text to look at.\n\n"
        "**Try it**\n\n```bash\npython train_gpt2.py\n```\n\n"
        "**What you should see**\n\n"
        "The number of characters, then the first lines of *First Citizen*.",
        {"input.txt": SHAKESPEARE, "train_gpt2.py": READ},
    ),
    (
        "Tokens with tiktoken",
        "GPT-2 reads tokens, not characters: "
        "byte-pair encoding turns common character runs into one id.\n\n"
        "## Why\n\n"
        "About 3 characters per token for English (measured below), "
        "so the same 1,024-token context sees three times more text than characters would.\n\n"
        "**Try it**\n\n```bash\npython train_gpt2.py\n```\n\n"
        "**What you should see**\n\nFewer tokens than characters, and a list of 24 token ids.",
        {"train_gpt2.py": TOKENS},
    ),
    (
        "The GPT-2 config",
        "The five numbers that make GPT-2 (124M), in a dataclass with a comment per field.\n\n"
        "## Why\n\n"
        "Every shape in the model comes from these: 12 layers of width 768 with 12 heads of 64.\n\n"
        "**Try it**\n\n"
        "```bash\npython -c 'import train_gpt2; print(train_gpt2.GPTConfig())'\n```\n\n"
        "**What you should see**\n\n"
        "`GPTConfig(block_size=1024, vocab_size=50257, n_layer=12, n_head=12, n_embd=768)`",
        {"train_gpt2.py": CONFIG + DATA},
    ),
    (
        "Causal self-attention",
        "Attention lets every token look back at the tokens before it "
        "and take a weighted average of them.\n\n"
        "## Why\n\n"
        "The weights come from how well a token's *query* matches each earlier *key*. "
        "The mask keeps the future hidden, "
        "so the model can be trained on every position of a sequence at once.\n\n"
        "Names follow OpenAI's checkpoint (`c_attn`, `c_proj`), "
        "so loading the weights later is a key-for-key copy.\n\n"
        "**Try it**\n\n"
        "```bash\npython -c 'import torch, train_gpt2 as t; "
        "a = t.CausalSelfAttention(t.GPTConfig()); "
        "print(a(torch.randn(2, 8, 768)).shape)'\n```\n\n"
        "**What you should see**\n\n`torch.Size([2, 8, 768])`: one output vector per input token.",
        {"train_gpt2.py": CONFIG + ATTENTION + DATA},
    ),
    (
        "Keep the sample text",
        "The first step's sample becomes the test text; the real run reads the full file.\n\n"
        "**Try it**\n\n```bash\ngit show step-05 --stat\n```\n\n"
        "**What you should see**\n\nOne file renamed.",
        {"input.txt": None, "data/sample.txt": SHAKESPEARE},
    ),
]


LATIN1_NAME = b"caf\xe9.txt"  # a file name that is not UTF-8
# tag names git allows and a shell would run: ; $( ) ` and ${IFS} for the spaces a ref may not hold
INJECTED = "x;touch${IFS}m1;$(touch${IFS}m2)`touch${IFS}m3`"


def make_hostile_repo(path: Path) -> Path:
    """Four steps with names that trip up careless code: a Latin-1 file name and one with a quote
    and a tab; tags named like a shell command, like an option (-b), and like a branch that points
    elsewhere (v1); no tag."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    names = {os.fsdecode(LATIN1_NAME): "latin name\n", 'quote"\tand tab.txt': "odd name\n"}
    commit(path, "Odd names\n\nFiles git has to quote.", names)
    git(path, "tag", INJECTED)
    commit(path, "Option-like tag", {"b.txt": "b\n"})
    # `git tag` refuses a leading '-'; refs allow it
    git(path, "update-ref", "refs/tags/-b", "HEAD")
    commit(path, "Tag and branch", {"c.txt": "c\n"})
    git(path, "tag", "v1")
    git(path, "branch", "v1", "HEAD~2")  # `git checkout v1` would take this branch
    commit(path, "No tag", {"d.txt": "d\n"})
    return path


# ---- a series whose Try-its the reader runs (`r`)

SHOW = """\
import os, pathlib, sys

print("show.py says:", *sys.argv[1:])
print("GREETING is", os.environ.get("GREETING", "unset"))
with open("ran.txt", "a") as f:  # one line per run: \
a second run in the same checkout finds the first one's
    f.write("ran\\n")
print("runs in this checkout:", len(pathlib.Path("ran.txt").read_text().splitlines()))
"""

SLEEPER = """\
import os, subprocess, sys, time

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("pids", os.getpid(), child.pid, flush=True)
time.sleep(600)
"""

FAIL = """\
import sys

print("about to fail")
sys.exit(3)
"""

LONG_COMMAND = (
    "python show.py --n-layer 4 --n-head 4 --n-embd 128 -B 8 -T 128 --max-steps 10 "
    "--and-then-some-more-flags"
)


def _narration(what: str, try_it: str, see: str) -> str:
    return (
        f"{what}\n\n**Try it**\n\n```bash\n{try_it}\n```\n\n"
        f"**What you should see**\n\n```\n{see}\n```\n"
    )


RUN_STEPS: list[DemoStep] = [
    (
        "A script that talks",
        _narration(
            "It prints its arguments.",
            "python show.py hello",
            "show.py says: hello\nGREETING is unset\nruns in this checkout: 1",
        ),
        {"show.py": SHOW},
    ),
    (
        "Part II · A long wait",
        _narration("It waits ten minutes, with a child.", "python sleeper.py", "pids ..."),
        {"sleeper.py": SLEEPER},
    ),
    (
        "A failure",
        _narration("It exits with status 3.", "python fail.py", "about to fail"),
        {"fail.py": FAIL},
    ),
    (
        "Nothing for the shell",
        _narration(
            "Globs, braces and a tilde go through as text; a line that needs a shell is not run.",
            "python show.py * ~ {a,b} 'two words' && GREETING=hi python show.py again\n"
            "python show.py x; touch marker\n"
            f"{LONG_COMMAND}",
            "...",
        ),
        {"notes.txt": "the last step\n"},
    ),
]
