"""`paged_prefill_attention`: causal attention of one sequence's new queries over every key
it has in a paged KV cache, read through its block table — a prefill chunk after the
chunks before it, or a prompt after the prefix-cache blocks it shares with others.

The T queries are the sequence's positions start .. start + T - 1; their keys and values
(written there just before, by `paged_kv_write`) and those of the positions before them
live in the cache. Query at position p sees keys 0 .. p (causal, bottom-right aligned: the
chunk's first query already sees the whole prefix).

Each block owns BM query rows of the G query heads that share one KV head (grouped-query
attention: G is the group when it is a power of two, else 1), as one (G * BM, DP) tile, so
each K/V tile is gathered once for all of them. It streams the keys in tiles of BN, gathering
each tile's cache rows through the block table (`ts.gather`: a block id for each key, then
the rows; positions past the sequence read zeros), with the online softmax of
`flash_attention`. Key tiles wholly before the tile's first query need no mask and take the
first loop; the rest, up to the tile's last query, are masked. The table and `start` are
only read: whatever they hold, every read stays inside the cache (S1).
"""
import math

import tilesafe as ts

from . import arguments as A
from .attention import LOG2E, NEG_INF, online_step
from .call_checks import check_aliasing
from .launch import launch, pow2
from .paged_kv import gather_rows, paged_operands, slot_rows, tile_slots


@ts.kernel
def paged_prefill_kernel(o: ts.Mut["T", ("G", "BM", "DP")], q: ts.Ref["T", ("H", "SQ", "D")],
                         k: ts.Ref["T", ("NS", "HKV", "D")], v: ts.Ref["T", ("NS", "HKV", "D")],
                         tables: ts.Ref["TB", ("B", "MB")], b: int, start: int, qk_scale: float, block_size: int,
                         T: ts.Const[ts.DType], TB: ts.Const[ts.DType], NEG_SCALE: ts.Const[bool],
                         GROUP: ts.Const[int], G: ts.Const[int], BM: ts.Const[int], BN: ts.Const[int],
                         DP: ts.Const[int], H: int, SQ: int, D: int, NS: int, HKV: int, B: int, MB: int):
    hg, i = ts.block_id(0), ts.block_id(1)                       # (query heads hg*G .., query tile)
    kvh = hg * G // GROUP                                        # the KV head all G query heads share
    qt = ts.reshape(ts.load(q, (hg, i, 0), shape=(G, BM, DP)), (G * BM, DP))   # row r: head r // BM
    m = ts.full((G * BM, 1), NEG_INF, ts.f32)                    # running max (log2 units)
    l = ts.zeros((G * BM, 1), ts.f32)                            # running sum
    acc = ts.zeros((G * BM, DP), ts.f32)
    length = start + SQ                                          # the sequence's keys after this chunk
    first = start + i * BM                                       # position of the tile's first query
    stop = min(length, first + BM)                               # keys any of its queries sees: [0, stop)
    free = first // BN                                           # tiles wholly before the first query
    for j in range(free):
        slot = tile_slots(tables, b, j, length, block_size, BN)  # (BN,) cache rows, -1 past the sequence
        kt = gather_rows(k, slot, kvh, BN, DP)                   # (BN, DP), read once for the G heads
        vt = gather_rows(v, slot, kvh, BN, DP)
        m, l, acc = online_step(qt, kt, vt, m, l, acc, True, qk_scale, False, NEG_SCALE)
    rows = ts.expand_dims(first + ts.arange(0, G * BM) % BM, 1)  # (G * BM, 1) query positions
    for j in range(free, (stop + BN - 1) // BN):                 # the diagonal: key <= query
        slot = tile_slots(tables, b, j, length, block_size, BN)
        kt = gather_rows(k, slot, kvh, BN, DP)
        vt = gather_rows(v, slot, kvh, BN, DP)                   # zeros past the sequence
        keep = ts.expand_dims(j * BN + ts.arange(0, BN), 0) <= rows   # (G * BM, BN) key <= query
        m, l, acc = online_step(qt, kt, vt, m, l, acc, keep, qk_scale, True, NEG_SCALE)
    o.store(ts.reshape((acc / l).astype(T), (G, BM, DP)))


def tiles_for(t: int, group: int) -> tuple[int, int]:
    """(G, BM): query heads per block (the GQA group when it is a power of two, so K/V tiles
    are read once per group) and query rows per head; G * BM is 16 .. 128 rows."""
    g = group if group & (group - 1) == 0 else 1
    bm = min(pow2(t), max(1, 128 // g) if g > 1 else 64)
    return g, max(bm, -(-16 // g))


def paged_prefill_attention(q, k_cache, v_cache, block_tables, start: int, row: int = 0, scale=None, out=None):
    """Causal attention of q (T, H, D), the queries of positions start .. start + T - 1 of
    one sequence, over its keys 0 .. start + T - 1 in the caches (num_blocks, block_size,
    HKV, D) (HKV divides H), read through row `row` of block_tables (B, max_blocks) (an
    integer tensor on q's device). Returns (T, H, D), into `out=` when given.

    The keys of the new positions must be in the cache already (`paged_kv_write` them
    first). A block id outside the cache reads zeros; `start + T` beyond the table's
    max_blocks * block_size positions is refused.
    """
    fn = "paged_prefill_attention"
    torch_mode = A.is_torch(q)
    qt, kc, vc, dtype, device, group = paged_operands(fn, q, k_cache, v_cache, "T")
    t, h, d = qt.shape
    nb, bs, hkv, _ = kc.shape
    if not isinstance(row, int) or isinstance(row, bool):
        raise A.fail(fn, f"`row` must be an int, got {type(row).__name__}")
    tables = A.tensor(block_tables, "block_tables", fn)
    A.dtype_in(tables, A.INTS, "block_tables", fn)
    if tables.ndim != 2 or tables.device != device:
        raise A.fail(fn, f"`block_tables` must be (B, max_blocks) on {device}; got {tables.shape} on {tables.device}")
    if not 0 <= row < tables.shape[0]:
        raise A.fail(fn, f"`row` {row} is not a row of block_tables {tables.shape}")
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise A.fail(fn, f"`start` must be an int >= 0, got {start!r}")
    if start + t > tables.shape[1] * bs:
        raise A.fail(fn, f"positions up to {start + t} do not fit a block table of {tables.shape[1]} blocks of "
                         f"{bs}", help="give the sequence's table enough blocks for every position it attends")
    o = A.output(out, (t, h, d), dtype, device, torch_mode, fn)
    check_aliasing(fn, {"q": qt, "k_cache": kc, "v_cache": vc, "block_tables": tables}, {"out": o.passed})
    if t == 0 or d == 0:   # an empty output (d = 0: as torch's; 1 / sqrt(d) has no value)
        return o.returned
    dp = max(16, pow2(d))
    g, bm = tiles_for(t, group)
    bn = max(16, min(64, pow2(start + t)))
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    cfg = {"num_warps": 8} if g * bm * dp >= 128 * 128 else {}   # a 128-row tile of D 128: more warps
    launch(paged_prefill_kernel, {"o": (o.tensor.transpose(0, 1), (g, bm, dp))}, cfg=cfg,
           q=qt.transpose(0, 1), k=slot_rows(fn, kc), v=slot_rows(fn, vc), tables=tables, b=row, start=start,
           qk_scale=scale * LOG2E, block_size=bs, NEG_SCALE=scale < 0, GROUP=group, BN=bn)
    return o.returned
