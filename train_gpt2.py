"""
Reproduce GPT-2 (124M): the model, the data, the optimizer and the training run, top to bottom.

    python train_gpt2.py --preset cpu                        # a small model on tiny shakespeare
    torchrun --standalone --nproc_per_node=8 train_gpt2.py   # the real run on FineWeb-Edu 10B
"""

import functools
import math
import os
import sys
import time
from argparse import BooleanOptionalAction
from dataclasses import dataclass

import numpy as np
import tiktoken
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from longrun import hellaswag_scoring
from longrun.common import ArgumentParser, UserError, batch_advice, count, loading_error
from longrun.flags import device_name, fraction, positive_float, random_seed, whole
from longrun.meters import MFU, TimeLeft
from longrun.run_folder import Console, RunFolder, load_weights, read_checkpoint
from longrun.shards import load_shard, shard_paths
from longrun.shuffle import ShuffledShards
from longrun.stopping import StopRequest, run_job, stop_if_not_finite


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
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v of all heads at once
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.c_proj.RESIDUAL_PROJECTION = True  # adds to the residual stream: GPT._init_weights

    def forward(self, x):
        B, T, C = x.size()  # batch, sequence length, n_embd
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        # flash attention: softmax(q k^T / sqrt(hs)) v, causal, never materialising the T x T matrix
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
        # pre-LayerNorm: the residual stream is never normalised; gradients flow straight through
        x = x + self.attn(self.ln_1(x))  # tokens exchange information
        x = x + self.mlp(self.ln_2(x))  # each token thinks on its own
        return x


# OpenAI's checkpoint stores these TensorFlow-style, as Conv1D (in, out); nn.Linear holds (out, in)
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
        # weight tying: a token's input embedding is also its output classifier (38M fewer at 124M)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            std = 0.02
            if hasattr(module, "RESIDUAL_PROJECTION"):
                # each block adds twice (attn, mlp) to the residual stream: keep its variance ~1
                std *= (2 * self.config.n_layer) ** -0.5
            torch.nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None, positions=None):
        # positions (N,): logits (N, vocab_size) only there; HellaSwag needs 1/4 of lm_head's work
        B, T = idx.size()
        assert T <= self.config.block_size, f"{T} tokens, block size {self.config.block_size}"
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
        """OpenAI's gpt2, gpt2-medium, gpt2-large, gpt2-xl or a transformers folder, as our GPT."""
        from transformers import GPT2LMHeadModel  # optional: pip install 'build-gpt2[hf]'

        hf_model = GPT2LMHeadModel.from_pretrained(name_or_dir)
        hf = hf_model.config  # GPTConfig's fields, in order: its n_positions is our block_size
        model = cls(GPTConfig(hf.n_positions, hf.vocab_size, hf.n_layer, hf.n_head, hf.n_embd))
        sd = model.state_dict()
        sd_hf = hf_model.state_dict()
        for key, value in sd.items():
            hf_value = sd_hf[key]
            if key.endswith(CONV1D):
                hf_value = hf_value.t()
            assert hf_value.shape == value.shape, key
            with torch.no_grad():
                value.copy_(hf_value)
        return model

    @classmethod
    def from_checkpoint(cls, path):
        """Our GPT, with the weights of a checkpoint that train_gpt2.py wrote (log/model_N.pt)."""
        checkpoint = read_checkpoint(path)
        try:
            config = GPTConfig(**checkpoint["config"])
        except TypeError as e:
            raise UserError(f"{path}: its config does not fit GPTConfig ({e})") from None
        model = cls(config)
        load_weights(model, checkpoint["model"], path)
        return model

    def configure_optimizers(self, weight_decay, learning_rate, device_type):
        # decay the matrices (matmuls, embeddings), never biases or LayerNorm gains (shift, scale)
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        # fused: the AdamW update in one kernel; CUDA's default (foreach) runs one per operation
        fused = device_type == "cuda"
        return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.95), eps=1e-8, fused=fused)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, top_k=50, generator=None):
        """Append max_new_tokens tokens to idx (B, T), each sampled among the top_k most likely."""
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.config.block_size :])
            probs = F.softmax(logits[:, -1, :].float(), dim=-1)  # (B, vocab_size): last position
            topk_probs, topk_indices = torch.topk(probs, top_k, dim=-1)  # (B, top_k)
            choice = torch.multinomial(topk_probs, 1, generator=generator)  # (B, 1)
            idx = torch.cat((idx, torch.gather(topk_indices, -1, choice)), dim=1)
        return idx


# ---- devices and processes: one process per GPU, one rank each
def pick_device(device):
    """'auto' -> cuda, then mps (Apple silicon), then cpu; a named device is taken as it is."""
    if device != "auto":
        return device
    if torch.cuda.is_available():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else "cpu"


def setup_distributed(device):
    """(ddp, rank, local_rank, world_size, device): torchrun sets RANK, a plain `python` run not."""
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
        if 1 < gpus <= local_rank:  # two processes on one GPU: NCCL would refuse it, less clearly
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


# ---- data
class DataLoaderLite:
    """Batches of (B, T) inputs and targets from token shards, each rank reading its own slice.

    The shards are one stream, epoch after epoch: a batch that runs past a shard's end continues
    into the next, so no token is dropped. With a seed, each epoch visits the shards, and the
    documents in each, in a fresh random order: a fixed order makes the loss repeat a pattern.
    """

    def __init__(self, shards, B, T, rank=0, world_size=1, seed=None):
        assert shards and all(len(shard) for shard in shards), "empty shards"
        self.shards, self.B, self.T = shards, B, T
        self.rank, self.world_size = rank, world_size
        self.stream = ShuffledShards(shards, seed)  # each epoch's order
        self.epoch, self.shard, self.offset = 0, 0, 0  # the position: all the state there is

    def state_dict(self):
        return {"epoch": self.epoch, "shard": self.shard, "offset": self.offset}

    def load_state_dict(self, state):
        self.epoch, self.shard, self.offset = state["epoch"], state["shard"], state["offset"]

    def reset(self):
        self.load_state_dict({"epoch": 0, "shard": 0, "offset": 0})

    def _locate(self, epoch, i, offset):
        """The same stream position, its offset carried over shard and epoch ends into its shard."""
        while offset >= (n := self.stream.length(epoch, i)):
            offset -= n
            epoch, i = (epoch, i + 1) if i + 1 < len(self.shards) else (epoch + 1, 0)
        return epoch, i, offset

    def _read(self, epoch, i, offset, n):
        """n tokens of the stream from (epoch, shard i, offset) on."""
        parts = []
        while n > 0:
            epoch, i, offset = self._locate(epoch, i, offset)
            parts.append(self.stream.shard(epoch, i).read(offset, n))
            n -= len(parts[-1])
            offset += len(parts[-1])
        return np.concatenate(parts)

    def next_batch(self):
        B, T = self.B, self.T
        # ranks take consecutive B*T slices of the stream: rank r reads the r-th, then all move on
        buf = self._read(self.epoch, self.shard, self.offset + self.rank * B * T, B * T + 1)
        buf = torch.from_numpy(buf.astype(np.int64))  # only the batch becomes int64, never a shard
        x = buf[:-1].view(B, T)  # inputs
        y = buf[1:].view(B, T)  # targets: the next token at every position
        self.epoch, self.shard, self.offset = self._locate(
            self.epoch, self.shard, self.offset + B * T * self.world_size
        )
        return x, y


@functools.cache  # both splits of a text file come from one read
def text_tokens(path):
    """A text file's GPT-2 tokens, read and tokenized once however many splits ask for them."""
    with open(path, encoding="utf-8") as f:
        return np.array(tiktoken.get_encoding("gpt2").encode_ordinary(f.read()), dtype=np.uint16)


def load_split(data, split, min_tokens):
    """The shards of a split: a folder's `*_{split}_NNNNNN.npy` (from fineweb.py), or a text file;
    at least min_tokens (a batch for every rank), or its batches would repeat tokens within."""
    if os.path.isfile(data):
        # a text file (tiny shakespeare), tokenized whole: its last 10% is the validation split
        try:
            tokens = text_tokens(data)
        except UnicodeDecodeError as e:
            raise UserError(f"{data} is not UTF-8 text ({e.reason} at byte {e.start})") from None
        cut = int(0.9 * len(tokens))
        shards = [tokens[:cut] if split == "train" else tokens[cut:]]
    else:
        shards = [load_shard(path) for path in shard_paths(data, split)]
    if (n := sum(map(len, shards))) < min_tokens:
        raise UserError(
            f"the {split} split of {data} holds {n:,} tokens, fewer than one batch for every rank "
            f"(B*T*processes + 1 = {min_tokens:,}): lower -B or -T, or add data"
        )
    return shards


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
    """Mean loss over the first `steps` batches of the validation split, the same every time."""
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
    idx = torch.tensor([enc.encode(prompt)] * num_samples, device=device)  # (n, T)
    generator = torch.Generator(device=device).manual_seed(seed)  # training's RNG is untouched
    model.eval()
    with autocast():
        out = model.generate(idx, max_length - idx.size(1), top_k=top_k, generator=generator)
    model.train()
    # the padded vocabulary's extra ids (50257..50303) are no tokens; an untrained model picks them
    return [enc.decode([t for t in row.tolist() if t < enc.n_vocab]) for row in out]


def hellaswag_accuracy(model, examples, B, device, autocast, ddp):
    """(correct by acc_norm, total): each rank scores every world_size-th example, B/4 at a time
    (4 endings each: B rows), padded to one fixed shape so that a compiled model compiles once."""
    share = dict(rank=dist.get_rank(), world_size=dist.get_world_size()) if ddp else {}
    with autocast():
        counts = hellaswag_scoring.evaluate(
            model, examples, device=device, batch_size=B // 4 or 1, fixed_shape=True, **share
        )
    _, correct_norm, total = all_reduce_sum(list(counts), device, ddp)
    return correct_norm, total


# ---- the run
def precision(flag, device_type):
    """(dtype, autocast): --dtype's, else bfloat16 on a CUDA GPU and float32 elsewhere; autocast is
    a context for each forward, in bfloat16 or, for float32, no autocast at all."""
    dtype = flag or ("bfloat16" if device_type == "cuda" else "float32")
    return dtype, lambda: torch.autocast(device_type, torch.bfloat16, enabled=dtype == "bfloat16")


def compile_on(args, device_type):
    """Whether the model is compiled: --compile or --no-compile, else on with CUDA only."""
    return device_type == "cuda" if args.compile is None else args.compile


def load_model(pretrained=None, checkpoint=None, config=None):
    """Our GPT from our checkpoint, OpenAI's weights (name or folder), or new in config's shape."""
    if checkpoint:
        return GPT.from_checkpoint(checkpoint)
    if not pretrained:
        return GPT(config)
    try:
        return GPT.from_pretrained(pretrained)
    except Exception as e:  # a one-line error, unless it is a bug
        raise loading_error(e, pretrained) from None


def accumulate_gradients(model, loader, grad_accum_steps, device, autocast, ddp):
    """One step's micro-steps, their gradients adding up: this rank's mean loss over them."""
    loss_accum = torch.zeros((), device=device)
    for micro_step in range(grad_accum_steps):
        x, y = loader.next_batch()
        x, y = x.to(device), y.to(device)
        if ddp:
            # all-reduce gradients on the last micro-step only; set before the forward arms DDP
            model.require_backward_grad_sync = micro_step == grad_accum_steps - 1
        with autocast():
            _, loss = model(x, y)
        # cross_entropy averages over B*T tokens; dividing makes the micro-steps' sum an average too
        loss = loss / grad_accum_steps
        loss_accum += loss.detach()
        loss.backward()
    return loss_accum


def micro_steps(total_batch, B, T, world_size, max_steps, resuming=False):
    """How many B*T micro-batches each of world_size processes adds up to make total_batch tokens a
    step; if none does, an error that says which flags would (longrun/common.py)."""
    tokens = B * T * world_size  # one micro-step of all processes
    if total_batch % tokens:
        raise UserError(batch_advice(total_batch, B, T, world_size, max_steps, resuming))
    return total_batch // tokens


def load_hellaswag(args):
    try:
        return hellaswag_scoring.load_examples(args.hellaswag_data or hellaswag_scoring.download())
    except UserError as e:
        msg = "or pass --hellaswag-data FILE, or turn it off with --hellaswag-every 0"
        raise UserError(f"HellaSwag: {e} ({msg})") from None


def checkpoint_due(step, every, max_steps):
    return step == max_steps or (every > 0 and step % every == 0)


def train(args):
    ddp, rank, local_rank, world_size, device = setup_distributed(args.device)
    master_process = rank == 0  # the one process that logs, samples and writes checkpoints
    device_type = device.split(":")[0]
    dtype, autocast = precision(args.dtype, device_type)

    # ---- the batch: B*T tokens a micro-step a process, accumulated up to total_batch a step
    B, T = args.batch_size, args.seq_len
    grad_accum_steps = micro_steps(
        args.total_batch, B, T, world_size, args.max_steps, bool(args.resume)
    )

    # ---- the data, and the folder this run writes (a fresh run never writes over another)
    min_tokens = B * T * world_size + 1  # one batch for every rank
    seed = args.seed if args.shuffle else None
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
    if finished := run.finished():  # its last evaluation and samples are in its logs already
        if master_process:
            print(f"{run.dir}: the run is done: {finished}")
        return

    # ---- the model
    torch.manual_seed(args.seed)
    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere and newer: ~8x float32's
    config = GPTConfig(
        vocab_size=args.vocab_size, n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd
    )
    model = load_model(pretrained=args.pretrained, config=config).to(device)
    optimizer = model.configure_optimizers(args.weight_decay, args.max_lr, device_type)
    start_step = run.restore(model, optimizer, train_loader)
    raw_model = model  # the plain module: for checkpoints and sampling
    if compile_on(args, device_type):
        # dynamic=False: each shape (validation, HellaSwag, training) gets code of its own; else a
        # size that changed becomes a variable, and the training step runs code made for any length
        model = torch.compile(model, dynamic=False)
    if ddp:
        model = DDP(model, device_ids=[local_rank] if device_type == "cuda" else None)
    eval_model = model.module if ddp else model  # compiled but without DDP's gradient hooks

    min_lr = args.max_lr * args.min_lr_ratio
    mfu = MFU(raw_model, T, device, world_size)
    if master_process:
        n_params = sum(p.numel() for p in raw_model.parameters())
        print(
            f"{n_params / 1e6:.2f}M parameters on {device} x{world_size} | {dtype} | grad accum "
            f"{grad_accum_steps} | steps {start_step}..{args.max_steps}"
            + (f" | resumed from step {start_step}" if start_step else "")
        )
        print(mfu.basis())  # what MFU is measured against
    stop = StopRequest(device, ddp, master_process)  # SIGTERM, SIGHUP, Ctrl-C: end the step, save
    step_times, eta = [], TimeLeft(args.max_steps)

    def due(every, step):
        # an evaluation starts only if no rank was asked to stop: a scheduler's grace period between
        # SIGTERM and SIGKILL (30 s under torchrun) can be shorter than an evaluation
        return every > 0 and (step % every == 0 or step == args.max_steps) and not stop.requested()

    for step in range(start_step, args.max_steps + 1):
        last_step = step == args.max_steps

        # ---- evaluation: val loss and HellaSwag on the compiled model, samples on the plain one
        if due(args.val_every, step):
            loss = val_loss(eval_model, val_loader, args.val_steps, device, autocast)
            loss = all_reduce_sum([loss.item()], device, ddp)[0] / world_size
            if master_process:
                print(f"validation loss: {loss:.4f}")
                run.log(step, val=f"{loss:.4f}")
        if hella_examples and due(args.hellaswag_every, step):
            correct, total = hellaswag_accuracy(
                eval_model, hella_examples, B, device, autocast, ddp
            )
            if master_process:
                print(f"HellaSwag accuracy: {int(correct)}/{int(total)}={correct / total:.4f}")
                run.log(step, hella=f"{correct / total:.4f}")
        if step > 0 and due(args.sample_every, step) and master_process:
            texts = sample(raw_model, "Hello, I'm a language model,", 4, 32, device, 42, autocast)
            for i, text in enumerate(texts):
                print(f"sample {i}: {text!r}")
        if last_step:
            break
        if stop.requested():  # the weights after `step` steps: the checkpoint --resume continues
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
        loss = all_reduce_sum([loss_accum.item()], device, ddp)[0] / world_size  # all ranks' mean
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # bounds a bad batch's step
        stop_if_not_finite(loss, norm, step, run)  # before the update: no NaN reaches the weights
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
            run.log_step(step, loss, lr, norm, tokens_per_sec, mfu)  # one write a step
        if master_process and checkpoint_due(step + 1, args.checkpoint_every, args.max_steps):
            run.save_checkpoint(step + 1, raw_model, optimizer, train_loader)

    if ddp:  # DDP keeps the copies one model only if every rank takes the same steps: check it
        drift = replica_drift(raw_model)
        if master_process:
            print(f"replicas differ by at most {drift:.3e}")
    if master_process and len(step_times) > 1:
        dt = sum(step_times[1:]) / len(step_times[1:])  # the first pays for compiling, warming up
        tok_s = args.total_batch / dt
        print(f"mean step after the first: {1000 * dt:.1f}ms, {tok_s:.0f} tok/sec{mfu(tok_s)}")


# ---- the command line
PRESETS = {
    # a small model on tiny shakespeare that learns visibly in about half a minute on one CPU core
    "cpu": dict(data="input.txt", n_layer=4, n_head=4, n_embd=128, batch_size=8, seq_len=64)
    | dict(total_batch=512, max_lr=3e-3, warmup_steps=5, max_steps=20, val_every=5, val_steps=4)
    | dict(hellaswag_every=0, sample_every=20, checkpoint_every=0, log_dir="log/cpu"),
}


def parse_args(argv=None):
    p = ArgumentParser(description="Train GPT-2; the defaults are the 124M run on FineWeb-Edu 10B.")
    add = p.add_argument
    add("--preset", choices=sorted(PRESETS), help="a named set of defaults; flags override it")
    add("--data", default="edu_fineweb10B", help="a shard folder from fineweb.py, or a text file")
    add("--shuffle", action=BooleanOptionalAction, default=True, help="a seeded order per epoch")
    add("--pretrained", help="gpt2, gpt2-medium, ... or a transformers folder (sizes ignored)")
    add("--n-layer", type=count, default=12, help="transformer blocks")
    add("--n-head", type=count, default=12, help="attention heads per block")
    add("--n-embd", type=count, default=768, help="width of the residual stream")
    add("--vocab-size", type=count, default=50304, help="50257, padded to a multiple of 128")
    add("--batch-size", "-B", type=count, default=64, help="sequences per micro-batch per process")
    add("--seq-len", "-T", type=count, default=1024, help="tokens per sequence")
    add("--total-batch", type=count, default=524288, help="tokens per step (2**19, ~0.5M)")
    add("--max-lr", type=positive_float, default=6e-4)
    add("--min-lr-ratio", type=fraction, default=0.1, help="min lr as a fraction of max-lr")
    add("--warmup-steps", type=whole, default=715)
    add("--max-steps", type=count, default=19073, help="10B / 2**19 tokens a step: one epoch")
    add("--weight-decay", type=fraction, default=0.1)
    add("--val-every", type=whole, default=250, help="0 turns validation off")
    add("--val-steps", type=count, default=20, help="micro-batches per validation")
    add("--hellaswag-every", type=whole, default=250, help="0 turns HellaSwag off")
    add("--hellaswag-data", help="a HellaSwag jsonl file (default: download the validation set)")
    add("--sample-every", type=whole, default=250, help="0 turns sampling off")
    add("--checkpoint-every", type=whole, default=5000, help="0: only at the last step")
    add("--compile", action=BooleanOptionalAction, default=None, help="default: on with CUDA")
    add("--dtype", choices=["bfloat16", "float32"], help="default: bfloat16 with CUDA")
    add("--device", type=device_name, default="auto", help="auto, cpu, cuda, cuda:N or mps")
    add("--seed", type=random_seed, default=1337)
    add("--log-dir", default="log")
    add("--resume", nargs="?", const="latest", help="the last checkpoint in --log-dir, or this one")
    args, _ = p.parse_known_args(argv)
    if args.preset:
        p.set_defaults(**PRESETS[args.preset])
    args = p.parse_args(argv)
    if args.n_embd % args.n_head:
        p.error(f"--n-embd {args.n_embd} must be a multiple of --n-head {args.n_head}")
    if args.vocab_size < 50257:
        p.error(f"--vocab-size {args.vocab_size} is smaller than GPT-2's tokenizer (50257 tokens)")
    if args.seq_len > GPTConfig.block_size:
        p.error(f"--seq-len {args.seq_len} is longer than the block size {GPTConfig.block_size}")
    return args


def main(argv=None):
    args = parse_args(argv)
    # before the loop's own handler, or a second Ctrl-C: stop now, save nothing more
    interrupted = "nothing since the last checkpoint was saved (--resume continues from it)"
    return run_job("train_gpt2.py", lambda: train(args), interrupted, finish=Console.stop)


if __name__ == "__main__":
    sys.exit(main())
