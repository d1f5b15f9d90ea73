"""fineweb.py's token shards as train_gpt2.py reads them: a split's files, found and checked."""

import os
import re

import numpy as np

from longrun.common import UserError
from longrun.manifest import check_shard_folder

# fineweb.py's names: PREFIX_val_000000.npy, PREFIX_train_000001.npy
SHARD = re.compile(r".+_(train|val)_\d+\.npy")


def shard_paths(folder, split):
    """The shards of one split in a folder, in order: listed, not globbed, so that a folder's name
    is never a pattern; the split is read from a name's end, so that a prefix may hold `_train_`."""
    if not os.path.exists(folder):
        raise UserError(
            f"{folder} does not exist: make shards with fineweb.py, or pass --data input.txt"
        )
    check_shard_folder(folder)
    names = [name for name in os.listdir(folder) if (m := SHARD.fullmatch(name)) and m[1] == split]
    if not names:
        raise UserError(
            f"no {split} shards (*_{split}_NNNNNN.npy) in {folder}: "
            "run fineweb.py first, or pass a text file"
        )
    return [os.path.join(folder, name) for name in sorted(names)]


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
