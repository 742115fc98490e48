"""Paged KV cache (vLLM's PagedAttention, Kwon et al. 2023, arXiv 2309.06180).

Keys and values live in a pool of fixed-size physical blocks of ``block_size`` tokens. Each
sequence owns a block table: logical block i of the sequence is physical block table[i]. Blocks
are reference-counted, so sequences can share a prefix (parallel sampling, beam search); writing
into a shared block first copies it (copy-on-write). A free list hands out blocks; running out is
a clear error that changes nothing already allocated.

    pool k/v: [n_blocks, L, Hkv, block_size, D]
    seq 0 table: [5, 2, 7]      tokens 0…(3·bs − 1) live in blocks 5, 2, 7 (any order)
    seq 1 table: [5, 9]         shares block 5 (refcount 2) with seq 0

Attention gathers a sequence's blocks into contiguous [1, Hkv, T, D] keys and values, so its
output is the contiguous cache's, bit for bit.
"""

from __future__ import annotations

import torch

from .errors import InputError
from .validate import as_int


class OutOfBlocks(RuntimeError):
    """The pool has no free block; nothing already allocated was freed or changed."""


class PagedKVCache:
    def __init__(
        self,
        n_blocks: int,
        block_size: int,
        n_layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device=None,
    ):
        n_blocks, block_size, n_layers, kv_heads, head_dim = (
            as_int(x, name)
            for x, name in (
                (n_blocks, "n_blocks"),
                (block_size, "block_size"),
                (n_layers, "n_layers"),
                (kv_heads, "kv_heads"),
                (head_dim, "head_dim"),
            )
        )
        if min(n_blocks, block_size, n_layers, kv_heads, head_dim) < 1:
            raise InputError(
                f"PagedKVCache sizes must be >= 1, got blocks={n_blocks} block_size={block_size} "
                f"layers={n_layers} kv_heads={kv_heads} head_dim={head_dim}"
            )
        self.block_size, self.n_layers = block_size, n_layers
        shape = (n_blocks, n_layers, kv_heads, block_size, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.refcount = [0] * n_blocks
        self.free = list(range(n_blocks - 1, -1, -1))  # pop() hands out block 0 first
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    # ---------------------------------------------------------------- allocation

    def _take(self) -> int:
        if not self.free:
            raise OutOfBlocks(
                f"the pool's {len(self.refcount)} blocks of {self.block_size} tokens are all in use; "
                "free a sequence or make a larger pool"
            )
        b = self.free.pop()
        self.refcount[b] = 1
        return b

    def _release(self, b: int) -> None:
        self.refcount[b] -= 1
        if self.refcount[b] == 0:
            self.free.append(b)

    def _known(self, seq: int) -> None:
        if seq not in self.tables:
            raise InputError(f"unknown sequence id {seq!r}; known: {sorted(self.tables)} (add_sequence first)")

    def add_sequence(self, seq: int) -> None:
        if seq in self.tables:
            raise InputError(f"sequence {seq} already exists")
        self.tables[seq], self.lengths[seq] = [], 0

    def fork(self, parent: int, child: int) -> None:
        """child shares all of parent's blocks (refcounts rise); writes copy on demand."""
        self._known(parent)
        if child in self.tables:
            raise InputError(f"sequence {child} already exists")
        self.tables[child] = list(self.tables[parent])
        self.lengths[child] = self.lengths[parent]
        for b in self.tables[child]:
            self.refcount[b] += 1

    def free_sequence(self, seq: int) -> None:
        self._known(seq)
        for b in self.tables.pop(seq):
            self._release(b)
        del self.lengths[seq]

    def blocks_needed(self, seq: int, new_tokens: int) -> int:
        """Fresh blocks an append would take (new blocks plus a copy of a shared last block)."""
        n, bs = self.lengths[seq], self.block_size
        table = self.tables[seq]
        need = -(-(n + new_tokens) // bs) - len(table)
        if n % bs and new_tokens and self.refcount[table[-1]] > 1:
            need += 1  # copy-on-write of the partly filled shared block
        return need

    # ---------------------------------------------------------------- writing and reading

    def append(self, seq: int, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write k/v [Hkv, T_new, D] of ``layer`` after the sequence's tokens. Call for every layer,
        then ``advance(seq, T_new)``; blocks are reserved on the layer-0 call. Shapes are checked
        before anything is reserved, so a bad append takes no block."""
        self._known(seq)
        layer = as_int(layer, "layer", minimum=0)
        if layer >= self.n_layers:
            raise InputError(f"layer must be in [0, {self.n_layers}), got {layer}")
        Hkv, D = self.k.shape[2], self.k.shape[4]
        for name, t in (("k", k), ("v", v)):
            if t.dim() != 3 or t.shape[0] != Hkv or t.shape[2] != D or t.shape[1] != k.shape[1]:
                raise InputError(f"{name} must be [Hkv, T_new, D] = [{Hkv}, T_new, {D}], got {list(t.shape)}")
        T_new = k.shape[1]
        n, bs = self.lengths[seq], self.block_size
        if layer == 0:
            self._reserve(seq, T_new)
        pos = torch.arange(n, n + T_new)
        blk = torch.tensor(self.tables[seq], dtype=torch.long)[pos // bs]  # (T_new,) physical block per token
        self.k[blk, layer, :, pos % bs] = k.transpose(0, 1).to(self.k.dtype)  # (T_new, Hkv, D)
        self.v[blk, layer, :, pos % bs] = v.transpose(0, 1).to(self.v.dtype)

    def _reserve(self, seq: int, T_new: int) -> None:
        need = self.blocks_needed(seq, T_new)
        if need > len(self.free):  # check first: failing halfway would leave a half-grown table
            raise OutOfBlocks(
                f"sequence {seq} needs {need} more blocks of {self.block_size} tokens, "
                f"{len(self.free)} are free; nothing was allocated"
            )
        n, bs, table = self.lengths[seq], self.block_size, self.tables[seq]
        if n % bs and T_new and self.refcount[table[-1]] > 1:  # copy-on-write
            old, new = table[-1], self._take()
            self.k[new], self.v[new] = self.k[old], self.v[old]
            self._release(old)
            table[-1] = new
        while len(table) * bs < n + T_new:
            table.append(self._take())

    def advance(self, seq: int, T_new: int) -> None:
        self.lengths[seq] += T_new

    def gather(self, seq: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's keys and values for ``layer``: [1, Hkv, T, D] each, contiguous."""
        self._known(seq)
        n, table = self.lengths[seq], self.tables[seq]
        idx = torch.tensor(table, dtype=torch.long, device=self.k.device)
        k = self.k[idx, layer]  # (n_blk, Hkv, bs, D)
        v = self.v[idx, layer]
        k = k.permute(1, 0, 2, 3).reshape(k.shape[1], -1, k.shape[-1])[:, :n]  # (Hkv, T, D)
        v = v.permute(1, 0, 2, 3).reshape(v.shape[1], -1, v.shape[-1])[:, :n]
        return k[None], v[None]  # (1, Hkv, T, D)

    # ---------------------------------------------------------------- accounting

    def used_blocks(self) -> int:
        return sum(1 for r in self.refcount if r > 0)


class PagedView:
    """A batch of sequences of a PagedKVCache seen through the contiguous KVCache interface
    (``append(layer, k, v)`` -> all keys/values so far, ``length(layer)``), so TinyTransformer and
    MultiHeadAttention decode from pages unchanged. Sequences in a view advance together."""

    def __init__(self, cache: PagedKVCache, seqs: list[int]):
        self.cache, self.seqs = cache, list(seqs)
        for s in self.seqs:
            if s not in cache.tables:
                cache.add_sequence(s)

    def length(self, layer: int = 0) -> int:
        return self.cache.lengths[self.seqs[0]]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """k/v [B, Hkv, T_new, D] -> gathered [B, Hkv, T, D]."""
        if layer == 0:  # reserve for the whole batch first, so running out changes nothing
            need = sum(self.cache.blocks_needed(s, k.shape[2]) for s in self.seqs)
            if need > len(self.cache.free):
                raise OutOfBlocks(
                    f"the batch needs {need} more blocks, {len(self.cache.free)} are free; nothing was allocated"
                )
        for i, s in enumerate(self.seqs):
            self.cache.append(s, layer, k[i], v[i])
        if layer == self.cache.n_layers - 1:
            for s in self.seqs:
                self.cache.advance(s, k.shape[2])
            return self._gather_all(layer, extra=0)
        return self._gather_all(layer, extra=k.shape[2])

    def _gather_all(self, layer: int, extra: int):
        ks, vs = [], []
        for s in self.seqs:
            n = self.cache.lengths[s]
            self.cache.lengths[s] = n + extra  # the new tokens are written but not yet advanced
            k, v = self.cache.gather(s, layer)
            self.cache.lengths[s] = n
            ks.append(k)
            vs.append(v)
        return torch.cat(ks), torch.cat(vs)
