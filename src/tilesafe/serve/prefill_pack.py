"""The rows of a serving step's one ragged forward (prefill chunks, then decode rows), padded
to a fixed set of shapes so the kernels compiled at warm-up serve every step.

Kernels specialize on shapes, so a forward over a new number of tokens compiles every
kernel of a layer again (hundreds of ms per new prompt length on a GPU). A step's shapes
are set by:

- each prefill chunk of n tokens: T = token_bucket(n) rows (a power of two, at least 16:
  its attention's shape; attention is cheap to pad). Rows n.. of the chunk are padding at
  the positions after it — causal attention keeps them out of the real rows — whose KV is
  not written (cache row -1);
- the number of chunks R (the sampled rows: LM head, sampler; the block tables' rows):
  always `seqs` (max_num_seqs), padded with one-token chunks after a one-token prefix
  (cache row -1, a table of zeros: they read block 0 and write nothing), which join the
  decode rows' attention — over R - C rows, C the prefill chunks (1 in most steps);
- the total M: padded to the offline engine's prefill buckets (`rows_bucket`:
  engine.prefill_graphs.bucket_sizes, 16 .. 256 by doubling, then steps of a quarter) with
  rows in no chunk (token 0, position 0, cache row -1): never attended to, outputs unread.

Padding R to max_num_seqs costs little: those rows are one token each, and a prefill step
reads every weight once whatever its rows. A chunk's padding rows may run past
max_model_len: the forward's block tables are `table_width` entries wide, enough for a
whole padded chunk after the longest sequence (the extra entries are zeros: block 0, read
only by padding rows). A one-token prompt (nothing computed yet) must come as a chunk,
padded like the others, not as a decode row (those attend to a cached prefix).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.prefill_graphs import bucket_sizes as prefill_buckets

MIN_TOKENS = 16


def token_bucket(n: int) -> int:
    """The rows a chunk (or a forward) of n tokens is padded to: a power of two, >= 16."""
    b = MIN_TOKENS
    while b < n:
        b *= 2
    return b


def rows_bucket(m: int) -> int:
    """The rows a whole forward of m rows is padded to (the offline prefill's buckets)."""
    return prefill_buckets(m)[-1]


@dataclass(slots=True)
class Packed:
    ids: list[int] = field(default_factory=list)          # (M,) rows' tokens
    positions: list[int] = field(default_factory=list)    # (M,)
    slots: list[int] = field(default_factory=list)        # (M,) cache rows, -1: padding (not written)
    starts: list[int] = field(default_factory=lambda: [0])   # chunk i: rows starts[i] .. starts[i+1]-1
    last: list[int] = field(default_factory=list)         # (R,) the row whose logits give chunk i's token
    cached: list[int] = field(default_factory=list)       # (R,) positions before chunk i (in the cache)
    tables: list[list[int]] = field(default_factory=list) # (R,) block tables ([] for padding)
    chunks: int = 0                                        # real chunks (prefill, then decode rows)
    rows: int = 0                                          # M, padding rows included

    def add(self, ids, positions, slots, cached: int, table, last: int) -> None:
        self.last.append(self.starts[-1] + last)
        self.ids += ids
        self.positions += positions
        self.slots += slots
        self.starts.append(self.starts[-1] + len(ids))
        self.cached.append(cached)
        self.tables.append(table)


def table_width(max_blocks: int, block_size: int, max_tokens: int) -> int:
    """Block table entries of a packed forward: a sequence's max_blocks, then room for the
    padding rows of the largest chunk bucket after it."""
    return max_blocks + -(-token_bucket(max_tokens) // block_size)


def pack(prefill, decode, blocks, seqs: int, pad: bool = True) -> Packed:
    """The rows of one forward: each (request, n) of `prefill` computes its next n uncomputed
    tokens; each request of `decode` feeds back its newest token. `seqs`: the chunks R is
    padded to (pad=False: no padding at all)."""
    p = Packed()
    for r, n in prefill:
        c = r.computed
        t = token_bucket(n) if pad else n
        seq = r.seq
        ids = (seq.prompt_ids + seq.tokens)[c:c + n]
        slots = blocks.slots(r.request_id, c, c + n)
        kept = min(max(r.cached - c, 0), n)      # positions of a recomputed prefix hit: shared blocks, not rewritten
        slots[:kept] = [-1] * kept
        p.add(ids + [0] * (t - n), list(range(c, c + t)), slots + [-1] * (t - n),
              c, blocks.live_table(r.request_id), n - 1)
    bs = blocks.block_size
    for r in decode:
        c = r.computed
        table = blocks.live_table(r.request_id)
        toks = r.seq.tokens
        p.add([toks[-1] if toks else r.seq.prompt_ids[-1]], [c], [table[c // bs] * bs + c % bs], c, table, 0)
    p.chunks = len(p.cached)
    if pad:
        pad_rows(p, seqs)
    p.rows = len(p.ids)
    return p


def pad_rows(p: Packed, seqs: int, rows: int = 0) -> None:
    """Pad p to `seqs` chunks, then to its rows' bucket (or `rows`, when larger)."""
    for _ in range(seqs - len(p.cached)):    # one token after a one-token prefix: joins the decode rows
        p.add([0], [1], [-1], 1, [], 0)
    m = p.starts[-1]
    extra = max(rows_bucket(m), rows) - m
    p.ids += [0] * extra
    p.positions += [0] * extra
    p.slots += [-1] * extra
    p.rows = len(p.ids)
