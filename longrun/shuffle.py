"""One shard's documents in a seeded random order, read without copying the shard: the view of
a shard that train_gpt2.py's DataLoaderLite reads through when it shuffles (--shuffle)."""

import numpy as np

from longrun.common import EOT, UserError


class Shard:
    """One shard's tokens, its documents optionally in a seeded random order, read without copying
    the shard."""

    def __init__(self, tokens, rng=None):
        self.tokens = tokens  # uint16, usually a read-only memory map of a .npy file
        # an id past <|endoftext|> is no GPT-2 token: the shard is damaged
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


class ShuffledShards:
    """A split's shards in each epoch's order, each shard's documents shuffled too; without a seed,
    in file order. An order is computed from (seed, epoch, shard), never drawn from a generator that
    runs along: every rank computes the same one, and a resumed run continues it."""

    def __init__(self, shards, seed=None):
        self.shards, self.seed = shards, seed
        self._cache = {}  # (epoch, shard) -> Shard: the last two read, for batches across both

    def order(self, epoch):
        if self.seed is None:
            return range(len(self.shards))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.shards))

    def length(self, epoch, i):
        """The length of epoch's i-th shard."""
        return len(self.shards[self.order(epoch)[i]])

    def shard(self, epoch, i):
        """Epoch's i-th shard, its documents in their order for that epoch."""
        k = self.order(epoch)[i]
        if (epoch, k) not in self._cache:
            if len(self._cache) == 2:
                del self._cache[next(iter(self._cache))]  # the oldest
            rng = None if self.seed is None else np.random.default_rng([self.seed, epoch, k])
            self._cache[(epoch, k)] = Shard(self.shards[k], rng)
        return self._cache[(epoch, k)]
