"""The block manager of a paged KV cache: fixed-size blocks, per-sequence block tables,
prefix caching.

The cache holds `num_blocks` blocks of `block_size` token positions. A sequence owns a
block table — the ids of its blocks in order — so position p lives in slot
`table[p // block_size] * block_size + p % block_size` (the slot mapping the paged KV write
scatters through, and the table the paged decode attention reads).

Prefix caching: a *full* block whose KV has been computed (`computed(seq, n)`, called by
the scheduler after the step that wrote it) is named by the hash of (its parent block's
name, its token ids), so two prompts that start with the same tokens name the same blocks;
a block is never shared before its contents exist. Allocating a
prompt takes each of its leading full blocks from the cache when a block of that name and
those tokens is there (a hit shares it: its reference count grows), and a fresh block
otherwise. A block whose count drops to 0 keeps its contents and its name: it waits in the
free queue, least recently used first, and is reused by name until a fresh block is needed
and it is the oldest (eviction drops its name). Blocks that never held a full named block
are handed out before any named one. Only full blocks are shared, and a sequence writes
only into its last, unfilled block, so no block anyone shares is ever written.

At least the last prompt token is always computed (its logits sample the next token), so a
prompt's hits stop before the block holding its last token.

Pure Python, no tensors: the scheduler asks `can_allocate` / `can_append` first and then
allocates; asking for more than is free raises `BlockManagerError`.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from ..errors import TileSafeError, caller_loc


class BlockManagerError(TileSafeError):
    """A block request the cache cannot serve (out of blocks, unknown or repeated sequence)."""


@dataclass(slots=True)
class _Block:
    id: int
    ref_count: int = 0
    name: int | None = None            # hash of (parent name, tokens) once full and named
    tokens: tuple[int, ...] = ()       # the tokens of a named block (a hash hit is checked against them)


@dataclass(slots=True)
class _Seq:
    blocks: list[int] = field(default_factory=list)    # the block table
    tokens: list[int] = field(default_factory=list)    # every token whose KV has a slot
    names: list[int] = field(default_factory=list)     # names of the full, computed blocks, in order


@dataclass(frozen=True, slots=True)
class BlockStats:
    """Counts for metrics: blocks in use, free (of which named, i.e. reusable by a hit),
    and prefix-cache lookups since the manager was made."""
    total: int
    used: int
    free: int
    cached_free: int
    hits: int
    queries: int

    @property
    def usage(self) -> float:
        return self.used / self.total if self.total else 0.0


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True):
        if num_blocks < 1 or block_size < 1:
            raise BlockManagerError(f"a cache needs at least one block of at least one token; got {num_blocks} "
                                    f"blocks of {block_size}", caller_loc())
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._blocks = [_Block(i) for i in range(num_blocks)]
        self._fresh: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))   # nameless free
        self._named_free: OrderedDict[int, None] = OrderedDict()   # free but named: LRU first
        self._by_name: dict[int, int] = {}                         # name -> block id
        self._seqs: dict[object, _Seq] = {}
        self._hits = self._queries = 0

    # --- questions ------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return len(self._blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self._fresh) + len(self._named_free)

    def stats(self) -> BlockStats:
        free = self.num_free_blocks
        return BlockStats(self.num_blocks, self.num_blocks - free, free, len(self._named_free), self._hits,
                          self._queries)

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def can_allocate(self, token_ids, reserve: int = 0) -> bool:
        """Would `allocate(seq, token_ids)` succeed now (prefix hits counted) and leave at
        least `reserve` blocks free (headroom for the running sequences to grow)?"""
        hits, revived = self._hits_for(list(token_ids))
        return self.blocks_needed(len(token_ids)) - len(hits) + reserve <= self.num_free_blocks - revived

    def reset_prefix_cache(self) -> None:
        """Forget every free block's name: their contents were overwritten outside the
        manager (the model's buffers used by someone else). Blocks in use keep theirs."""
        for block_id in list(self._named_free):
            block = self._blocks[block_id]
            if self._by_name.get(block.name) == block_id:
                del self._by_name[block.name]
            block.name, block.tokens = None, ()
            self._fresh[block_id] = None
        self._named_free.clear()

    def can_append(self, seq_id, num_tokens: int = 1) -> bool:
        seq = self._seq(seq_id)
        return self.blocks_needed(len(seq.tokens) + num_tokens) - len(seq.blocks) <= self.num_free_blocks

    def append_in_block(self, seq_id, have: int, token: int) -> bool:
        """A decode step's fast path: when the sequence has exactly `have` tokens and its last
        block has room, give `token` its slot there and return True; else change nothing and
        return False (a new block is needed: `can_append` / `append`)."""
        seq = self._seqs.get(seq_id)
        if seq is None or len(seq.tokens) != have or have >= len(seq.blocks) * self.block_size:
            return False
        seq.tokens.append(token)
        return True

    def grow(self, seq_id) -> bool:
        """One more block for a sequence ahead of the tokens that will fill it (a decode step
        launched ahead writes its next token's KV there before the token is known); False,
        changing nothing, when no block is free."""
        seq = self._seq(seq_id)
        if not self.num_free_blocks:
            return False
        seq.blocks.append(self._new_block())
        return True

    def block_table(self, seq_id) -> list[int]:
        return list(self._seq(seq_id).blocks)

    def live_table(self, seq_id) -> list[int]:
        """The sequence's own list of blocks (not a copy; read it, never change it): it only
        grows while the sequence holds blocks, and a new allocation is a new list, so a
        decode step's staging rewrites only a row's new entries (engine/step_io.py)."""
        return self._seq(seq_id).blocks

    def num_tokens(self, seq_id) -> int:
        return len(self._seq(seq_id).tokens)

    def slot(self, seq_id, position: int) -> int:
        """The cache slot of token `position` of a sequence."""
        seq = self._seq(seq_id)
        if not 0 <= position < len(seq.tokens):
            raise BlockManagerError(f"sequence {seq_id!r} has {len(seq.tokens)} tokens; position {position} "
                                    "has no slot", caller_loc())
        return seq.blocks[position // self.block_size] * self.block_size + position % self.block_size

    def slots(self, seq_id, start: int, stop: int) -> list[int]:
        return [self.slot(seq_id, p) for p in range(start, stop)]

    def ref_count(self, block_id: int) -> int:
        return self._blocks[block_id].ref_count

    def free_blocks(self) -> set[int]:
        """The ids of the free blocks (nameless and named)."""
        return set(self._fresh) | set(self._named_free)

    # --- changes --------------------------------------------------------------------------
    def allocate(self, seq_id, token_ids) -> int:
        """Give a new sequence blocks for its prompt; returns how many leading tokens are
        already in the cache (prefix hits: their KV need not be computed)."""
        if seq_id in self._seqs:
            raise BlockManagerError(f"sequence {seq_id!r} already has blocks", caller_loc(),
                                    help="free it first, or append to it")
        tokens = list(token_ids)
        if not tokens:
            raise BlockManagerError(f"sequence {seq_id!r} has no tokens to allocate", caller_loc())
        if not self.can_allocate(tokens):
            raise self._out_of_blocks(self.blocks_needed(len(tokens)), seq_id)
        hits, _ = self._hits_for(tokens)
        self._queries += len(self._full_prefix_blocks(tokens))
        self._hits += len(hits)
        seq = self._seqs[seq_id] = _Seq()
        for block_id in hits:
            self._take(block_id)
            seq.blocks.append(block_id)
            seq.names.append(self._blocks[block_id].name)
        seq.tokens = tokens[:len(hits) * self.block_size]
        self._extend(seq, tokens[len(seq.tokens):])
        return len(hits) * self.block_size

    def append(self, seq_id, token_ids) -> None:
        """Slots for more tokens of a sequence (a decode step's new token, a prefill chunk)."""
        seq = self._seq(seq_id)
        tokens = list(token_ids)
        if not self.can_append(seq_id, len(tokens)):
            raise self._out_of_blocks(self.blocks_needed(len(seq.tokens) + len(tokens)) - len(seq.blocks), seq_id)
        self._extend(seq, tokens)

    def computed(self, seq_id, num_tokens: int, new: int | None = None) -> None:
        """The KV of the sequence's first `num_tokens` tokens is written: the full blocks among
        them become reusable by name (prefix caching). `new`: how many of them the last step
        wrote, when the caller knows; a step that filled no block (most decode steps) then
        names nothing and returns before the sequence is looked up."""
        if new is not None and num_tokens // self.block_size == (num_tokens - new) // self.block_size:
            return
        seq = self._seq(seq_id)
        full = min(num_tokens, len(seq.tokens)) // self.block_size
        while len(seq.names) < full:
            self._name(seq, len(seq.names))

    def free(self, seq_id) -> None:
        """Return a sequence's blocks (finished, cancelled or preempted). Its named blocks stay
        reusable by name until evicted; the tail is queued first so it is evicted first."""
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            raise BlockManagerError(f"sequence {seq_id!r} has no blocks to free", caller_loc())
        for block_id in reversed(seq.blocks):
            block = self._blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                (self._named_free if block.name is not None else self._fresh)[block_id] = None

    # --- internals ------------------------------------------------------------------------
    def _seq(self, seq_id) -> _Seq:
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise BlockManagerError(f"unknown sequence {seq_id!r}", caller_loc(), help="allocate it first")
        return seq

    def _full_prefix_blocks(self, tokens: list[int]) -> list[tuple[int, ...]]:
        """The full blocks of a prompt that may be hits: all before the last token's block."""
        n = (len(tokens) - 1) // self.block_size
        return [tuple(tokens[i * self.block_size:(i + 1) * self.block_size]) for i in range(n)]

    def _hits_for(self, tokens: list[int]) -> tuple[list[int], int]:
        """The cached blocks a prompt would share (leading, consecutive) and how many of them
        are now free (a hit on a free block takes it out of the free queue)."""
        if not self.prefix_caching:
            return [], 0
        hits, revived, parent = [], 0, None
        for chunk in self._full_prefix_blocks(tokens):
            block_id = self._by_name.get(_block_name(parent, chunk))
            if block_id is None or self._blocks[block_id].tokens != chunk:
                break
            hits.append(block_id)
            revived += self._blocks[block_id].ref_count == 0
            parent = self._blocks[block_id].name
        return hits, revived

    def _take(self, block_id: int) -> None:
        block = self._blocks[block_id]
        if block.ref_count == 0:
            self._named_free.pop(block_id, None)
            self._fresh.pop(block_id, None)
        block.ref_count += 1

    def _new_block(self) -> int:
        """A free block for new contents: a nameless one, else the least recently used named
        one (evicted: its name is forgotten)."""
        if self._fresh:
            block_id, _ = self._fresh.popitem(last=False)
        else:
            block_id, _ = self._named_free.popitem(last=False)
            block = self._blocks[block_id]
            if self._by_name.get(block.name) == block_id:
                del self._by_name[block.name]
            block.name, block.tokens = None, ()
        self._blocks[block_id].ref_count = 1
        return block_id

    def _extend(self, seq: _Seq, tokens: list[int]) -> None:
        """Slots for `tokens` after the sequence's (named later, once computed)."""
        for t in tokens:
            if len(seq.tokens) == len(seq.blocks) * self.block_size:
                seq.blocks.append(self._new_block())
            seq.tokens.append(t)

    def _name(self, seq: _Seq, i: int) -> None:
        """Name full block i of the sequence (its parent, block i - 1, is named)."""
        chunk = tuple(seq.tokens[i * self.block_size:(i + 1) * self.block_size])
        name = _block_name(seq.names[-1] if seq.names else None, chunk)
        seq.names.append(name)
        if not self.prefix_caching:
            return
        block = self._blocks[seq.blocks[i]]
        if block.name is not None:       # a shared hit: named already
            return
        block.name, block.tokens = name, chunk
        self._by_name.setdefault(name, block.id)   # an equal block already named keeps the name

    def _out_of_blocks(self, needed: int, seq_id) -> BlockManagerError:
        return BlockManagerError(f"sequence {seq_id!r} needs {needed} more block(s) of {self.block_size} tokens, "
                                 f"and {self.num_free_blocks} of {self.num_blocks} are free", caller_loc(),
                                 help="ask can_allocate / can_append first, and preempt or wait when they say no")


def _block_name(parent: int | None, tokens: tuple[int, ...]) -> int:
    return hash((parent, tokens))
