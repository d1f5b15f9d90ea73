"""
Reproduce GPT-2 (124M): the model, the data, the optimizer and the training run, top to bottom.

    python train_gpt2.py --preset cpu                        # a small model on tiny shakespeare
    torchrun --standalone --nproc_per_node=8 train_gpt2.py   # the real run on FineWeb-Edu 10B
"""

import functools
import math
import os
import re
import sys
import time
from argparse import BooleanOptionalAction
from dataclasses import asdict, dataclass

import numpy as np
import tiktoken
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from longrun import hellaswag_scoring
from longrun.common import (
    EOT,
    ArgumentParser,
    UserError,
    count,
    fraction,
    positive_float,
    random_seed,
    whole,
)
from longrun.manifest import check_shard_folder
from longrun.meters import MFU, TimeLeft
from longrun.run_folder import Console, RunFolder, load_weights, read_checkpoint
from longrun.stopping import StopRequest, run_job, stop_if_not_finite

# --------------------------------------------------------------------------------------------------
# ---- model


@dataclass
class GPTConfig:
    block_size: int = 1024  # longest sequence the model reads (the number of position embeddings)
    vocab_size: int = 50257  # 50,000 BPE merges + 256 byte tokens + <|endoftext|>
    n_layer: int = 12  # transformer blocks
    n_head: int = 12  # attention heads per block
    n_embd: int = 768  # width of the residual stream


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        # query, key, value for all heads in one matmul
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        # adds into the residual stream: see GPT._init_weights
        self.c_proj.RESIDUAL_PROJECTION = True

    def forward(self, x):
        B, T, C = x.size()  # batch, sequence length, n_embd
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        # flash attention: softmax(q k^T / sqrt(hs)) v with a causal mask, never materialising the
        # (T, T) matrix
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): heads side by side again
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU(approximate="tanh")  # the approximation OpenAI trained GPT-2 with
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.c_proj.RESIDUAL_PROJECTION = True

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x):
        # pre-LayerNorm: the residual stream itself is never normalised, so gradients flow straight
        # to the input
        x = x + self.attn(self.ln_1(x))  # tokens exchange information
        x = x + self.mlp(self.ln_2(x))  # each token thinks on its own
        return x


# OpenAI's checkpoint stores these weights TensorFlow-style as Conv1D (in, out); nn.Linear holds
# (out, in)
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),  # token embeddings
                wpe=nn.Embedding(config.block_size, config.n_embd),  # position embeddings
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # weight tying: a token's input embedding is also its output classifier (saves 38M
        # parameters at 124M)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            std = 0.02
            if hasattr(module, "RESIDUAL_PROJECTION"):
                # each block adds twice (attn, mlp) to the residual stream; scale so its variance
                # stays ~constant
                std *= (2 * self.config.n_layer) ** -0.5
            torch.nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None, positions=None):
        # positions (N,), optional: logits only at these of the B*T positions (row-major), (N,
        # vocab_size); HellaSwag reads a quarter of them, and at GPT-2's vocabulary the lm_head is
        # most of a small model's compute
        B, T = idx.size()
        assert T <= self.config.block_size, (
            f"sequence of {T} tokens, block size is only {self.config.block_size}"
        )
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)  # (T,)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T, C) + (T, C) broadcasts
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if positions is not None:
            x = x.flatten(0, 1)[positions]  # (N, C)
        logits = self.lm_head(x)  # (B, T, vocab_size), or (N, vocab_size)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @classmethod
    def from_pretrained(cls, name_or_dir):
        """OpenAI's gpt2 / gpt2-medium / gpt2-large / gpt2-xl, or a local transformers folder, as
        our GPT."""
        # optional dependency: pip install 'build-gpt2[hf]'
        from transformers import GPT2LMHeadModel

        hf_model = GPT2LMHeadModel.from_pretrained(name_or_dir)
        hf_config = hf_model.config
        config = GPTConfig(
            block_size=hf_config.n_positions,
            vocab_size=hf_config.vocab_size,
            n_layer=hf_config.n_layer,
            n_head=hf_config.n_head,
            n_embd=hf_config.n_embd,
        )
        model = cls(config)
        sd = model.state_dict()
        sd_hf = hf_model.state_dict()
        for key, value in sd.items():
            hf_value = sd_hf[key]
            if key.endswith(CONV1D):
                hf_value = hf_value.t()
            assert hf_value.shape == value.shape, (
                f"{key}: {tuple(hf_value.shape)} vs {tuple(value.shape)}"
            )
            with torch.no_grad():
                value.copy_(hf_value)
        return model

    @classmethod
    def from_checkpoint(cls, path):
        """Our GPT, with the weights of a checkpoint that train_gpt2.py wrote
        (log/model_NNNNN.pt)."""
        checkpoint = read_checkpoint(path)
        try:
            config = GPTConfig(**checkpoint["config"])
        except TypeError as e:
            raise UserError(f"{path}: its config does not fit GPTConfig ({e})") from None
        if (
            not all(type(v) is int and v > 0 for v in asdict(config).values())
            or config.n_embd % config.n_head
        ):
            raise UserError(f"{path}: its config is not a model's shape ({asdict(config)})")
        model = cls(config)
        load_weights(model, checkpoint["model"], path)
        return model

    def configure_optimizers(self, weight_decay, learning_rate, device_type):
        # decay the matrices (matmul weights, embeddings); never biases or LayerNorm gains, which
        # only shift and scale
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        # fused: the whole AdamW update in one kernel pass; CUDA's default (foreach) runs one kernel
        # per operation
        fused = device_type == "cuda"
        return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.95), eps=1e-8, fused=fused)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, top_k=50, generator=None):
        """Append max_new_tokens sampled tokens to idx (B, T), sampling only among the top_k most
        likely."""
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.config.block_size :])
            # (B, vocab_size): only the last position
            probs = F.softmax(logits[:, -1, :].float(), dim=-1)
            topk_probs, topk_indices = torch.topk(probs, top_k, dim=-1)  # (B, top_k)
            choice = torch.multinomial(topk_probs, 1, generator=generator)  # (B, 1)
            idx = torch.cat((idx, torch.gather(topk_indices, -1, choice)), dim=1)
        return idx


# --------------------------------------------------------------------------------------------------
# ---- devices and processes: one process per GPU, one rank each


def pick_device(device):
    """'auto' -> cuda, then mps (Apple silicon), then cpu; a named device is checked to exist
    here."""
    if device == "auto":
        return (
            "cuda"
            if torch.cuda.is_available()
            else "mps"
            if torch.backends.mps.is_available()
            else "cpu"
        )
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise UserError(
            f"--device {device!r} is not a device: use auto, cpu, cuda, cuda:N or mps"
        ) from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise UserError(
            f"--device {device}: this machine has no CUDA GPU that torch can use (try --device cpu)"
        )
    if kind == "mps" and not torch.backends.mps.is_available():
        raise UserError(
            f"--device {device}: this machine has no Apple GPU that torch can use (try --device "
            "cpu)"
        )
    if kind not in ("cpu", "cuda", "mps"):
        raise UserError(f"--device {device}: only cpu, cuda and mps are supported")
    return device


def setup_distributed(device):
    """(ddp, rank, local_rank, world_size, device). torchrun sets RANK; a plain `python` run has no
    process group."""
    ddp = "RANK" in os.environ
    rank, local_rank = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    device = pick_device(device)
    if world_size > 1 and device.startswith("cuda:"):
        raise UserError(
            f"--device {device} would put all {world_size} processes on one GPU: pass --device cuda"
        )
    if device == "cuda":
        # one GPU per process: local rank r takes GPU r, or the only one it sees where a launcher
        # gives each process its own (CUDA_VISIBLE_DEVICES), where cuda:r would not exist
        gpus = torch.cuda.device_count()
        # two processes on one GPU: NCCL would refuse it later, and less clearly
        if 1 < gpus <= local_rank:
            raise UserError(
                f"local rank {local_rank} has no GPU of its own: this machine shows {gpus}"
            )
        device = f"cuda:{local_rank if gpus > 1 else 0}"
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    if ddp:
        dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return ddp, rank, local_rank, world_size, device


def all_reduce_sum(values, device, ddp):
    """Sum a list of numbers over all ranks (gloo has no AVG, so averages divide a sum)."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if ddp:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def replica_drift(model):
    """The largest difference between a weight on any rank and the same weight on rank 0."""
    drift = torch.zeros((), device=next(model.parameters()).device)
    for p in model.parameters():
        p0 = p.detach().clone()
        dist.broadcast(p0, src=0)
        drift = torch.maximum(drift, (p.detach() - p0).abs().max())
    dist.all_reduce(drift, op=dist.ReduceOp.MAX)
    return drift.item()


# --------------------------------------------------------------------------------------------------
# ---- data


class Shard:
    """One shard's tokens, its documents optionally in a seeded random order, read without copying
    the shard."""

    def __init__(self, tokens, rng=None):
        self.tokens = tokens  # uint16, usually a read-only memory map of a .npy file
        # a bad id would fail deep inside the embedding
        if len(tokens) and (largest := int(tokens.max())) > EOT:
            where = getattr(tokens, "filename", None) or "a shard"
            raise UserError(
                f"{where} holds token id {largest}, but GPT-2's ids stop at {EOT}; re-create it"
            )
        cuts = np.flatnonzero(tokens == EOT) if rng is not None else np.empty(0, dtype=np.int64)
        # documents start at each EOT; a shard can also start mid-document (fineweb.py splits at
        # shard ends)
        starts = np.union1d([0], cuts)
        ends = np.append(starts[1:], len(tokens))
        order = rng.permutation(len(starts)) if rng is not None else np.arange(len(starts))
        self.starts, self.ends = starts[order], ends[order]
        # where each document begins here
        self.offsets = np.concatenate(([0], np.cumsum(self.ends - self.starts)))

    def __len__(self):
        return len(self.tokens)

    def read(self, offset, n):
        """Up to n tokens from position offset of the (shuffled) shard, as a small uint16 array."""
        parts = []
        doc = np.searchsorted(self.offsets, offset, side="right") - 1
        while n > 0 and doc < len(self.starts):
            start = self.starts[doc] + offset - self.offsets[doc]
            piece = self.tokens[start : min(self.ends[doc], start + n)]
            parts.append(piece)
            n -= len(piece)
            offset += len(piece)
            doc += 1
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint16)


class DataLoaderLite:
    """Batches of (B, T) inputs and targets from a list of token shards, each rank reading its own
    interleaved slice.

    The shards form one stream, epoch after epoch; a batch that runs past a shard's end continues
    into the next shard, so no token is dropped. With a seed, every epoch visits the shards, and the
    documents inside each shard, in a fresh random order: the reference's fixed order makes the loss
    repeat a pattern every epoch.
    """

    def __init__(self, shards, B, T, rank=0, world_size=1, seed=None):
        assert shards and all(len(shard) for shard in shards), "empty shards"
        self.shards, self.B, self.T = shards, B, T
        self.rank, self.world_size, self.seed = rank, world_size, seed
        # the position: this is all the state there is
        self.epoch, self.shard, self.offset = 0, 0, 0
        # (epoch, shard) -> Shard: the one being read and the next, for batches straddling both
        self._cache = {}

    def state_dict(self):
        return {"epoch": self.epoch, "shard": self.shard, "offset": self.offset}

    def load_state_dict(self, state):
        self.epoch, self.shard, self.offset = state["epoch"], state["shard"], state["offset"]

    def reset(self):
        self.load_state_dict({"epoch": 0, "shard": 0, "offset": 0})

    def _shard_order(self, epoch):
        if self.seed is None:
            return range(len(self.shards))
        # same on every rank
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.shards))

    def _shard(self, epoch, i):
        k = self._shard_order(epoch)[i]
        if (epoch, k) not in self._cache:
            if len(self._cache) == 2:
                del self._cache[next(iter(self._cache))]  # the oldest
            rng = None if self.seed is None else np.random.default_rng([self.seed, epoch, k])
            self._cache[(epoch, k)] = Shard(self.shards[k], rng)
        return self._cache[(epoch, k)]

    def _locate(self, epoch, i, offset):
        """The same stream position with its offset inside its shard, carried over shard and epoch
        ends."""
        while offset >= (n := len(self.shards[self._shard_order(epoch)[i]])):
            offset -= n
            epoch, i = (epoch, i + 1) if i + 1 < len(self.shards) else (epoch + 1, 0)
        return epoch, i, offset

    def _read(self, epoch, i, offset, n):
        """n tokens of the stream from (epoch, shard i, offset) on."""
        parts = []
        while n > 0:
            epoch, i, offset = self._locate(epoch, i, offset)
            parts.append(self._shard(epoch, i).read(offset, n))
            n -= len(parts[-1])
            offset += len(parts[-1])
        return np.concatenate(parts)

    def next_batch(self):
        B, T = self.B, self.T
        # ranks take consecutive B*T slices of the stream: rank r reads the r-th, then all move on
        # together
        buf = self._read(self.epoch, self.shard, self.offset + self.rank * B * T, B * T + 1)
        # only the (B*T + 1,) batch becomes int64, never a shard
        buf = torch.from_numpy(buf.astype(np.int64))
        x = buf[:-1].view(B, T)  # inputs
        y = buf[1:].view(B, T)  # targets: the next token at every position
        self.epoch, self.shard, self.offset = self._locate(
            self.epoch, self.shard, self.offset + B * T * self.world_size
        )
        return x, y


# fineweb.py's names: PREFIX_val_000000.npy, PREFIX_train_000001.npy
SHARD = re.compile(r".+_(train|val)_\d+\.npy")


def shard_paths(folder, split):
    """The shards of one split in a folder, in order. The split is read from the end of a name, so
    that a prefix may hold `_train_` itself; the folder is listed, not globbed, so that its name is
    a path and never a pattern."""
    names = [name for name in os.listdir(folder) if (m := SHARD.fullmatch(name)) and m[1] == split]
    return [os.path.join(folder, name) for name in sorted(names)]


@functools.cache  # both splits of a text file come from one read
def text_tokens(path):
    """A text file's GPT-2 tokens, read and tokenized once however many splits ask for them."""
    with open(path, encoding="utf-8") as f:
        return np.array(tiktoken.get_encoding("gpt2").encode_ordinary(f.read()), dtype=np.uint16)


def load_split(data, split, min_tokens):
    """The token shards of a split: `*_{split}_NNNNNN.npy` files of a folder made by fineweb.py, or
    a text file. A split must hold min_tokens (one batch for every rank), or its batches would
    repeat tokens inside themselves."""
    if not os.path.exists(data):
        raise UserError(
            f"{data} does not exist: make shards with fineweb.py, or pass --data input.txt"
        )
    if os.path.isfile(data):
        # a plain text file (tiny shakespeare): tokenize it whole, the last 10% is the validation
        # split
        try:
            tokens = text_tokens(data)
        except UnicodeDecodeError as e:
            raise UserError(f"{data} is not UTF-8 text ({e.reason} at byte {e.start})") from None
        cut = int(0.9 * len(tokens))
        shards = [tokens[:cut] if split == "train" else tokens[cut:]]
    else:
        check_shard_folder(data)
        paths = shard_paths(data, split)
        if not paths:
            raise UserError(
                f"no {split} shards (*_{split}_NNNNNN.npy) in {data}: "
                "run fineweb.py first, or pass a text file"
            )
        shards = [load_shard(path) for path in paths]
    if (n := sum(map(len, shards))) < min_tokens:
        raise UserError(
            f"the {split} split of {data} holds {n:,} tokens, fewer than one batch for every rank "
            f"(B*T*processes + 1 = {min_tokens:,}): lower -B or -T, or add data"
        )
    return shards


def load_shard(path):
    try:
        # memory-mapped: the OS pages tokens in as batches need them
        shard = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as e:
        raise UserError(
            f"{path} is not a readable .npy shard ({e}); re-create it with fineweb.py"
        ) from None
    if shard.dtype != np.uint16 or shard.ndim != 1:
        raise UserError(
            f"{path} holds {shard.dtype} of shape {shard.shape}, expected a 1-D uint16 token array"
        )
    if len(shard) == 0:
        raise UserError(f"{path} is empty; re-create it with fineweb.py")
    return shard


# --------------------------------------------------------------------------------------------------
# ---- optimisation and evaluation


def get_lr(step, max_lr, min_lr, warmup_steps, max_steps):
    """GPT-3's schedule: a linear warmup to max_lr, then a cosine decay to min_lr at max_steps."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    decay_ratio = (step - warmup_steps) / (max_steps - warmup_steps)  # 0 -> 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # 1 -> 0
    return min_lr + coeff * (max_lr - min_lr)


@torch.no_grad()
def val_loss(model, loader, steps, device, autocast):
    """Mean loss over the first `steps` batches of the validation split (the same batches every
    time)."""
    model.eval()
    loader.reset()
    loss = torch.zeros((), device=device)
    for _ in range(steps):
        x, y = loader.next_batch()
        with autocast():
            _, batch_loss = model(x.to(device), y.to(device))
        loss += batch_loss.detach().float() / steps
    model.train()
    return loss


def sample(model, prompt, num_samples, max_length, device, seed, autocast, top_k=50):
    enc = tiktoken.get_encoding("gpt2")
    # (n, T)
    idx = torch.tensor(enc.encode(prompt), dtype=torch.long, device=device).repeat(num_samples, 1)
    # its own generator: training's RNG is untouched
    generator = torch.Generator(device=device).manual_seed(seed)
    model.eval()
    with autocast():
        out = model.generate(idx, max_length - idx.size(1), top_k=top_k, generator=generator)
    model.train()
    # the padded vocabulary's extra ids (50257..50303) are no tokens; an untrained model may still
    # sample them
    return [enc.decode([t for t in row.tolist() if t < enc.n_vocab]) for row in out]


def hellaswag_accuracy(model, examples, B, device, autocast, ddp):
    """(correct by acc_norm, total) over all examples: each rank scores every world_size-th of them,
    in batches of B/4 examples (4 endings each: B rows) padded to one fixed shape, so a compiled
    model compiles once."""
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if ddp else (0, 1)
    with autocast():
        counts = hellaswag_scoring.evaluate(
            model,
            examples,
            device=device,
            batch_size=B // 4 or 1,
            rank=rank,
            world_size=world_size,
            fixed_shape=True,
        )
    _, correct_norm, total = all_reduce_sum(list(counts), device, ddp)
    return correct_norm, total


# --------------------------------------------------------------------------------------------------
# ---- the run


def run_dtype(flag, device_type):
    """The autocast dtype: the --dtype flag's, else bfloat16 on a CUDA GPU and full float32
    elsewhere."""
    return flag or ("bfloat16" if device_type == "cuda" else "float32")


def autocast_for(device_type, dtype):
    """The run's autocast, as a context to enter around each forward: bfloat16, or nothing at all
    for float32."""
    return lambda: torch.autocast(
        device_type=device_type, dtype=torch.bfloat16, enabled=dtype == "bfloat16"
    )


def compile_on(args, device_type):
    """Whether the model is compiled: --compile or --no-compile, else on with CUDA only."""
    return device_type == "cuda" if args.compile is None else args.compile


def load_model(pretrained=None, checkpoint=None, config=None):
    """Our GPT: with one of our checkpoints, with OpenAI's weights (a name, or a local transformers
    folder), or freshly initialised in config's shape. The one way every script builds the model."""
    if checkpoint:
        return GPT.from_checkpoint(checkpoint)
    if not pretrained:
        return GPT(config)
    try:
        return GPT.from_pretrained(pretrained)
    except ImportError:
        raise UserError(f"{pretrained} is loaded by transformers: pip install -e '.[hf]'") from None
    # no such model or folder, no network, a broken config, weights cut short or of other sizes
    except Exception as e:
        if (
            not isinstance(e, (OSError, ValueError, KeyError, RuntimeError))
            and type(e).__name__ != "SafetensorError"
        ):
            raise
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"cannot load model {pretrained!r}: {reason}") from None


def accumulate_gradients(model, loader, grad_accum_steps, device, autocast, ddp):
    """One optimization step's micro-steps: each batch's loss backpropagated, the gradients adding
    up. Returns this rank's mean loss over them. The run's own code, which tools/preflight.py
    times."""
    loss_accum = torch.zeros((), device=device)
    for micro_step in range(grad_accum_steps):
        x, y = loader.next_batch()
        x, y = x.to(device), y.to(device)
        if ddp:
            # all-reduce gradients on the last micro-step only; set before the forward, which arms
            # DDP's hooks
            model.require_backward_grad_sync = micro_step == grad_accum_steps - 1
        with autocast():
            _, loss = model(x, y)
        # cross_entropy averages over B*T tokens; dividing by the micro-steps makes the sum an
        # average too
        loss = loss / grad_accum_steps
        loss_accum += loss.detach()
        loss.backward()
    return loss_accum


def micro_steps(total_batch, B, T, world_size, max_steps, resuming=False):
    """How many B*T micro-batches each of world_size processes adds up to make total_batch tokens a
    step, or an error naming a -B that keeps the run, and for a fresh run a --total-batch with the
    --max-steps that keeps its tokens (a resumed run keeps the total batch it was trained with)."""
    tokens = B * T * world_size  # one micro-step of all processes
    if total_batch % tokens == 0:
        return total_batch // tokens
    hints = [
        f"-B {b} (the same run)"
        for b in range(B - 1, 0, -1)
        if total_batch % (b * T * world_size) == 0
    ][:1]
    if not resuming:
        other = max(1, round(total_batch / tokens)) * tokens
        # another total batch is another experiment (other steps, another schedule); this
        # --max-steps keeps its tokens
        keep = round(total_batch * max_steps / other)
        hints.append(f"--total-batch {other} --max-steps {keep} (the same tokens in other steps)")
    advice = f"pass {', or '.join(hints)}" if hints else "use a number of processes that divides it"
    kept = "; a resumed run keeps its --total-batch" if resuming else ""
    raise UserError(
        f"--total-batch {total_batch} is not a multiple of B*T*processes = {B}*{T}*{world_size} = "
        f"{tokens}: "
        f"{advice}{kept}"
    )


def load_hellaswag(args):
    try:
        return hellaswag_scoring.load_examples(args.hellaswag_data or hellaswag_scoring.download())
    except UserError as e:
        raise UserError(
            f"HellaSwag: {e} (or pass --hellaswag-data FILE, or turn it off with --hellaswag-every "
            "0)"
        ) from None


def checkpoint_due(step, every, max_steps):
    return step == max_steps or (every > 0 and step % every == 0)


def train(args):
    ddp, rank, local_rank, world_size, device = setup_distributed(args.device)
    master_process = rank == 0  # the one process that logs, samples and writes checkpoints
    device_type = device.split(":")[0]
    dtype = run_dtype(args.dtype, device_type)
    autocast = autocast_for(device_type, dtype)

    # ---- the batch: B*T tokens per micro-step per process, accumulated up to total_batch tokens
    # per step
    B, T = args.batch_size, args.seq_len
    grad_accum_steps = micro_steps(
        args.total_batch, B, T, world_size, args.max_steps, bool(args.resume)
    )

    # ---- the data, and the folder this run writes (a fresh run never writes over another)
    min_tokens, seed = B * T * world_size + 1, args.seed if args.shuffle else None
    train_loader = DataLoaderLite(
        load_split(args.data, "train", min_tokens), B, T, rank, world_size, seed
    )
    val_loader = (
        DataLoaderLite(load_split(args.data, "val", min_tokens), B, T, rank, world_size)
        if args.val_every > 0
        else None
    )
    hella_examples = load_hellaswag(args) if args.hellaswag_every > 0 else None
    run = RunFolder(args, master_process, device)
    # its last evaluation and samples are in its logs already: nothing to add
    if finished := run.finished():
        if master_process:
            print(f"{run.dir}: the run is done: {finished}")
        return

    # ---- the model
    torch.manual_seed(args.seed)
    # TF32 matmuls on Ampere and newer: ~8x the float32 throughput
    torch.set_float32_matmul_precision("high")
    config = GPTConfig(
        vocab_size=args.vocab_size, n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd
    )
    model = load_model(pretrained=args.pretrained, config=config).to(device)
    optimizer = model.configure_optimizers(args.weight_decay, args.max_lr, device_type)
    start_step = run.restore(model, optimizer, train_loader)
    raw_model = model  # the plain module: for checkpoints and sampling
    if compile_on(args, device_type):
        # dynamic=False: each shape (validation, HellaSwag, training) gets code of its own; by
        # default a size that changed would become a variable, and the training step would run code
        # made for any length
        model = torch.compile(model, dynamic=False)
    if ddp:
        model = DDP(model, device_ids=[local_rank] if device_type == "cuda" else None)
    eval_model = model.module if ddp else model  # compiled but without DDP's gradient hooks

    if master_process:
        n_params = sum(p.numel() for p in raw_model.parameters())
        print(
            f"{n_params / 1e6:.2f}M parameters on {device} x{world_size} | {dtype} | grad accum "
            f"{grad_accum_steps} | "
            f"steps {start_step}..{args.max_steps}"
            + (f" | resumed from step {start_step}" if start_step else "")
        )
    min_lr = args.max_lr * args.min_lr_ratio
    mfu = MFU(raw_model, T, device, world_size)
    if master_process:
        print(mfu.basis())
    # SIGTERM, SIGHUP or Ctrl-C: finish the step, save, exit
    stop = StopRequest(device, ddp, master_process)
    step_times, eta = [], TimeLeft(args.max_steps)

    for step in range(start_step, args.max_steps + 1):
        last_step = step == args.max_steps

        # ---- evaluation: validation loss and HellaSwag with the compiled model; samples with the
        # plain one. Each starts only if no rank was asked to stop: a scheduler's grace period
        # between SIGTERM and SIGKILL (30 s under torchrun) can be shorter than an evaluation
        if (
            args.val_every > 0
            and (step % args.val_every == 0 or last_step)
            and not stop.requested()
        ):
            loss = val_loss(eval_model, val_loader, args.val_steps, device, autocast)
            loss = all_reduce_sum([loss.item()], device, ddp)[0] / world_size
            if master_process:
                print(f"validation loss: {loss:.4f}")
                run.log(step, val=f"{loss:.4f}")
        if (
            hella_examples
            and (step % args.hellaswag_every == 0 or last_step)
            and not stop.requested()
        ):
            correct_norm, total = hellaswag_accuracy(
                eval_model, hella_examples, B, device, autocast, ddp
            )
            if master_process:
                print(
                    "HellaSwag accuracy: "
                    f"{int(correct_norm)}/{int(total)}={correct_norm / total:.4f}"
                )
                run.log(step, hella=f"{correct_norm / total:.4f}")
        sampling = (
            args.sample_every > 0 and step > 0 and (step % args.sample_every == 0 or last_step)
        )
        if sampling and not stop.requested() and master_process:
            for i, text in enumerate(
                sample(raw_model, "Hello, I'm a language model,", 4, 32, device, 42, autocast)
            ):
                print(f"sample {i}: {text!r}")
        if last_step:
            break
        # the weights after `step` steps: the checkpoint that --resume continues
        if stop.requested():
            if master_process:
                run.save_checkpoint(step, raw_model, optimizer, train_loader)
                print(f"stopped at step {step}: resume with --resume")
            break

        # ---- one optimization step
        t0 = time.time()
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss_accum = accumulate_gradients(
            model, train_loader, grad_accum_steps, device, autocast, ddp
        )
        loss = all_reduce_sum([loss_accum.item()], device, ddp)[0] / world_size
        # bounds the step a bad batch can take
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        # before the update: a NaN must not reach the weights
        stop_if_not_finite(loss, norm, step, run)
        lr = get_lr(step, args.max_lr, min_lr, args.warmup_steps, args.max_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        if device_type == "cuda":
            torch.cuda.synchronize()  # wait for the GPU, so the time below is the step's
        dt = time.time() - t0
        step_times.append(dt)
        tokens_per_sec = args.total_batch / dt

        # ---- log, and a checkpoint every checkpoint_every steps and at the end
        if master_process:
            print(
                f"step {step:5d} | loss {loss:.6f} | lr {lr:.4e} | norm {norm:.4f} | dt "
                f"{1000 * dt:.1f}ms | "
                f"tok/sec {tokens_per_sec:.0f}{mfu(tokens_per_sec)}{eta(step, dt)}"
            )
            health = {"lr": f"{lr:.4e}", "norm": f"{norm:.4f}", "tok_s": f"{tokens_per_sec:.0f}"}
            if mfu.tflops:
                health["mfu"] = f"{mfu.percent(tokens_per_sec):.1f}"
            run.log(step, train=f"{loss:.6f}", **health)  # one write a step
        if master_process and checkpoint_due(step + 1, args.checkpoint_every, args.max_steps):
            run.save_checkpoint(step + 1, raw_model, optimizer, train_loader)

    # DDP keeps the copies one model only if every rank takes the same steps: check that they did
    if ddp:
        drift = replica_drift(raw_model)
        if master_process:
            print(f"replicas differ by at most {drift:.3e}")
    if master_process and len(step_times) > 1:
        # the first step pays for compilation and warm-up
        dt = sum(step_times[1:]) / len(step_times[1:])
        print(
            f"mean step after the first: {1000 * dt:.1f}ms, {args.total_batch / dt:.0f} tok/sec"
            f"{mfu(args.total_batch / dt)}"
        )


# --------------------------------------------------------------------------------------------------
# ---- the command line


PRESETS = {
    # a small model on tiny shakespeare that learns visibly in about half a minute on one CPU core
    "cpu": dict(
        data="input.txt",
        n_layer=4,
        n_head=4,
        n_embd=128,
        batch_size=8,
        seq_len=64,
        total_batch=512,
        max_lr=3e-3,
        warmup_steps=5,
        max_steps=20,
        val_every=5,
        val_steps=4,
        hellaswag_every=0,
        sample_every=20,
        checkpoint_every=0,
        log_dir="log/cpu",
    ),
}


def parse_args(argv=None):
    p = ArgumentParser(
        description="Train GPT-2. The defaults are the 124M reproduction on FineWeb-Edu 10B."
    )
    p.add_argument(
        "--preset", choices=sorted(PRESETS), help="a named set of defaults; flags still override it"
    )
    p.add_argument(
        "--data", default="edu_fineweb10B", help="a shard folder from fineweb.py, or a text file"
    )
    p.add_argument(
        "--shuffle",
        action=BooleanOptionalAction,
        default=True,
        help="a seeded random order each epoch",
    )
    p.add_argument(
        "--pretrained",
        help="start from gpt2, gpt2-medium, ... or a transformers folder (sizes ignored)",
    )
    p.add_argument("--n-layer", type=count, default=12, help="transformer blocks")
    p.add_argument("--n-head", type=count, default=12, help="attention heads per block")
    p.add_argument("--n-embd", type=count, default=768, help="width of the residual stream")
    p.add_argument(
        "--vocab-size",
        type=count,
        default=50304,
        help="50257 padded up to a multiple of 128 for speed",
    )
    p.add_argument(
        "--batch-size", "-B", type=count, default=64, help="sequences per micro-batch per process"
    )
    p.add_argument("--seq-len", "-T", type=count, default=1024, help="tokens per sequence")
    p.add_argument(
        "--total-batch", type=count, default=524288, help="tokens per optimizer step (2**19, ~0.5M)"
    )
    p.add_argument("--max-lr", type=positive_float, default=6e-4)
    p.add_argument(
        "--min-lr-ratio",
        type=fraction,
        default=0.1,
        help="the cosine decays to this fraction of max-lr",
    )
    p.add_argument("--warmup-steps", type=whole, default=715)
    p.add_argument(
        "--max-steps",
        type=count,
        default=19073,
        help="10B tokens / 2**19 tokens per step = one epoch",
    )
    p.add_argument("--weight-decay", type=fraction, default=0.1)
    p.add_argument("--val-every", type=whole, default=250, help="0 turns validation off")
    p.add_argument("--val-steps", type=count, default=20, help="micro-batches per validation")
    p.add_argument("--hellaswag-every", type=whole, default=250, help="0 turns HellaSwag off")
    p.add_argument(
        "--hellaswag-data", help="a HellaSwag jsonl file (default: download the validation set)"
    )
    p.add_argument("--sample-every", type=whole, default=250, help="0 turns sampling off")
    p.add_argument("--checkpoint-every", type=whole, default=5000, help="0: only at the last step")
    p.add_argument(
        "--compile", action=BooleanOptionalAction, default=None, help="default: on with CUDA"
    )
    p.add_argument(
        "--dtype",
        choices=["bfloat16", "float32"],
        help="autocast dtype; default bfloat16 with CUDA",
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--seed", type=random_seed, default=1337)
    p.add_argument("--log-dir", default="log")
    p.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        help="the latest checkpoint in --log-dir, or the one given",
    )
    args, _ = p.parse_known_args(argv)
    if args.preset:
        p.set_defaults(**PRESETS[args.preset])
    args = p.parse_args(argv)
    if args.n_embd % args.n_head:
        p.error(
            f"--n-embd {args.n_embd} must be a multiple of --n-head {args.n_head}: each head gets "
            "n_embd/n_head"
        )
    if args.vocab_size < 50257:
        p.error(f"--vocab-size {args.vocab_size} is smaller than GPT-2's tokenizer (50257 tokens)")
    if args.seq_len > GPTConfig.block_size:
        p.error(
            f"--seq-len {args.seq_len} is longer than the model's block size {GPTConfig.block_size}"
        )
    return args


def main(argv=None):
    args = parse_args(argv)
    # before the loop's own handler, or a second Ctrl-C: stop now, save nothing more
    interrupted = "nothing since the last checkpoint was saved (--resume continues from it)"
    return run_job("train_gpt2.py", lambda: train(args), interrupted, finish=Console.stop)


if __name__ == "__main__":
    sys.exit(main())
