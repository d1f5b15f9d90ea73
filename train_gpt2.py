"""
Reproduce GPT-2 (124M): the model, the data, the optimizer and the training run, top to bottom.

    python train_gpt2.py --preset cpu                               # a small model on tiny shakespeare, on a laptop
    torchrun --standalone --nproc_per_node=8 train_gpt2.py          # the real run on FineWeb-Edu 10B
"""

import argparse
import glob
import math
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import tiktoken
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import hellaswag

# ------------------------------------------------------------------------------------------------------------------
# ---- model


@dataclass
class GPTConfig:
    block_size: int = 1024  # longest sequence the model reads (the number of position embeddings)
    vocab_size: int = 50257  # 50,000 BPE merges + 256 byte tokens + <|endoftext|>
    n_layer: int = 12  # transformer blocks
    n_head: int = 12  # attention heads per block
    n_embd: int = 768  # width of the residual stream


# GPT-2's four sizes, by depth: d12 is the 124M model this project reproduces
MODEL_SIZES = {
    "d12": dict(n_layer=12, n_head=12, n_embd=768),  # 124M
    "d24": dict(n_layer=24, n_head=16, n_embd=1024),  # 350M
    "d36": dict(n_layer=36, n_head=20, n_embd=1280),  # 774M
    "d48": dict(n_layer=48, n_head=25, n_embd=1600),  # 1558M
}


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # query, key, value for all heads in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.c_proj.RESIDUAL_PROJECTION = True  # adds into the residual stream: see GPT._init_weights

    def forward(self, x):
        B, T, C = x.size()  # batch, sequence length, n_embd
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        # flash attention: softmax(q k^T / sqrt(hs)) v with a causal mask, never materialising the (T, T) matrix
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
        # pre-LayerNorm: the residual stream itself is never normalised, so gradients flow straight to the input
        x = x + self.attn(self.ln_1(x))  # tokens exchange information
        x = x + self.mlp(self.ln_2(x))  # each token thinks on its own
        return x


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
        # weight tying: a token's input embedding is also its output classifier (saves 38M parameters at 124M)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            std = 0.02
            if hasattr(module, "RESIDUAL_PROJECTION"):
                # each block adds twice (attn, mlp) to the residual stream; scale so its variance stays ~constant
                std *= (2 * self.config.n_layer) ** -0.5
            torch.nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None, positions=None):
        # positions (N,), optional: logits only at these of the B*T positions (row-major), (N, vocab_size); HellaSwag
        # reads a quarter of them, and at GPT-2's vocabulary the lm_head is most of a small model's compute
        B, T = idx.size()
        assert T <= self.config.block_size, f"sequence of {T} tokens, block size is only {self.config.block_size}"
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
        """OpenAI's gpt2 / gpt2-medium / gpt2-large / gpt2-xl, or a local transformers folder, as our GPT."""
        from transformers import GPT2LMHeadModel  # optional dependency: pip install 'build-gpt2[hf]'

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
        # OpenAI's checkpoint uses a TensorFlow-style Conv1D: its weights are stored (in, out), nn.Linear wants (out, in)
        transposed = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
        for key, value in sd.items():
            hf_value = sd_hf[key]
            if key.endswith(transposed):
                hf_value = hf_value.t()
            assert hf_value.shape == value.shape, f"{key}: {tuple(hf_value.shape)} vs {tuple(value.shape)}"
            with torch.no_grad():
                value.copy_(hf_value)
        return model

    def configure_optimizers(self, weight_decay, learning_rate, device_type):
        # decay the matrices (matmul weights, embeddings); never biases or LayerNorm gains, which only shift and scale
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        # the fused kernel updates all parameters in one launch instead of one per tensor
        fused = device_type == "cuda"
        return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.95), eps=1e-8, fused=fused)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, top_k=50, generator=None):
        """Append max_new_tokens sampled tokens to idx (B, T), sampling only among the top_k most likely."""
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.config.block_size :])
            probs = F.softmax(logits[:, -1, :].float(), dim=-1)  # (B, vocab_size): only the last position
            topk_probs, topk_indices = torch.topk(probs, top_k, dim=-1)  # (B, top_k)
            choice = torch.multinomial(topk_probs, 1, generator=generator)  # (B, 1)
            idx = torch.cat((idx, torch.gather(topk_indices, -1, choice)), dim=1)
        return idx


# ------------------------------------------------------------------------------------------------------------------
# ---- data


class RunError(Exception):
    """Something the user asked for that can't be done (missing data, a bad checkpoint): one line, exit code 1."""

EOT = 50256  # <|endoftext|>: fineweb.py puts it before every document


class Shard:
    """One shard's tokens, its documents optionally in a seeded random order, read without copying the shard."""

    def __init__(self, tokens, rng=None):
        self.tokens = tokens  # uint16, usually a read-only memory map of a .npy file
        cuts = np.flatnonzero(tokens == EOT) if rng is not None else np.empty(0, dtype=np.int64)
        # documents start at each EOT; a shard can also start mid-document (fineweb.py splits at shard ends)
        starts = np.union1d([0], cuts)
        ends = np.append(starts[1:], len(tokens))
        order = rng.permutation(len(starts)) if rng is not None else np.arange(len(starts))
        self.starts, self.ends = starts[order], ends[order]
        self.offsets = np.concatenate(([0], np.cumsum(self.ends - self.starts)))  # where each document begins here

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
    """Batches of (B, T) inputs and targets from a list of token shards, each rank reading its own interleaved slice.

    The shards form one stream, epoch after epoch; a batch that runs past a shard's end continues into the next
    shard, so no token is dropped. With a seed, every epoch visits the shards, and the documents inside each shard,
    in a fresh random order: the reference's fixed order makes the loss repeat a pattern every epoch.
    """

    def __init__(self, shards, B, T, rank=0, world_size=1, seed=None):
        assert shards, "no shards"
        self.shards, self.B, self.T = shards, B, T
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.epoch, self.shard, self.offset = 0, 0, 0  # the position: this is all the state there is
        self._cache = {}  # (epoch, shard) -> Shard: the one being read and the next, for batches straddling both

    def state_dict(self):
        return {"epoch": self.epoch, "shard": self.shard, "offset": self.offset}

    def load_state_dict(self, state):
        self.epoch, self.shard, self.offset = state["epoch"], state["shard"], state["offset"]

    def reset(self):
        self.load_state_dict({"epoch": 0, "shard": 0, "offset": 0})

    def _shard_order(self, epoch):
        if self.seed is None:
            return range(len(self.shards))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.shards))  # same on every rank

    def _shard(self, epoch, i):
        k = self._shard_order(epoch)[i]
        if (epoch, k) not in self._cache:
            if len(self._cache) == 2:
                del self._cache[next(iter(self._cache))]  # the oldest
            rng = None if self.seed is None else np.random.default_rng([self.seed, epoch, k])
            self._cache[(epoch, k)] = Shard(self.shards[k], rng)
        return self._cache[(epoch, k)]

    def _locate(self, epoch, i, offset):
        """The same stream position with its offset inside its shard, carried over shard and epoch ends."""
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
        # ranks take consecutive B*T slices of the stream: rank r reads the r-th, then all move on together
        buf = self._read(self.epoch, self.shard, self.offset + self.rank * B * T, B * T + 1)
        buf = torch.from_numpy(buf.astype(np.int64))  # only the (B*T + 1,) batch becomes int64, never a shard
        x = buf[:-1].view(B, T)  # inputs
        y = buf[1:].view(B, T)  # targets: the next token at every position
        self.epoch, self.shard, self.offset = self._locate(self.epoch, self.shard, self.offset + B * T * self.world_size)
        return x, y


def load_split(data, split):
    """The token shards of a split: `*_{split}_*.npy` files of a folder made by fineweb.py, or a text file."""
    if not os.path.exists(data):
        raise RunError(f"{data} does not exist: make shards with fineweb.py, or pass --data input.txt")
    if os.path.isfile(data):
        # a plain text file (tiny shakespeare): tokenize it whole, the last 10% is the validation split
        with open(data, encoding="utf-8") as f:
            tokens = np.array(tiktoken.get_encoding("gpt2").encode_ordinary(f.read()), dtype=np.uint16)
        cut = int(0.9 * len(tokens))
        return [tokens[:cut] if split == "train" else tokens[cut:]]
    paths = sorted(glob.glob(os.path.join(data, f"*_{split}_*.npy")))
    if not paths:
        raise RunError(f"no {split} shards (*_{split}_*.npy) in {data}: run fineweb.py first, or pass --data FILE")
    shards = []
    for path in paths:
        try:
            shard = np.load(path, mmap_mode="r")  # memory-mapped: the OS pages tokens in as batches need them
        except (ValueError, OSError) as e:
            raise RunError(f"{path} is not a readable .npy shard ({e}); re-create it with fineweb.py") from None
        if shard.dtype != np.uint16 or shard.ndim != 1:
            raise RunError(f"{path} holds {shard.dtype} of shape {shard.shape}, expected a 1-D uint16 token array")
        if len(shard) == 0:
            raise RunError(f"{path} is empty; re-create it with fineweb.py")
        shards.append(shard)
    return shards


# ------------------------------------------------------------------------------------------------------------------
# ---- schedule, checkpoints, evaluation


def get_lr(step, max_lr, min_lr, warmup_steps, max_steps):
    """GPT-3's schedule: a linear warmup to max_lr, then a cosine decay to min_lr at max_steps."""
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    decay_ratio = (step - warmup_steps) / (max_steps - warmup_steps)  # 0 -> 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # 1 -> 0
    return min_lr + coeff * (max_lr - min_lr)


def checkpoint_path(log_dir, step):
    return os.path.join(log_dir, f"model_{step:05d}.pt")


def checkpoints(log_dir):
    """The checkpoints in log_dir, oldest first: the zero-padded step numbers sort as text."""
    return sorted(glob.glob(os.path.join(log_dir, "model_*.pt")))


def latest_checkpoint(log_dir):
    paths = checkpoints(log_dir)
    if not paths:
        raise RunError(f"--resume: no checkpoint (model_*.pt) in {log_dir}")
    return paths[-1]


def write_atomically(path, write, mode="wb"):
    """write(f) to a file beside path, then rename it over path: a crash leaves the old file or the new, never half."""
    tmp = path + ".tmp"
    with open(tmp, mode) as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(path, state):
    write_atomically(path, lambda f: torch.save(state, f))


def load_checkpoint(path):
    """A checkpoint written by save_checkpoint (a dict with "model", "config", "step", ...)."""
    if not os.path.isfile(path):
        raise RunError(f"no checkpoint at {path}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)  # weights_only: loading never runs code
    except Exception as e:  # torch.load fails in many ways (pickle, zip, EOF) on a file that isn't a checkpoint
        raise RunError(f"{path} is not a readable checkpoint: {str(e).splitlines()[0]}") from None
    if not (isinstance(checkpoint, dict) and "model" in checkpoint and "config" in checkpoint):
        raise RunError(f"{path} is not a train_gpt2.py checkpoint (no 'model' and 'config' entries)")
    return checkpoint


def keep_log_before(log_file, step):
    """A resumed run rewrites its log from `step` on: drop what the interrupted run logged after its checkpoint."""
    if not os.path.exists(log_file):
        return
    with open(log_file) as f:
        lines = [line for line in f if int(line.split()[0]) < step]
    write_atomically(log_file, lambda f: f.writelines(lines), mode="w")


@torch.no_grad()
def val_loss(model, loader, steps, device, autocast):
    """Mean loss over the first `steps` batches of the validation split (the same batches every time)."""
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


def sample(model, prompt, num_samples, max_length, device, seed, autocast):
    enc = tiktoken.get_encoding("gpt2")
    idx = torch.tensor(enc.encode(prompt), dtype=torch.long, device=device).repeat(num_samples, 1)  # (n, T)
    generator = torch.Generator(device=device).manual_seed(seed)  # its own generator: training's RNG is untouched
    model.eval()
    with autocast():
        out = model.generate(idx, max_length - idx.size(1), generator=generator)
    model.train()
    # the padded vocabulary's extra ids (50257..50303) are no tokens; an untrained model may still sample them
    return [enc.decode([t for t in row.tolist() if t < enc.n_vocab]) for row in out]


# peak dense bf16 throughput, for the model-FLOPs-utilisation estimate
PEAK_FLOPS = {"A100": 312e12, "H100": 989e12, "H200": 989e12}


def peak_flops(device):
    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for gpu, flops in PEAK_FLOPS.items() if gpu in name), None)


def flops_per_token(model, T):
    """Training FLOPs per token: 6 per weight (forward + backward) plus attention's (PaLM, appendix B)."""
    c = model.config
    n_params = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    return 6 * n_params + 12 * c.n_layer * c.n_embd * T


# ------------------------------------------------------------------------------------------------------------------
# ---- the run

PRESETS = {
    # a small model on tiny shakespeare that learns visibly within two minutes on two CPU cores
    "cpu": dict(
        data="input.txt", n_layer=4, n_head=4, n_embd=128, batch_size=16, seq_len=64, total_batch=1024,
        max_lr=1e-3, warmup_steps=20, max_steps=150, val_every=50, val_steps=10, hellaswag_every=0,
        sample_every=50, checkpoint_every=0, log_dir="log/cpu",
    ),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Train GPT-2. The defaults are the 124M reproduction on FineWeb-Edu 10B.")
    p.add_argument("--preset", choices=sorted(PRESETS), help="a named set of defaults; flags still override it")
    p.add_argument("--data", default="edu_fineweb10B", help="a shard folder from fineweb.py, or a text file")
    p.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=True,
                   help="visit shards and documents in a seeded random order each epoch")
    p.add_argument("--model", choices=sorted(MODEL_SIZES), default="d12", help="d12=124M d24=350M d36=774M d48=1.5B")
    p.add_argument("--n-layer", type=int, help="override the model size's depth")
    p.add_argument("--n-head", type=int, help="override the model size's head count")
    p.add_argument("--n-embd", type=int, help="override the model size's width")
    p.add_argument("--vocab-size", type=int, default=50304, help="50257 padded up to a multiple of 128 for speed")
    p.add_argument("--batch-size", "-B", type=int, default=64, help="sequences per micro-batch per process")
    p.add_argument("--seq-len", "-T", type=int, default=1024, help="tokens per sequence")
    p.add_argument("--total-batch", type=int, default=524288, help="tokens per optimizer step (2**19, ~0.5M)")
    p.add_argument("--max-lr", type=float, default=6e-4)
    p.add_argument("--min-lr-ratio", type=float, default=0.1, help="the cosine decays to this fraction of max-lr")
    p.add_argument("--warmup-steps", type=int, default=715)
    p.add_argument("--max-steps", type=int, default=19073, help="10B tokens / 2**19 tokens per step = one epoch")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--val-every", type=int, default=250, help="0 turns validation off")
    p.add_argument("--val-steps", type=int, default=20, help="micro-batches per validation")
    p.add_argument("--hellaswag-every", type=int, default=250, help="0 turns HellaSwag off")
    p.add_argument("--hellaswag-data", help="a HellaSwag jsonl file (default: download the validation set)")
    p.add_argument("--sample-every", type=int, default=250, help="0 turns sampling off")
    p.add_argument("--checkpoint-every", type=int, default=5000, help="0: only at the last step")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="default: on with CUDA")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], help="autocast dtype; default bfloat16 with CUDA")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--log-dir", default="log")
    p.add_argument("--resume", nargs="?", const="latest", help="continue from the latest checkpoint in --log-dir, "
                   "or from the checkpoint given")
    args, _ = p.parse_known_args(argv)
    if args.preset:
        p.set_defaults(**PRESETS[args.preset])
    return p.parse_args(argv)


def setup_distributed(device):
    """(ddp, rank, local_rank, world_size, device). torchrun sets RANK; a plain `python` run has no process group."""
    ddp = "RANK" in os.environ
    rank, local_rank = int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if device == "cuda":
        device = f"cuda:{local_rank}"  # one GPU per process
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    if ddp:
        dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return ddp, rank, local_rank, world_size, device


def install_stop_handler():
    """SIGTERM (a scheduler pre-empting us) or Ctrl-C: finish the step, write a checkpoint, exit cleanly."""
    stop = {"requested": False}

    def request_stop(signum, frame):
        stop["requested"] = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return stop


def all_reduce_sum(values, device, ddp):
    """Sum a list of numbers over all ranks (gloo has no AVG, so averages divide a sum)."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if ddp:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def main(argv=None):
    args = parse_args(argv)
    try:
        train(args)
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


def train(args):
    ddp, rank, local_rank, world_size, device = setup_distributed(args.device)
    master_process = rank == 0  # the one process that logs, samples and writes checkpoints
    device_type = device.split(":")[0]
    dtype = args.dtype or ("bfloat16" if device_type == "cuda" else "float32")

    def autocast():
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16, enabled=dtype == "bfloat16")

    # ---- the batch: B*T tokens per micro-step per process, accumulated up to total_batch tokens per step
    B, T = args.batch_size, args.seq_len
    if args.total_batch % (B * T * world_size) != 0:
        raise RunError(f"--total-batch {args.total_batch} is not a multiple of B*T*world_size = {B}*{T}*{world_size}")
    grad_accum_steps = args.total_batch // (B * T * world_size)

    # ---- where this run writes: a fresh run never writes over an earlier one
    log_file = os.path.join(args.log_dir, "log.txt")
    if not args.resume and (os.path.exists(log_file) or checkpoints(args.log_dir)):
        raise RunError(f"{args.log_dir} already holds a run: continue it with --resume, or choose another --log-dir")

    train_loader = DataLoaderLite(load_split(args.data, "train"), B, T, rank, world_size,
                                  seed=args.seed if args.shuffle else None)
    val_loader = DataLoaderLite(load_split(args.data, "val"), B, T, rank, world_size)
    hella_examples = None
    if args.hellaswag_every > 0:
        try:
            hella_examples = hellaswag.load_examples(args.hellaswag_data or hellaswag.download())
        except (OSError, ValueError) as e:
            raise RunError(f"HellaSwag: {e} (or turn it off with --hellaswag-every 0)") from None

    # ---- the model
    torch.manual_seed(args.seed)  # every rank starts from the same weights
    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere and newer: ~8x the float32 throughput
    config = GPTConfig(vocab_size=args.vocab_size, **MODEL_SIZES[args.model])
    config.n_layer, config.n_head, config.n_embd = (
        args.n_layer or config.n_layer, args.n_head or config.n_head, args.n_embd or config.n_embd)
    checkpoint, start_step = None, 0
    if args.resume:
        checkpoint = load_checkpoint(latest_checkpoint(args.log_dir) if args.resume == "latest" else args.resume)
        config, start_step = GPTConfig(**checkpoint["config"]), checkpoint["step"]
    if T > config.block_size:
        raise RunError(f"--seq-len {T} is longer than the model's block size {config.block_size}")
    model = GPT(config).to(device)
    optimizer = model.configure_optimizers(args.weight_decay, args.max_lr, device_type)
    if checkpoint:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        train_loader.load_state_dict(checkpoint["loader"])
        torch.set_rng_state(checkpoint["rng"])
    raw_model = model  # the plain module: for checkpoints and sampling
    if args.compile if args.compile is not None else device_type == "cuda":
        model = torch.compile(model)
    if ddp:
        model = DDP(model, device_ids=[local_rank] if device_type == "cuda" else None)
    eval_model = model.module if ddp else model  # compiled but without DDP's gradient hooks

    if master_process:
        os.makedirs(args.log_dir, exist_ok=True)
        keep_log_before(log_file, start_step)
        n_params = sum(p.numel() for p in raw_model.parameters())
        print(f"{n_params / 1e6:.2f}M parameters on {device} x{world_size} | {dtype} | grad accum {grad_accum_steps} | "
              f"steps {start_step}..{args.max_steps}" + (f" | resumed from step {start_step}" if checkpoint else ""))
    stop = install_stop_handler()
    min_lr = args.max_lr * args.min_lr_ratio
    flops_token, peak = flops_per_token(raw_model, T), peak_flops(device)
    step_times = []

    def log(line):
        with open(log_file, "a") as f:
            f.write(line + "\n")

    def mfu(tokens_per_sec):  # model FLOPs utilisation, for the printed lines; none where the peak is unknown (a CPU)
        return f" | mfu {100 * flops_token * tokens_per_sec / (peak * world_size):.1f}%" if peak else ""

    for step in range(start_step, args.max_steps + 1):
        last_step = step == args.max_steps
        # a stop asked of any rank stops them all at the same step
        stop_now = all_reduce_sum([stop["requested"]], device, ddp)[0] > 0
        if master_process and step > start_step and (stop_now or last_step or (
                args.checkpoint_every > 0 and step % args.checkpoint_every == 0)):
            save_checkpoint(checkpoint_path(args.log_dir, step), {
                "model": raw_model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "config": asdict(config), "loader": train_loader.state_dict(), "rng": torch.get_rng_state(),
                "args": vars(args),
            })
        if stop_now:
            if master_process:
                print(f"stopped at step {step}: resume with --resume")
            break

        # ---- evaluation: validation loss, HellaSwag, samples (all with the compiled model where there is one)
        if args.val_every > 0 and (step % args.val_every == 0 or last_step):
            loss = val_loss(eval_model, val_loader, args.val_steps, device, autocast)
            loss = all_reduce_sum([loss.item()], device, ddp)[0] / world_size
            if master_process:
                print(f"validation loss: {loss:.4f}")
                log(f"{step} val {loss:.4f}")
        if hella_examples and (step % args.hellaswag_every == 0 or last_step):
            with autocast():
                counts = hellaswag.evaluate(eval_model, hella_examples, device=device, batch_size=max(1, B // 4),
                                            rank=rank, world_size=world_size, fixed_shape=True)
            _, correct_norm, total = all_reduce_sum(list(counts), device, ddp)
            if master_process:
                print(f"HellaSwag accuracy: {int(correct_norm)}/{int(total)}={correct_norm / total:.4f}")
                log(f"{step} hella {correct_norm / total:.4f}")
        if master_process and args.sample_every > 0 and step > 0 and (step % args.sample_every == 0 or last_step):
            for i, text in enumerate(sample(raw_model, "Hello, I'm a language model,", 4, 32, device, 42, autocast)):
                print(f"sample {i}: {text!r}")
        if last_step:
            break

        # ---- one optimization step
        t0 = time.time()
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss_accum = torch.zeros((), device=device)
        for micro_step in range(grad_accum_steps):
            x, y = train_loader.next_batch()
            x, y = x.to(device), y.to(device)
            if ddp:
                # all-reduce gradients on the last micro-step only; set before the forward, which arms DDP's hooks
                model.require_backward_grad_sync = micro_step == grad_accum_steps - 1
            with autocast():
                _, loss = model(x, y)
            # cross_entropy averages over B*T tokens; dividing by the micro-steps makes the sum an average too
            loss = loss / grad_accum_steps
            loss_accum += loss.detach()
            loss.backward()
        loss = all_reduce_sum([loss_accum.item()], device, ddp)[0] / world_size
        if not math.isfinite(loss):
            raise RunError(f"loss is {loss} at step {step}: stopped without saving; the checkpoints in "
                           f"{args.log_dir} are from before it (try --resume with a lower --max-lr)")
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # bounds the step a bad batch can take
        lr = get_lr(step, args.max_lr, min_lr, args.warmup_steps, args.max_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        if device_type == "cuda":
            torch.cuda.synchronize()  # wait for the GPU, so the time below is the step's
        dt = time.time() - t0
        step_times.append(dt)
        tokens_per_sec = args.total_batch / dt
        if master_process:
            print(f"step {step:5d} | loss {loss:.6f} | lr {lr:.4e} | norm {norm:.4f} | dt {1000 * dt:.1f}ms | "
                  f"tok/sec {tokens_per_sec:.0f}{mfu(tokens_per_sec)}", flush=True)
            log(f"{step} train {loss:.6f}")

    if master_process and len(step_times) > 1:
        dt = sum(step_times[1:]) / len(step_times[1:])  # the first step pays for compilation and warm-up
        print(f"mean step after the first: {1000 * dt:.1f}ms, {args.total_batch / dt:.0f} tok/sec"
              f"{mfu(args.total_batch / dt)}")


if __name__ == "__main__":
    sys.exit(main())
