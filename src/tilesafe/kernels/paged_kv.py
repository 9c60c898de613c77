"""A paged KV cache's kernels: `paged_kv_write` (a step's new keys and values into their
slots, through the safe scatter) and `paged_decode_attention` (one query per head and
sequence, reading each sequence's keys through its block table), plus `scatter_check`, the
device-side count of a slot mapping's bad entries.

Layout (vLLM's): each cache is (num_blocks, block_size, HKV, D); a sequence's block table
row lists its blocks, so its position p lives in slot `table[p // block_size] * block_size
+ p % block_size` — row `slot` of the cache seen as (num_blocks * block_size, HKV, D).

The write scatters row i of the new keys to row `slot_mapping[i]` (`z.scatter(rows)`, S1):
entries out of range or shared with another entry write nothing, on the device, so the
write is safe whatever the mapping holds and can be captured in a CUDA graph. Eagerly it
also checks the mapping on the host first (`check="host"`, an error instead of dropped
rows); inside a graph use `check="device"` with a `dropped=` buffer, read after the replay
(`report_dropped`). A negative slot is a padded token: nothing is written (vLLM's -1).

The decode attention follows `decode_attention`: one block per (split, sequence x KV head)
streams its split of the sequence in tiles of BN keys, gathering each tile's cache rows
through the block table (`ts.gather`, positions past the sequence read padding), with the
GP >= 16 query rows of its KV head's group in one tensor-core tile; a second kernel combines
the splits per query head (or the last block of each (sequence, KV head), `one_kernel`).
Each split takes at least a tile of keys of the sequence's length, read on the device, so
a graph sized for max_model_len runs only the splits a short sequence fills. When the
batch's (sequence, KV head) rows alone give the GPU enough blocks, one split: each block
writes its heads' output, no scratch, one launch. Block tables and lengths are read-only
device inputs, so one captured graph replays for every step.
"""
import math

import numpy as np

import tilesafe as ts

from . import arguments as A
from . import attention_model as am
from . import configs
from .attention import (LOG2E, NEG_INF, combine_splits, decode_combine_kernel, first_rows, kv_group, online_step,
                        store_partials)
from .call_checks import check_aliasing
from .launch import cdiv, launch, pow2, workers

# --- the write --------------------------------------------------------------------------------
@ts.kernel
def paged_kv_write_kernel(kc: ts.MutTiles["T", ("R", "C")], vc: ts.MutTiles["T", ("R", "C")],
                          slots: ts.Ref["TS", ("N",)], k: ts.Ref["T", ("N", "W")], v: ts.Ref["T", ("N", "W")],
                          T: ts.Const[ts.DType], TS: ts.Const[ts.DType], R: ts.Const[int], C: ts.Const[int],
                          N: int, W: int):
    for j in kc.scatter(slots):                                  # (row tile, column tile) of k
        kc.store(ts.load(k, j, shape=(R, C)), j)                 # (R, C) rows to their slots
    for j in vc.scatter(slots):
        vc.store(ts.load(v, j, shape=(R, C)), j)


@ts.kernel
def scatter_check_kernel(bad: ts.Mut[ts.i32, ("R",)], rows: ts.Ref["TS", ("N",)], n_rows: int,
                         TS: ts.Const[ts.DType], R: ts.Const[int], N: int):
    """bad[i] = 1 where rows[i] >= n_rows, or rows[i] >= 0 is also another entry's row."""
    i = ts.block_id(0)
    src = i * R + ts.arange(0, R)                                # (R,) entries of this block
    pos = ts.load(rows, (i,), shape=(R,), padding=-1)            # (R,)
    shared = ts.zeros((R,), ts.i32)
    for c in range(0, (N + R - 1) // R):
        other = ts.load(rows, (c,), shape=(R,), padding=-1)      # (R,) entries c*R ..
        same = (ts.expand_dims(pos, 1) == ts.expand_dims(other, 0)) & \
            (ts.expand_dims(src, 1) != ts.expand_dims(c * R + ts.arange(0, R), 0))   # (R, R)
        shared = ts.maximum(shared, ts.max(same.astype(ts.i32), axis=1))
    bad.store(ts.where((pos >= n_rows) | ((pos >= 0) & (shared > 0)), 1, 0).astype(ts.i32))


def paged_kv_write(k_cache, v_cache, k, v, slot_mapping, check="host", dropped=None):
    """Write k and v (T, HKV, D) into the caches (num_blocks, block_size, HKV, D) at the slots
    `slot_mapping` (T,) names; a negative slot writes nothing. The caches are updated in place
    and returned.

    check="host" reads the mapping first (a synchronisation on a GPU) and raises LaunchError
    for an entry out of range or repeated; check="device" reads nothing on the host (what a
    CUDA graph needs): such entries write nothing, and with `dropped=` (a (T,) int32 tensor)
    a check kernel flags them there — `report_dropped(dropped)` raises after the step.
    """
    fn = "paged_kv_write"
    (kc, vc, kt, vt), dtype, device = A.float_operands(fn, k_cache=k_cache, v_cache=v_cache, k=k, v=v)
    if kc.ndim != 4 or vc.shape != kc.shape or kt.ndim != 3 or vt.shape != kt.shape \
            or kt.shape[1:] != kc.shape[2:]:
        raise A.fail(fn, f"needs caches (num_blocks, block_size, HKV, D) of one shape and k, v (T, HKV, D); got "
                         f"k_cache {kc.shape}, v_cache {vc.shape}, k {kt.shape}, v {vt.shape}")
    slots = A.int_vector(fn, slot_mapping, "slot_mapping", kt.shape[0], device)
    nb, bs, hkv, d = kc.shape
    if check not in ("host", "device"):
        raise A.fail(fn, f"check must be 'host' or 'device', got {check!r}")
    if check == "host":
        if dropped is not None:
            raise A.fail(fn, "dropped= goes with check='device' (the host check raises instead)")
        ts.check_scatter_index(slots, nb * bs, "slot_mapping")
    flags = None if dropped is None else _flags_out(fn, dropped, kt.shape[0], device)
    check_aliasing(fn, {"k": kt, "v": vt, "slot_mapping": slots}, {"k_cache": kc, "v_cache": vc, "dropped": flags})
    if kt.shape[0] == 0 or hkv * d == 0:   # nothing to write (no rows, or rows of no elements)
        return k_cache, v_cache
    w = hkv * d
    views = [_rows(fn, t, name, w) for t, name in ((kc, "k_cache"), (vc, "v_cache"), (kt, "k"), (vt, "v"))]
    c = min(pow2(w), 1024)
    r = max(1, min(16, pow2(kt.shape[0]), 8192 // c))
    grid = (max(1, min(cdiv(kt.shape[0], r) * cdiv(w, c), workers(device))),)
    launch(paged_kv_write_kernel, {"kc": (views[0], (r, c)), "vc": (views[1], (r, c))}, grid, cfg={},
           slots=slots, k=views[2], v=views[3])
    if flags is not None:
        scatter_check(slots, nb * bs, out=flags)
    return k_cache, v_cache


def scatter_check(rows, n_rows: int, out=None):
    """(T,) int32 flags, on the device, of the entries of `rows` a scatter into `n_rows` rows
    drops as errors: out of range, or naming a row another entry names (negative entries are
    padding, not errors). With `out=` nothing is allocated (inside `ts.graph()`)."""
    fn = "scatter_check"
    rt = A.tensor(rows, "rows", fn)
    A.dtype_in(rt, A.INTS, "rows", fn)
    if rt.ndim != 1:
        raise A.fail(fn, f"`rows` must be 1-D, got shape {rt.shape}")
    o = A.output(out, rt.shape, ts.i32, rt.device, A.is_torch(rows), fn)
    check_aliasing(fn, {"rows": rt}, {"out": o.passed})
    if rt.shape[0]:
        r = min(64, pow2(rt.shape[0]))
        launch(scatter_check_kernel, {"bad": (o.tensor, (r,))}, cfg=None, rows=rt, n_rows=int(n_rows))
    return o.returned


def report_dropped(flags, name: str = "slot_mapping") -> None:
    """Raise LaunchError if `flags` (from `scatter_check` or `paged_kv_write(dropped=)`)
    marks an entry: the step that wrote them dropped it. Reads the flags (a synchronisation)."""
    values = A.tensor(flags, "flags", "report_dropped").numpy() if not isinstance(flags, np.ndarray) else flags
    bad = np.flatnonzero(values)
    if bad.size:
        more = f" (and {bad.size - 1} more)" if bad.size > 1 else ""
        raise A.fail("report_dropped", f"entry {int(bad[0])} of `{name}`{more} was out of range or named a slot "
                                       "another entry named, so its row was not written",
                     help="give each token its own slot inside the cache (a negative slot writes nothing)")


# --- the decode attention ---------------------------------------------------------------------
@ts.function
def paged_keys(lens, b, MAXS, BN, MINK, split, splits):
    """Split `split` of `splits` of sequence b's first lens[b] (at most MAXS) positions: whole
    BN-key tiles, at least MINK keys per split, so a short sequence fills only its first
    splits (the others find no keys). Returns (stop, first tile, last tile): the split's keys
    end at `stop`, it reads tiles [first, last)."""
    length = max(min(ts.scalar(ts.load(lens, (b,), shape=(1,))).astype(ts.i32), MAXS), 0)
    per = max(((length + splits - 1) // splits + BN - 1) // BN * BN, MINK)   # keys per split
    start = split * per
    stop = min(length, start + per)                              # this split's keys: [start, stop)
    return stop, max(start // BN, 0), (stop + BN - 1) // BN


@ts.function
def gather_rows(cache, slot, kvh, BN, DP):
    """Rows `slot` (BN,) of head kvh of a (slots, HKV, D) cache: (BN, DP); -1 reads zeros."""
    return ts.reshape(ts.gather(cache, slot, axis=0, shape=(BN, 1, DP), index=(0, kvh, 0)), (BN, DP))


@ts.function
def tile_slots(tables, b, j, stop, block_size, BN):
    """Cache rows of key tile j of sequence b, read from its block table: (BN,), -1 at
    positions past `stop` (their rows read zeros; table entries past the table read 0)."""
    pos = j * BN + ts.arange(0, BN)                              # (BN,) key positions
    blocks = ts.gather(tables, pos // block_size, axis=1, shape=(1, BN), index=(b, 0))   # (1, BN) block ids
    blocks = ts.reshape(blocks, (BN,)).astype(ts.i32)
    return ts.where(pos < stop, blocks * block_size + pos % block_size, -1)


@ts.function
def paged_attend(q, k, v, tables, lens, qk_scale, block_size, NEG_SCALE, GP, BN, DP, MINK, MB, HKV, bh, split,
                 splits, PREFETCH):
    """Row bh = (sequence, KV head)'s unnormalised (acc, m, l) over split `split` of `splits`
    of its keys, gathered through its block table. A tile is two dependent reads (its table
    entries, then its K and V rows) before its math; with PREFETCH the loop reads tile j + 1's
    rows and tile j + 2's table entries before tile j's math, so their latency overlaps it
    (at the cost of a second K/V tile in registers)."""
    b, kvh = bh // HKV, bh % HKV
    stop, first, last = paged_keys(lens, b, MB * block_size, BN, MINK, split, splits)
    qt = ts.reshape(ts.load(q, (bh, 0, 0), shape=(1, GP, DP)), (GP, DP))   # (GP, DP) the group's queries
    m = ts.full((GP, 1), NEG_INF, ts.f32)                        # (GP, 1) running max (log2 units)
    l = ts.zeros((GP, 1), ts.f32)                                # (GP, 1) running sum
    acc = ts.zeros((GP, DP), ts.f32)                             # (GP, DP)
    if PREFETCH:
        slot = tile_slots(tables, b, first, stop, block_size, BN)
        kt, vt = gather_rows(k, slot, kvh, BN, DP), gather_rows(v, slot, kvh, BN, DP)
        slot = tile_slots(tables, b, first + 1, stop, block_size, BN)
        for j in range(first, last):
            kn, vn = gather_rows(k, slot, kvh, BN, DP), gather_rows(v, slot, kvh, BN, DP)   # tile j + 1
            slot = tile_slots(tables, b, j + 2, stop, block_size, BN)                      # tile j + 2
            keep = ts.expand_dims(j * BN + ts.arange(0, BN) < stop, 0)                     # (1, BN)
            m, l, acc = online_step(qt, kt, vt, m, l, acc, keep, qk_scale, True, NEG_SCALE)
            kt, vt = kn, vn
    else:
        for j in range(first, last):
            slot = tile_slots(tables, b, j, stop, block_size, BN)   # (BN,) cache rows, -1: none
            kt = gather_rows(k, slot, kvh, BN, DP)               # (BN, DP)
            vt = gather_rows(v, slot, kvh, BN, DP)               # (BN, DP), zeros past the keys
            keep = ts.expand_dims(j * BN + ts.arange(0, BN) < stop, 0)
            m, l, acc = online_step(qt, kt, vt, m, l, acc, keep, qk_scale, True, NEG_SCALE)
    return acc, m, l


@ts.kernel
def paged_decode_kernel(acc_o: ts.Mut[ts.f32, (1, "GS", "DP")], m_o: ts.Mut[ts.f32, (1, "GS", 1)],
                        l_o: ts.Mut[ts.f32, (1, "GS", 1)], q: ts.Ref["T", ("BH", "G", "D")],
                        k: ts.Ref["T", ("NS", "HKV", "D")], v: ts.Ref["T", ("NS", "HKV", "D")],
                        tables: ts.Ref["TB", ("B", "MB")], lens: ts.Ref["TL", ("B",)], qk_scale: float,
                        block_size: int, T: ts.Const[ts.DType], TB: ts.Const[ts.DType], TL: ts.Const[ts.DType],
                        NEG_SCALE: ts.Const[bool], GP: ts.Const[int], GS: ts.Const[int], BN: ts.Const[int],
                        DP: ts.Const[int], MINK: ts.Const[int], PREFETCH: ts.Const[bool], BH: int, G: int, D: int,
                        NS: int, HKV: int, B: int, MB: int):
    """Grid (split, sequence * HKV + KV head): each block's partials; `decode_combine_kernel`
    combines them (the two-kernel form, `one_kernel=False`)."""
    acc, m, l = paged_attend(q, k, v, tables, lens, qk_scale, block_size, NEG_SCALE, GP, BN, DP, MINK, MB, HKV,
                                ts.block_id(1), ts.block_id(0), ts.num_blocks(0), PREFETCH)
    store_partials(acc_o, m_o, l_o, acc, m, l, GP, GS, DP)


@ts.kernel
def paged_decode_last_kernel(o: ts.MutLast["T", (1, "GS", "DP")], acc_o: ts.Mut[ts.f32, (1, "GS", "DP")],
                             m_o: ts.Mut[ts.f32, (1, "GS", 1)], l_o: ts.Mut[ts.f32, (1, "GS", 1)],
                             q: ts.Ref["T", ("BH", "G", "D")], k: ts.Ref["T", ("NS", "HKV", "D")],
                             v: ts.Ref["T", ("NS", "HKV", "D")], tables: ts.Ref["TB", ("B", "MB")],
                             lens: ts.Ref["TL", ("B",)], qk_scale: float, block_size: int, T: ts.Const[ts.DType],
                             TB: ts.Const[ts.DType], TL: ts.Const[ts.DType], NEG_SCALE: ts.Const[bool],
                             GP: ts.Const[int], GS: ts.Const[int], BN: ts.Const[int], DP: ts.Const[int],
                             MINK: ts.Const[int], PREFETCH: ts.Const[bool], BH: int, G: int, D: int, NS: int,
                             HKV: int, B: int, MB: int):
    """`paged_decode_kernel` whose last block per (sequence, KV head) combines the splits
    that found keys into `o` (viewed as (B * HKV, G, D)): one launch."""
    acc, m, l = paged_attend(q, k, v, tables, lens, qk_scale, block_size, NEG_SCALE, GP, BN, DP, MINK, MB,
                                   HKV, ts.block_id(1), ts.block_id(0), ts.num_blocks(0), PREFETCH)
    store_partials(acc_o, m_o, l_o, acc, m, l, GP, GS, DP)
    if ts.last_arrival():
        o.store(ts.reshape(combine_splits(acc_o, m_o, l_o, GS, DP).astype(T), (1, GS, DP)))


@ts.kernel
def paged_decode_single_kernel(o: ts.Mut["T", (1, "GS", "DP")], q: ts.Ref["T", ("BH", "G", "D")],
                               k: ts.Ref["T", ("NS", "HKV", "D")], v: ts.Ref["T", ("NS", "HKV", "D")],
                               tables: ts.Ref["TB", ("B", "MB")], lens: ts.Ref["TL", ("B",)], qk_scale: float,
                               block_size: int, T: ts.Const[ts.DType], TB: ts.Const[ts.DType],
                               TL: ts.Const[ts.DType], NEG_SCALE: ts.Const[bool], GP: ts.Const[int],
                               GS: ts.Const[int], BN: ts.Const[int], DP: ts.Const[int], PREFETCH: ts.Const[bool],
                               BH: int, G: int, D: int, NS: int, HKV: int, B: int, MB: int):
    """One block per (sequence, KV head) over all its keys, normalised into `o` (viewed as
    (B * HKV, G, D)): no partials, no combination — the form when one split fills the GPU."""
    acc, m, l = paged_attend(q, k, v, tables, lens, qk_scale, block_size, NEG_SCALE, GP, BN, DP, BN, MB, HKV,
                                ts.block_id(0), 0, 1, PREFETCH)
    o.store(ts.reshape((first_rows(acc, GP, GS, DP) / first_rows(l, GP, GS, 1)).astype(T), (1, GS, DP)))


def paged_decode_workspace(q, k_cache, max_len=None, splits=None):
    """The scratch of `paged_decode_attention` for these shapes (allocate once, before a
    capture). `max_len` (positions a sequence may have; default: the whole cache) sets how
    many splits a sequence is cut into (`attention_model.paged_splits`: ~2 (split, sequence
    x KV head) blocks per SM); `splits` sets it directly. With one split there is no scratch:
    each block writes its heads' final output."""
    fn = "paged_decode_workspace"
    qt, kt = A.tensor(q, "q", fn, differentiable=False), A.tensor(k_cache, "k_cache", fn, differentiable=False)
    if qt.ndim != 3 or kt.ndim != 4:
        raise A.fail(fn, f"needs q (B, H, D) and k_cache (num_blocks, block_size, HKV, D); got {qt.shape} and "
                         f"{kt.shape}")
    if splits is not None and (isinstance(splits, bool) or not isinstance(splits, int) or splits < 1):
        raise A.fail(fn, f"splits must be a positive int or None, got {splits!r}")
    b, h, d = qt.shape
    hkv = kt.shape[2]
    max_len = max_len or kt.shape[0] * kt.shape[1]
    s = splits or am.paged_splits(b * max(hkv, 1), max_len, _block_n(kt.shape[0] * kt.shape[1]),
                                  workers(qt.device))
    if s == 1:
        return PagedWorkspace(None, None, None)
    rows = b * hkv * pow2(h // max(hkv, 1))
    dev = qt.device
    return PagedWorkspace(ts.empty((s, rows, d), ts.f32, dev), ts.empty((s, rows, 1), ts.f32, dev),
                          ts.empty((s, rows, 1), ts.f32, dev))


class PagedWorkspace:
    """Per-split partials of `paged_decode_attention`: acc (S, B*HKV*GS, D), m and l (S, B*HKV*GS, 1);
    all None for one split (nothing to combine)."""
    __slots__ = ("acc", "m", "l")

    def __init__(self, acc, m, l):
        self.acc, self.m, self.l = acc, m, l

    @property
    def splits(self) -> int:
        return 1 if self.acc is None else self.acc.shape[0]


PAGED_CONFIG_KEYS = ("one_kernel", "prefetch", "min_keys", "block_n", "num_warps", "num_stages")
PAGED_SWITCHES = ("one_kernel", "prefetch")


def paged_operands(fn: str, q, k_cache, v_cache, rows: str):
    """q (rows, H, D) and the caches (num_blocks, block_size, HKV, D) of one shape, checked (the
    paged attention kernels share them): (qt, kc, vc, dtype, device, query heads per KV head)."""
    (qt, kc, vc), dtype, device = A.float_operands(fn, q=q, k_cache=k_cache, v_cache=v_cache)
    if qt.ndim != 3 or kc.ndim != 4 or vc.shape != kc.shape or kc.shape[3] != qt.shape[2]:
        raise A.fail(fn, f"needs q ({rows}, H, D) and caches (num_blocks, block_size, HKV, D) of one shape; got q "
                         f"{qt.shape}, k_cache {kc.shape}, v_cache {vc.shape}")
    return qt, kc, vc, dtype, device, kv_group(fn, qt.shape[1], kc.shape[2])


def paged_decode_attention(q, k_cache, v_cache, block_tables, seq_lens, scale=None, out=None, workspace=None,
                           config=None):
    """Attention of one query per head for each of B sequences over its first seq_lens[b]
    positions, read through its block table.

    q is (B, H, D); the caches are (num_blocks, block_size, HKV, D) with HKV dividing H;
    block_tables (B, max_blocks) and seq_lens (B,) are integer tensors on q's device (read
    on the device only: a captured graph replays for every step). A table entry past a
    sequence's length is never read; a block id outside the cache reads zeros. A sequence
    of length 0 has no keys: its output is NaN (0 / 0), as for a padded batch slot. With `out=`
    (B, H, D) and `workspace=` (`paged_decode_workspace(q, k_cache, max_len)`) nothing is
    allocated.

    With one split (the workspace's) a block per (sequence, KV head) writes its heads' output:
    one launch, no scratch. With more, each split takes at least `min_keys` keys (so a short
    sequence uses only its first splits, read on the device each step) and a second kernel
    combines them, or with `one_kernel=True` the last block of each (sequence, KV head) does
    (`ts.last_arrival`, S16). `config` may set `min_keys`, `one_kernel`, `prefetch` (read
    the next tile before this one's math; on by default), `block_n` (keys per tile) and the
    schedule hints; where it does not, many (sequence, KV head) rows in a cache of at most 256
    positions take 32-key tiles (one split) or the one-launch combination (splits), as
    `attention_model.paged_rule` measured on the H200.
    """
    fn = "paged_decode_attention"
    torch_mode = A.is_torch(q)
    qt, kc, vc, dtype, device, group = paged_operands(fn, q, k_cache, v_cache, "B")
    b, h, d = qt.shape
    nb, bs, hkv, _ = kc.shape
    tables = _int_matrix(fn, block_tables, "block_tables", b, device)
    lens = A.int_vector(fn, seq_lens, "seq_lens", b, device)
    cfg = _paged_config(fn, config)
    o = A.output(out, (b, h, d), dtype, device, torch_mode, fn)
    ws = workspace if workspace is not None else paged_decode_workspace(qt, kc, max_len=tables.shape[1] * bs)
    gs = pow2(group)
    if ws.acc is not None and ws.acc.shape[1:] != (b * hkv * gs, d):
        raise A.fail(fn, "the workspace was made for other shapes",
                     help="make it with paged_decode_workspace(q, k_cache)")
    scratch = {} if ws.acc is None else {"workspace.acc": ws.acc, "workspace.m": ws.m, "workspace.l": ws.l}
    check_aliasing(fn, {"q": qt, "k_cache": kc, "v_cache": vc, "block_tables": tables, "seq_lens": lens},
                   {"out": o.passed, **scratch})
    if b == 0 or d == 0:   # an empty output (d = 0: as torch's; 1 / sqrt(d) has no value)
        return o.returned
    for key, value in am.paged_rule(b * hkv, tables.shape[1] * bs, ws.splits).items():
        if key not in (config or {}):                    # many rows in a short cache: the measured rule
            cfg[key] = value
    dp = max(16, pow2(d))
    bn = max(16, min(pow2(cfg["block_n"]), pow2(nb * bs))) if "block_n" in cfg else _block_n(nb * bs)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    args = dict(q=qt.reshape(b * hkv, group, d), k=slot_rows(fn, kc), v=slot_rows(fn, vc), tables=tables, lens=lens,
                qk_scale=scale * LOG2E, block_size=bs, NEG_SCALE=scale < 0, GP=max(16, pow2(group)), BN=bn,
                PREFETCH=cfg["prefetch"])
    heads = (o.tensor.reshape(b * hkv, group, d), (1, gs, dp))          # each (sequence, KV head)'s G heads
    if ws.acc is None:
        launch(paged_decode_single_kernel, {"o": heads}, cfg=cfg, pdl=True, **args)
        return o.returned
    tiles = (1, gs, dp), (1, gs, 1)
    parts = {"acc_o": (ws.acc, tiles[0]), "m_o": (ws.m, tiles[1]), "l_o": (ws.l, tiles[1])}
    mink = max(bn, cdiv(cfg["min_keys"], bn) * bn)
    if cfg["one_kernel"]:
        launch(paged_decode_last_kernel, {"o": heads, **parts}, cfg=cfg, pdl=True, MINK=mink, **args)
        return o.returned
    launch(paged_decode_kernel, parts, cfg=cfg, pdl=True, MINK=mink, **args)
    launch(decode_combine_kernel, {"o": (o.tensor.reshape(b * h, d), (1, dp))}, cfg=None, acc=ws.acc, m=ws.m,
           l=ws.l, G=group, GS=gs, SP=pow2(ws.acc.shape[0]), pdl=True)
    return o.returned


def _paged_config(fn, config) -> dict:
    """The decode's switches: `config` over the defaults (a second kernel combines the splits
    on a GPU, each split takes >= attention_model.PAGED_MIN_KEYS keys)."""
    cpu = configs.current_backend() in configs.CPU_BACKENDS     # the CPU takes the one-kernel form, as
    cfg = {"one_kernel": cpu, "min_keys": am.PAGED_MIN_KEYS,      # decode_attention's CPU default
           "prefetch": am.PAGED_PREFETCH}
    for key, value in (config or {}).items():
        if key not in PAGED_CONFIG_KEYS:
            raise A.fail(fn, f"config key {key!r} is not used by the paged decode",
                         help=f"known keys: {', '.join(PAGED_CONFIG_KEYS)}")
        switch = key in PAGED_SWITCHES
        if switch and not isinstance(value, bool) or \
                not switch and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise A.fail(fn, f"config {key}={value!r} is not " + ("True or False" if switch else "a positive int"))
        cfg[key] = value
    return cfg


# --- shapes and arguments ---------------------------------------------------------------------
def _block_n(max_len: int) -> int:
    return max(16, min(64, pow2(max_len)))


def _rows(fn, t, name: str, w: int):
    """A cache (blocks, block_size, HKV, D) or keys (T, HKV, D) as rows of HKV * D."""
    try:
        return t.reshape(-1, w) if t.numel else t.reshape(0, w)
    except ts.TileSafeError:
        raise A.fail(fn, f"`{name}` must have contiguous (HKV, D) rows; its strides are {t.strides}",
                     help="pass a contiguous tensor") from None


def slot_rows(fn, cache):
    """A cache (blocks, block_size, HKV, D) as (slots, HKV, D)."""
    nb, bs, hkv, d = cache.shape
    try:
        return cache.reshape(nb * bs, hkv, d)
    except ts.TileSafeError:
        raise A.fail(fn, f"the cache's (block, position) axes must merge; its strides are {cache.strides}",
                     help="pass a contiguous cache") from None


def _int_matrix(fn, x, name: str, rows: int, device):
    t = A.tensor(x, name, fn)
    A.dtype_in(t, A.INTS, name, fn)
    if t.ndim != 2 or t.shape[0] != rows or t.device != device:
        raise A.fail(fn, f"`{name}` must be ({rows}, max_blocks) on {device}; got {t.shape} on {t.device}")
    return t


def _flags_out(fn, dropped, n: int, device):
    t = A.tensor(dropped, "dropped", fn)
    if t.shape != (n,) or t.dtype != ts.i32 or t.device != device:
        raise A.fail(fn, f"`dropped` must be a ({n},) int32 tensor on {device}; got {t.shape} {t.dtype.name} on "
                         f"{t.device}")
    return t
