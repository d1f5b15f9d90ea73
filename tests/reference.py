"""
THE ORACLE: the GPT-2 reproduction lecture's own implementations, written from the lecture's
description.

Tests compare our code against these; benchmarks time ours against them. They are the
straightforward way on purpose (one example per forward pass, one document per pool task): change
them only to match the lecture better, never to match our code. Never import this module from the
product (train_gpt2.py, fineweb.py, hellaswag.py, ...).
"""

import multiprocessing as mp
from pathlib import Path

import numpy as np
import tiktoken
import torch
from datasets import load_dataset
from torch.nn import functional as F

enc = tiktoken.get_encoding("gpt2")  # at import, as in the lecture: forked pool workers inherit it

# ---- hellaswag.py: one example per forward pass


@torch.no_grad()
def lecture_losses(model, example):
    """One example's 4 rows, padded to its longest, in a forward pass of their own; the loss at
    every position, masked to the ending's tokens. Returns each ending's summed loss and mean
    loss, both (4,)."""
    ctx = enc.encode(example["ctx"])
    rows = [ctx + enc.encode(" " + ending) for ending in example["endings"]]
    T = max(len(row) for row in rows)
    tokens = torch.zeros((4, T), dtype=torch.long)
    mask = torch.zeros((4, T))
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row)
        mask[i, len(ctx) : len(row)] = 1
    logits, _ = model(tokens)  # (4, T, vocab_size)
    losses = F.cross_entropy(
        logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none"
    ).view(4, -1)
    losses = losses * mask[:, 1:]  # (4, T-1)
    return losses.sum(1), losses.sum(1) / mask[:, 1:].sum(1)


def lecture_predictions(model, examples):
    """(lowest summed loss, lowest mean loss) per example: the lecture's acc
    and acc_norm choices."""
    return [
        (int(s.argmin()), int(m.argmin()))
        for s, m in (lecture_losses(model, ex) for ex in examples)
    ]


# ---- fineweb.py: a process pool encoding one document per task, shards filled in the loop


def lecture_tokenize(doc: dict) -> np.ndarray:
    tokens = [enc.eot_token]
    tokens.extend(enc.encode_ordinary(doc["text"]))
    tokens_np = np.array(tokens)
    assert (0 <= tokens_np).all() and (tokens_np < 2**16).all(), (
        "token dictionary too large for uint16"
    )
    return tokens_np.astype(np.uint16)


def lecture_shards(corpus: Path, out: Path, workers: int, shard_size: int) -> int:
    """The lecture's fineweb.py loop, with its dataset and folder swapped for ours. Returns
    the tokens written."""
    fw = load_dataset("json", data_files=[str(corpus)], split="train")
    out.mkdir(parents=True)
    total = 0
    with mp.Pool(workers) as pool:
        shard_index, all_tokens_np, token_count = 0, np.empty((shard_size,), dtype=np.uint16), 0
        for tokens in pool.imap(lecture_tokenize, fw, chunksize=16):
            total += len(tokens)
            if token_count + len(tokens) < shard_size:
                all_tokens_np[token_count : token_count + len(tokens)] = tokens
                token_count += len(tokens)
            else:
                split = "val" if shard_index == 0 else "train"
                remainder = shard_size - token_count
                all_tokens_np[token_count : token_count + remainder] = tokens[:remainder]
                np.save(out / f"edufineweb_{split}_{shard_index:06d}", all_tokens_np)
                shard_index += 1
                all_tokens_np[0 : len(tokens) - remainder] = tokens[remainder:]
                token_count = len(tokens) - remainder
        if token_count != 0:
            split = "val" if shard_index == 0 else "train"
            np.save(out / f"edufineweb_{split}_{shard_index:06d}", all_tokens_np[:token_count])
    return total
