"""The config model of the GEMMs: candidates for `matmul` (m > 16 rows) and the `linear`
path (m <= 16: weight streaming, a GEMV at m = 1), and the time each is predicted to take.

A product of m > 16 rows is modelled as waves of output tiles: T = ceil(m/BM) * ceil(n/BN)
tiles (times the split-K count) run `blocks per SM` at a time on every SM, so the time is
(rounds of tiles) x (one tile's time), where a tile's time is its tensor-core work at the
efficiency its shape reaches (small tiles re-read more shared memory per product) plus its
pipeline fill and epilogue. A last round that is only partly full is *wave quantisation*;
fewer blocks per SM than the registers and shared memory allow is *occupancy*. Beside that,
the bytes: HBM (each operand once while both fit in L2, more when they do not and the
tiles are not grouped) and L2 (every tile reads its (BM + BN) x K operands). The slowest of
the three is the time, plus one kernel launch per kernel (split-K and tail splits add a
second: the sum of the fp32 partials).

A product of <= 16 rows reads the weight once: its time is the weight's bytes at the HBM
rate, reached only when enough blocks keep enough loads in flight on every SM (Little's
law: ~1 us of HBM latency at each SM's share of the bandwidth), and split over K when the
output columns alone give too few blocks.

The numbers (tile efficiencies, fill times, in-flight bytes) are fitted to the H200 tuner's
timed candidates of the training shapes (below); the model ranks candidates, and the
first-use autotune (`first_use.py`) or the tuned table correct it.
"""
from __future__ import annotations

from .launch import cdiv, pow2
from .machine_model import Gpu, Gemm, element_bytes

# (BM, BN, BK at 2-byte elements, warps): the tile shapes the H200 tuning found useful; 64 x 256
# with 8 warps from the small-M sweep (benchmarks/probes/gemv_gemm_sweep.py: split in two, 0.90
# of cuBLAS at 136 x 5120 x 25600, where the best other tile reached 0.73).
TILES = ((128, 256, 64, 8), (256, 128, 64, 8), (128, 128, 64, 4), (128, 128, 64, 8), (128, 64, 64, 4),
         (64, 128, 64, 4), (64, 64, 64, 4), (64, 128, 128, 4), (128, 64, 128, 4), (64, 64, 128, 4),
         (64, 256, 64, 8))
SPLITS = (2, 3, 4, 6, 8)
# Fitted to the H200 tuner's measured candidates (the training set: benchmarks/results/h200/
# tune-candidates*.json, 30 GEMM classes of m > 16, ~2000 timed configs) by ranking each
# class's candidates: the measured best over the time of the model's first pick went from
# 0.908 to 0.969 (geomean), over the best of its first four kinds from 0.933 to 0.976.
FILL_US = 2.3                  # a tile's pipeline fill and drain (one tile per block)
PERSISTENT_FILL_US = 0.0       # ... when a block keeps going with its next tile: overlapped
OVERLAP = 1.0                  # two blocks on one SM share its tensor cores: no faster together
MMA_SCALE, MMA_EXPONENT = 1.05, 0.34  # tile efficiency: MMA_SCALE * (its product per byte, relative) ** MMA_EXPONENT
EPILOGUE_BYTES_PER_S = 88e9    # one SM writing its output tile
LOAD_LATENCY_US = 1.3          # a K step's loads from HBM / L2, which the pipeline's other stages cover
SPLIT_LAUNCH_US = 6.0          # the second kernel of a split-K or tail split, and its wait
LAST_TICKET_US = 1.0           # one-kernel split-K: the last block's ticket (fence, atomic) ...
LAST_READ_BYTES_PER_S = 150e9  # ... and its walk over the splits' partial tiles, from L2
REREAD = 1.15                  # HBM bytes of the operands, over their size, when they overflow L2 ungrouped
INFLIGHT_PER_SM = 31_000       # bytes in flight that keep one SM's share of HBM busy (~1 us)
SM_STREAM_BYTES_PER_S = 210e9  # what one SM alone can pull from HBM
# The weight-streaming constants are fitted likewise (18 classes of m = 1 and 16): the
# measured best over the model's first pick went from 0.890 to 0.914, its worst from 0.71
# to 0.83 (`benchmarks/config_model_fit.py` prints these scores).
STREAM_EFFICIENCY = 0.92       # of the HBM rate, a long read reaches
STREAM_REGS = 70               # registers per thread of a GEMV block beside its (BK, BN) partial products
STREAM_SPLIT_US = 0.3          # the sum kernel of a split GEMV, and its wait
STREAM_ROUND_US = 0.5          # a round of GEMV blocks' start and drain
STREAM_ITER_US = 0.1           # one K tile of a GEMV block: its loop step, beside the bytes
PREFETCH_US = 0.5              # a GEMV whose next K tile loads before this one's FMAs: no step waits, but
                               # the doubled tiles cost (the sweep, 4B: 2560 x 9728 ~9% faster, 2560 x 4096 1% slower)
SMEM_RESERVE = 16 * 1024       # shared memory Triton may take beside the pipeline (barriers, a layout change)


# 16 < m <= 128 rows (a decode batch, a short prefill) stream the weight: the time is its bytes,
# and the H200 measured one rule's tiles best at M = 32 and 72 on the Qwen3-4B/8B weights
# (benchmarks/probes/shapes_probe.py, round 1 of session 16: tune-candidates-s16-shapes.json):
# 32 x 64 x 128 tiles up to 32 rows, split over K when the output has few tiles (a block
# alone pulls ~40-55 GB/s: 40 tiles unsplit ran the 4B down projection at M = 32 in 35 us,
# split in seven 23.6 us); 64 x 128 x 64 above, where the output has >= 48 such tiles; both 4
# warps, with the deepest pipeline that still lets every tile run in one wave (304 tiles of the
# 4B gate_up projection at M = 32: 3 stages, three blocks per SM, 27.5 us; 8 stages, one per SM,
# 34.8). Where it applies, the model's ranking, which prices a K step by its latency alone, took
# 1.1-1.7x the rule's time.
# Few tiles (< 48) are wave quantisation: the split that fills *one* wave of the SMs (SMs //
# tiles slices, at most MAX_WAVE_SPLIT) is the one that pays. Session 17's probe round 1 (H200,
# wave part): at M = 24 on the 4B down projection (40 tiles of 32 x 64) three slices added up by
# the last slice of each tile (`one_kernel`) ran 0.95 of F.linear where the rule's old split in
# seven (280 blocks, two kernels) ran 0.64; above 64 rows 64 x 128 x 128 tiles (4 warps, 4 stages)
# in three slices (120 blocks) ran the 4B o projection at M = 72 at 0.86 (the model's unsplit
# 64 x 64 choice 0.77) and the 4B down projection at M = 100 at 0.97 (model 0.85), as the H200
# table's M = 128 entry ran M = 72 at 0.86 in session 16 (the model's split 0.65). Splits in
# seven or eight lost everywhere they were timed (0.55-0.71 of F.linear, session 16 round 2),
# so more slices than MAX_WAVE_SPLIT leave the choice to the old rule (<= 32 rows) or the model;
# so do 33..64 rows, where the model's unsplit 64 x 64 tiles ran 1.0-1.19 of F.linear.
STREAM_M = 128                 # rows up to which `streaming_choice` picks the config
FEW_TILES = 48                 # output tiles below which a streaming product splits over K
MAX_WAVE_SPLIT = 4             # most K slices of the one-wave split


def streaming_choice(s: Gemm, gpu: Gpu) -> dict | None:
    """The config of a 16 < m <= 128 product by the rules above (None for other shapes)."""
    if s.family != "matmul" or s.m > STREAM_M:
        return None
    wm = weight_major_choice(s, gpu)
    if wm is not None:
        return wm
    es = element_bytes(s.dtype)
    bm, bn, bk = (32, 64, 128) if s.m <= 32 else (64, 128, 64)
    tiles = (_mma(bm, s.m), _mma(bn, s.n), _mma(bk * 2 // es, s.k))   # fp32: half the K tile
    count, kt = cdiv(s.m, tiles[0]) * cdiv(s.n, tiles[1]), cdiv(s.k, tiles[2])
    wave = gpu.sms // count if count < FEW_TILES else 1           # slices that fill one wave
    one = 2 <= wave <= MAX_WAVE_SPLIT and kt // wave >= 4
    if count < FEW_TILES and s.m > 32:
        if not one or s.m <= 64:
            return None                # 33..64 rows, or too few tiles for a short split: the model
        return _wave_split(s, (64, 128, 128 * 2 // es), wave, gpu)
    stages = _stage_options(*tiles, es, gpu)
    if not stages:
        return None
    if one:
        split = wave
    else:
        split = max(1, min(SPLITS[-1], cdiv(2 * gpu.sms, count), kt // 4)) if count < FEW_TILES else 1
    per_sm = min(4, cdiv(count, gpu.sms)) if split == 1 else 1    # blocks one SM must hold for one wave
    epilogue, step = _smem(*tiles, 0, es), _smem(*tiles, 1, es) - _smem(*tiles, 0, es)
    fit = (gpu.smem_per_sm // per_sm - 1024 - epilogue) // step   # stages that let per_sm blocks share an SM
    depth = min(stages[0], fit) if per_sm > 1 and fit >= 3 else stages[0]
    c = {"block_m": tiles[0], "block_n": tiles[1], "block_k": tiles[2], "group": 8, "persistent": False,
         "split_k": split, "min_blocks": gpu.sms, "tail_split": False, "one_kernel": one and split > 1,
         "num_warps": 4, "num_stages": depth}
    return c if valid_matmul(c, s, gpu) else None


# Weight-major products (kernels/weight_major.py: the weight tile as the MMA's wide operand, the
# rows padded to 16..128 on its narrow side). Measured on the H200 (session 20,
# benchmarks/probes/skinny_probe.py; results/h200/probe-skinny-s20-early.*): on the Qwen3 4B/8B
# decode weights at M = 2..128 it lost to `linear`'s default everywhere except at 17..32 rows on
# outputs of FEW_TILES <= N / 64 < SMs column tiles, which the row-major rule above runs unsplit
# in under one wave: there 64-row weight tiles ran 1.07-1.38x faster
# (M = 32: 4B qkv 11.3 against 12.6 us, 8B qkv 16.6 / 17.8, 8B o 13.8 / 17.0, 8B down split 31.7-32.1
# / 44.3). Its K split only pays on a long K (8B down: 5 slices 32.1 us, none 35.0; on 8B o and
# qkv splits lost): each slice keeps >= WEIGHT_MAJOR_SLICE K tiles. K >= WEIGHT_MAJOR_MIN_K: the
# shortest K timed (a 0.6B projection's K = 1024 has 8 K tiles of 128: a pipeline's fill, untimed).
WEIGHT_MAJOR_ROWS = (17, 32)
WEIGHT_MAJOR_MIN_K = 2560
WEIGHT_MAJOR_TILE = (64, 128)          # weight rows, K tile at 2-byte elements (fp32: half)
WEIGHT_MAJOR_STAGES = 4
WEIGHT_MAJOR_SLICE = 24                # K tiles a slice of the rule's split keeps at least
WEIGHT_MAJOR_SMEM = 200 * 1024         # shared memory its pipeline may take (227 KB a block on the H200)
WEIGHT_MAJOR_MAX_ROWS = 128            # rows one block takes (the MMA's N side); more: more row tiles


def weight_major_choice(s: Gemm, gpu: Gpu) -> dict | None:
    """The weight-major config where the measurements above favour it (None elsewhere)."""
    lo, hi = WEIGHT_MAJOR_ROWS
    if s.family != "matmul" or not lo <= s.m <= hi or s.k < WEIGHT_MAJOR_MIN_K:
        return None
    es = element_bytes(s.dtype)
    bm = max(16, min(WEIGHT_MAJOR_MAX_ROWS, pow2(s.m)))
    bn, bk = _mma(WEIGHT_MAJOR_TILE[0], s.n), _mma(WEIGHT_MAJOR_TILE[1] * 2 // es, s.k)
    tiles = cdiv(s.m, bm) * cdiv(s.n, bn)
    if not FEW_TILES <= tiles < gpu.sms:
        return None
    stages = weight_major_stages(WEIGHT_MAJOR_STAGES, bm, bn, bk, es)
    slots = weight_major_slots(bm, bn, bk, stages, es, gpu.sms, gpu.smem_per_sm)
    kt = cdiv(s.k, bk)
    split = min(weight_major_splits(None, tiles, kt, slots), max(1, kt // WEIGHT_MAJOR_SLICE))
    c = {"block_m": bm, "block_n": bn, "block_k": bk, "group": 8, "persistent": False, "split_k": split,
         "min_blocks": gpu.sms, "tail_split": False, "one_kernel": split > 1, "weight_major": True,
         "num_warps": 4, "num_stages": stages}
    return c if valid_matmul(c, s, gpu) else None


def weight_major_slots(bm: int, bn: int, bk: int, stages: int, es: int, sms: int, smem_per_sm: int) -> int:
    """Weight-major blocks the GPU runs at once: its SMs times the blocks whose pipelines fit
    in one SM's shared memory together (each also keeps ~1 KB), at most 4."""
    return sms * max(1, min(4, smem_per_sm // (stages * (bm + bn) * bk * es + 1024)))


def weight_major_splits(want: int | None, tiles: int, k_tiles: int, slots: int) -> int:
    """K splits of a weight-major product of `tiles` output tiles: `want`, or (None) as many
    as keep every split in one wave of `slots` blocks (a second, partial wave of short blocks
    costs a whole block time), each split keeping >= 4 K tiles."""
    if want is None:
        want = min(max(1, slots // tiles), max(1, k_tiles // 4))
    return max(1, min(int(want), k_tiles))


def weight_major_stages(want: int | None, bm: int, bn: int, bk: int, es: int) -> int:
    """The pipeline depth `want` (None: WEIGHT_MAJOR_STAGES), cut to what fits WEIGHT_MAJOR_SMEM
    (at least 2): each stage holds a (BN, BK) weight tile and a (BM, BK) tile of the rows."""
    return max(2, min(want or WEIGHT_MAJOR_STAGES, WEIGHT_MAJOR_SMEM // ((bm + bn) * bk * es)))


def _wave_split(s: Gemm, tiles, split: int, gpu: Gpu) -> dict | None:
    """64 x 128 x 128 tiles (bf16; 64-wide K tiles in fp32), 4 warps, 4 stages, K in `split`
    slices added up by a second kernel (which ran faster than `one_kernel` above 64 rows)."""
    bm, bn, bk = (_mma(t, size) for t, size in zip(tiles, (s.m, s.n, s.k)))
    c = {"block_m": bm, "block_n": bn, "block_k": bk, "group": 8, "persistent": False, "split_k": split,
         "min_blocks": gpu.sms, "tail_split": False, "one_kernel": False, "num_warps": 4, "num_stages": 4}
    return c if valid_matmul(c, s, gpu) else None


# Few output tiles at 33..WAVE_ROWS rows (a batch, a short prefill on a 3-7k weight) leave SMs
# idle: 4608 x 3584 at M = 83 or 125 has 72 tiles of 64 x 128 on 132 SMs (the random run's worst
# GEMM, 0.81-0.87 of cuBLAS, wave-quantised). Split over K, the blocks of an SM share its tensor
# cores, so what sets the time is the busiest SM's K steps (blocks on it x steps of each, plus
# each block's pipeline fill, FILL_STEPS): the balanced split picks the slice count that makes
# that least (72 tiles of 56 K steps: 3 slices, two blocks on the busiest SM, 44 steps against
# 59 unsplit), with the deepest pipeline that lets the busiest SM hold its blocks at once, the
# slices added up by the last one of each tile (one launch, `split_k_last_kernel`). Doubtful:
# session 17 timed 8B o at M = 83 (64 tiles) in two slices, one block per SM, and it ran no
# faster than unsplit, so those SMs are not bound by their tensor cores alone. NOT YET
# MEASURED (session 18's probe round, shapes_probe.py `split`, did not run): it is no default,
# only a candidate the opt-in first-use autotune times beside the model's (`config_model.ranked`),
# so it runs only where it measured fastest.
WAVE_ROWS = 512
WAVE_FILL = 0.8                # output tiles under this share of the SMs: the balanced split is timed
BALANCED_TILE = (64, 128, 64)  # bf16 (fp32: half the K tile), 4 warps
MAX_BALANCED_SPLIT = 8
MIN_SLICE_STEPS = 4            # K tiles a slice keeps at least
FILL_STEPS = 3                 # a block's pipeline fill and epilogue, in K steps


def balanced_split(s: Gemm, gpu: Gpu) -> dict | None:
    """The balanced split above for `s` (None where the output has enough tiles, where no split
    beats one block per tile, or outside 33..WAVE_ROWS rows: up to 32 the streaming rule splits)."""
    if s.family != "matmul" or not 32 < s.m <= WAVE_ROWS:
        return None
    es = element_bytes(s.dtype)
    want = (BALANCED_TILE[0], BALANCED_TILE[1], BALANCED_TILE[2] * 2 // es)
    bm, bn, bk = (_mma(t, size) for t, size in zip(want, (s.m, s.n, s.k)))
    tiles, kt = cdiv(s.m, bm) * cdiv(s.n, bn), cdiv(s.k, bk)
    if tiles >= WAVE_FILL * gpu.sms:
        return None
    epilogue = _smem(bm, bn, bk, 0, es)
    step = _smem(bm, bn, bk, 1, es) - epilogue
    best = None
    for slices in range(2, MAX_BALANCED_SPLIT + 1):
        per = cdiv(kt, slices)
        split = cdiv(kt, per)                                 # no empty slice (matmul._split_k)
        if per < MIN_SLICE_STEPS:
            break
        per_sm = cdiv(tiles * split, gpu.sms)                  # blocks on the busiest SM
        stages = min(8, (gpu.smem_per_sm // per_sm - 1024 - epilogue) // step)
        if stages < 3:
            continue
        cost = per_sm * (per + FILL_STEPS)
        if best is None or cost < best[0]:
            best = (cost, split, stages)
    if best is None or best[0] >= kt + FILL_STEPS:             # no better than one block per tile
        return None
    c = {"block_m": bm, "block_n": bn, "block_k": bk, "group": 8, "persistent": False, "split_k": best[1],
         "min_blocks": gpu.sms, "tail_split": False, "one_kernel": True, "num_warps": 4, "num_stages": best[2]}
    return c if valid_matmul(c, s, gpu) else None


# Thin row tiles were timed and lost (session 19 mid round, shapes_probe.py `rows`): 32-row tiles for
# 72..83 rows of few 64 x 128 tiles (108 blocks against 72 at 4608 x 3584, M = 83) ran 0.58-0.69 of
# F.linear where the 64 x 128 default ran 0.84 (8B o M = 83: 0.66 against 0.83; 4B o and down at M = 72:
# 0.72 / 0.63 split in two, against 0.81 / 0.86). More, thinner blocks do not beat fewer deep ones there.


def matmul_candidates(s: Gemm, gpu: Gpu) -> list[dict]:
    """Every valid `matmul` config the model considers for `s` (m > 16)."""
    es, out = element_bytes(s.dtype), []
    seen = set()
    for bm, bn, bk, warps in TILES:
        bk = bk * 2 // es                                        # fp32 tiles: half the K tile
        tiles = (_mma(bm, s.m), _mma(bn, s.n), _mma(bk, s.k))
        if (tiles, warps) in seen:
            continue
        seen.add((tiles, warps))
        for stages in _stage_options(*tiles, es, gpu):
            out += _schedules(s, tiles, warps, stages, gpu)
    return [c for c in out if valid_matmul(c, s, gpu)]


def _schedules(s: Gemm, tiles, warps: int, stages: int, gpu: Gpu) -> list[dict]:
    bm, bn, bk = tiles
    t, kt = cdiv(s.m, bm) * cdiv(s.n, bn), cdiv(s.k, bk)
    base = {"block_m": bm, "block_n": bn, "block_k": bk, "group": 8, "persistent": False, "split_k": 1,
            "min_blocks": gpu.sms, "tail_split": False, "num_warps": warps, "num_stages": stages}
    out = [base]
    if t > gpu.sms:
        out.append(dict(base, persistent=True))
        if t % gpu.sms:
            out += [dict(base, tail_split=True), dict(base, persistent=True, tail_split=True)]
    else:
        out += [dict(base, split_k=sp) for sp in SPLITS if t * sp <= 2 * gpu.sms and kt // sp >= 4]
    return out


def valid_matmul(c: dict, s: Gemm, gpu: Gpu) -> bool:
    """Whether the kernels accept `c` and it fits the GPU: power-of-two tiles of >= 16 (the
    tensor cores' minimum, `matmul._mma_tile`), a split count <= the K tiles, shared memory."""
    tiles = c["block_m"], c["block_n"], c["block_k"]
    if any(t < 16 or t & (t - 1) for t in tiles) or c["num_warps"] not in (4, 8) or c["num_stages"] < 2:
        return False
    if not 1 <= c["split_k"] <= cdiv(s.k, c["block_k"]):
        return False
    es = element_bytes(s.dtype)
    # The persistent kernel's epilogue changes the layout of a 128 x 128-element tile in shared
    # memory of its own too (64 x 256 x 64 with 5 stages asked 237608 bytes of 232448 on the H200).
    epilogue = c["block_m"] * c["block_n"] * es if c.get("persistent") and c["block_m"] * c["block_n"] == 128 * 128 \
        else 0
    return _smem(*tiles, c["num_stages"], es) + epilogue <= gpu.smem_per_block - SMEM_RESERVE


def matmul_us(s: Gemm, c: dict, gpu: Gpu) -> tuple[float, str]:
    """(predicted microseconds, the limit that sets it) of `matmul` with config `c`."""
    es = element_bytes(s.dtype)
    bm, bn, bk = _mma(c["block_m"], s.m), _mma(c["block_n"], s.n), _mma(c["block_k"], s.k)
    kt, tiles = cdiv(s.k, bk), cdiv(s.m, bm) * cdiv(s.n, bn)
    occ = blocks_per_sm(bm, bn, bk, c["num_stages"], c["num_warps"], es, gpu)
    splits = auto_splits(c, tiles, kt)
    persistent = c.get("persistent")
    persistent = tiles > 2 * gpu.sms if persistent is None else bool(persistent) and splits == 1
    tail = _tail(c, s, (bm, bn), kt, gpu) if splits == 1 else None
    one = bool(c.get("one_kernel"))                      # the last split of a tile adds the splits up (S16)
    if tail is not None:                                 # whole waves, then the rest split over K
        whole, rest, tail_splits = tail
        compute = _rounds_us(whole, kt, (bm, bn, bk), occ, persistent, es, gpu, c["num_stages"])
        compute += _rounds_us(rest * tail_splits, cdiv(kt, tail_splits), (bm, bn, bk), occ, False, es, gpu,
                              c["num_stages"])
        partial_bytes, launches = (0, 2) if one else (2 * rest * tail_splits * bm * bn * 4, 3)
        compute += _last_us(tail_splits, bm, bn) if one else 0.0
    else:
        per = cdiv(kt, splits)
        compute = _rounds_us(tiles * cdiv(kt, per), per, (bm, bn, bk), occ, persistent, es, gpu, c["num_stages"])
        partial_bytes = 2 * splits * s.m * s.n * 4 if splits > 1 and not one else 0
        launches = 2 if splits > 1 and not one else 1
        compute += _last_us(splits, bm, bn) if splits > 1 and one else 0.0
    operands = (s.m * s.k + s.k * s.n) * es
    reread = 1.0 if operands <= gpu.l2_bytes // 2 or persistent else REREAD
    hbm = (operands * reread + s.m * s.n * es + partial_bytes) / gpu.hbm_bytes_per_s * 1e6
    l2 = tiles * (bm + bn) * kt * bk * es / gpu.l2_bytes_per_s * 1e6
    limits = {"compute": compute, "bandwidth": hbm, "l2": l2}
    limit = max(limits, key=limits.get)
    if limit == "compute":
        limit = _compute_limit(tiles * splits, occ, persistent, (bm, bn, bk, c["num_stages"]), es, gpu)
    return limits[max(limits, key=limits.get)] + gpu.launch_us + (launches - 1) * SPLIT_LAUNCH_US, limit


def _last_us(splits: int, bm: int, bn: int) -> float:
    """What the one-kernel split adds: the last block of a tile takes its ticket (a fence and
    an atomic), then reads every split's fp32 partial tile back from L2, one after another."""
    return LAST_TICKET_US + splits * bm * bn * 4 / LAST_READ_BYTES_PER_S * 1e6


def _rounds_us(blocks: int, k_steps: int, tiles, occ: int, persistent: bool, es: int, gpu: Gpu,
               stages: int) -> float:
    """Time of `blocks` output tiles of `k_steps` K tiles each, `occ` blocks per SM (one
    per SM when persistent: the grid is the SM count). A K step waits for its loads unless
    the pipeline holds enough steps in flight to cover their latency (`LOAD_LATENCY_US`)."""
    if blocks == 0:
        return 0.0
    bm, bn, bk = tiles
    occ = 1 if persistent else occ
    step = 2.0 * bm * bn * bk / (gpu.flops_per_sm * mma_efficiency(bm, bn)) * 1e6
    tile = k_steps * max(step, LOAD_LATENCY_US / max(1, stages * occ - 1))
    tile += (PERSISTENT_FILL_US if persistent else FILL_US) + bm * bn * es / EPILOGUE_BYTES_PER_S * 1e6
    per_round = tile * occ / (OVERLAP if occ > 1 else 1.0)
    return cdiv(blocks, gpu.sms * occ) * per_round


def _compute_limit(blocks: int, occ: int, persistent: bool, tiles, es: int, gpu: Gpu) -> str:
    """Which part of a compute-bound time is lost: a partly full last wave, or blocks per SM."""
    slots = gpu.sms * (1 if persistent else occ)
    fill = blocks / (cdiv(blocks, slots) * slots)
    if fill < 0.85:
        return "wave quantisation"
    if occ == 1 and _smem(*tiles, es) > gpu.smem_per_sm // 2 and min(tiles[:2]) < 128:
        return "occupancy"
    return "compute"


def mma_efficiency(bm: int, bn: int) -> float:
    """An SM's tensor-core rate a (bm, bn) tile reaches, as a fraction of `Gpu.flops` (what
    cuBLAS reaches over a whole product, so a full wave of the best tile is a little above
    1): the product per byte read from shared memory, bm * bn / (bm + bn), against the
    128 x 256 tile's."""
    return MMA_SCALE * min(1.0, (bm * bn / (bm + bn)) / (128 * 256 / 384)) ** MMA_EXPONENT


def blocks_per_sm(bm: int, bn: int, bk: int, stages: int, warps: int, es: int, gpu: Gpu) -> int:
    """Blocks one SM holds at once: its shared memory over the pipeline's, and its registers
    over the fp32 accumulator's (plus ~40 per thread for addresses and operands)."""
    by_smem = gpu.smem_per_sm // max(1, _smem(bm, bn, bk, stages, es))
    regs = (bm * bn // (warps * 32) + 40) * warps * 32
    return max(1, min(by_smem, gpu.regs_per_sm // regs, 64 // warps))


def _smem(bm: int, bn: int, bk: int, stages: int, es: int) -> int:
    """Shared memory of one block: `stages` A and B tiles, and the epilogue's layout change for
    tiles of more than 128 x 128 (which reuses none of the pipeline's buffers)."""
    epilogue = bm * bn * es if bm * bn > 128 * 128 else 0
    return stages * (bm * bk + bk * bn) * es + epilogue


def _stage_options(bm: int, bn: int, bk: int, es: int, gpu: Gpu) -> list[int]:
    """The deepest pipeline one block may have, and one shallow enough for two blocks per SM."""
    cap = 5 if bm * bn >= 128 * 128 else 8
    step, epilogue = (bm * bk + bk * bn) * es, _smem(bm, bn, bk, 0, es)
    deep = min(cap, (gpu.smem_per_block - SMEM_RESERVE - epilogue) // step)
    half = min(cap, (gpu.smem_per_sm // 2 - 1024 - epilogue) // step)
    return [st for st in dict.fromkeys((deep, half)) if st >= 2]


def tail_split(cfg: dict, m: int, n: int, bm: int, bn: int, k_tiles: int, workers: int):
    """(axis, kept, splits) when the config asks for a tail split (`tail_split`), else None.
    The main launch gets whole waves of output tiles: the first `kept` rows (axis 0, whole
    rows of tiles) or, with one row of tiles, the first `kept` columns (axis 1); the tiles
    left, which would run as a partly empty last wave, run as `splits` K-slices each, one
    block per slice. On the H200 a 2048 x 2560 output has 320 tiles of 128 x 128 on 132 SMs:
    260 in two waves, the last 60 split in two (120 blocks); a 128 x 10240 output has 160
    tiles of 128 x 64: 132 in one wave, the last 28 split in four (112 blocks)."""
    if not cfg.get("tail_split"):
        return None
    tm, tn = cdiv(m, bm), cdiv(n, bn)
    whole = (tm * tn) // workers * workers                    # tiles that fill whole waves
    if tm > 1:
        axis, kept, rest = 0, whole // tn, (tm - whole // tn) * tn   # whole rows of tiles
        size = bm
    else:
        axis, kept, rest = 1, whole, tn - whole
        size = bn
    if kept == 0 or rest == 0:
        return None
    splits = min(workers // rest, k_tiles // 4)               # every slice keeps >= 4 K tiles
    return (axis, kept * size, splits) if splits >= 2 else None


def _tail(c: dict, s: Gemm, tiles, kt: int, gpu: Gpu):
    """(tiles in whole waves, tiles left, their K splits) when the config's tail split applies."""
    bm, bn = tiles
    found = tail_split(c, s.m, s.n, bm, bn, kt, gpu.sms)
    if found is None:
        return None
    axis, kept, splits = found
    total = cdiv(s.m, bm) * cdiv(s.n, bn)
    whole = (kept // bm) * cdiv(s.n, bn) if axis == 0 else kept // bn
    return whole, total - whole, splits


def _mma(want: int, size: int) -> int:
    """`matmul._mma_tile`: the config's tile, shrunk for small sizes, never below 16."""
    return max(16, min(int(want), pow2(size)))


# --- m <= 16 rows: the weight-streaming path ------------------------------------------------

def linear_candidates(s: Gemm, gpu: Gpu) -> list[dict]:
    """Every valid `linear` config the model considers for `s` (m <= 16): explicit tiles,
    split count and `min_blocks` = 1, so the kernel takes them as they are."""
    out = []
    if s.m == 1:   # FMAs: narrow column tiles give blocks; bk x bn elements per load
        shapes = [(bn, elems // bn) for bn in (4, 8, 16, 32) for elems in (4096, 8192)]
    else:          # tensor cores: 16 (padded) rows by >= 16 columns
        shapes = [(bn, bk) for bn in (16, 32, 64) for bk in (128, 256)]
    for bn, bk in shapes:
        bn_eff, bk_eff, _ = linear_tiles({"block_n": bn, "block_k": bk, "split_k": 1}, s)
        for splits in (1, 2, 4, 8):
            if splits > 1 and (cdiv(s.n, bn_eff) * splits > 8 * gpu.sms or cdiv(s.k, bk_eff) // splits < 2):
                continue
            for stages in (3, 4) if s.m == 1 else (3, 5):
                out.append({"block_m": 16, "block_n": bn, "block_k": bk, "min_blocks": 1, "split_k": splits,
                            "prefetch": False, "num_warps": 4, "num_stages": stages})
            if s.m == 1 and splits == 1 and bk >= 512:   # the next K tile loaded before this one's FMAs
                out.append(dict(out[-1], prefetch=True, num_stages=3))
    return [c for c in out if valid_linear(c, s, gpu)]


# One row by a short K (SHORT_K_MIN..SHORT_K): each block's chain of K tiles is short, so blocks, not
# pipeline depth, keep the HBM busy, and the model prices a partly full second round of such short
# blocks as a whole round (pricing it by the loads in flight instead lost 0.92 -> 0.83 of the fit's
# first picks). Session 19 made 4 KB loads a rule before the ranking (8 x 256, or 16 x 128 where that
# pads K less) and measured it on synthetic weights (neither training nor held out; shapes_probe.py
# `gemv2` / `gemv3`, H200, vs F.linear): the best form changed from weight to weight — 8 x 256 on
# 16384 x 1024 (1.017), 10240 x 1536 (1.077) and 9216 x 1152 (1.049, though 256s pad K 10% there),
# 16 x 128 on 14336 x 1344 (0.985), 16 x 256 (3 stages) on 11520 x 1856 (1.050) and 24576 x 2048
# (1.135), the model's 8 x 512 on 5120 x 1024 (1.161) — and over those seven the model's own ranking
# did better than the rule (geomean 1.038 against 1.021, worst 0.958 against 0.939). So the model
# keeps the choice, and these three forms (4-8 KB loads, each where its column tile leaves
# GEMV_BLOCKS_PER_SM blocks on every SM) are candidates the opt-in first-use autotune times beside
# the model's four kinds (`config_model.ranked`). (The held-out 12800 x 1600, measured to verify:
# 16 x 128 0.962, the model's 32 x 128 0.929.)
SHORT_K = 2048
SHORT_K_MIN = 1024
GEMV_BLOCKS_PER_SM = 4
SHORT_K_FORMS = ((16, 256, 4), (8, 512, 4), (16, 512, 3))   # (columns, K tile in bytes, stages): 4, 4, 8 KB loads


def short_k_gemvs(s: Gemm, gpu: Gpu) -> list[dict]:
    """The short-K GEMV candidates above for `s` (none unless m = 1, SHORT_K_MIN <= K <= SHORT_K)."""
    if s.family != "linear" or s.m != 1 or not SHORT_K_MIN <= s.k <= SHORT_K:
        return []
    es, out = element_bytes(s.dtype), []
    for bn, k_bytes, stages in SHORT_K_FORMS:
        c = {"block_m": 16, "block_n": bn, "block_k": k_bytes // es, "min_blocks": 1, "split_k": 1,
             "prefetch": False, "num_warps": 4, "num_stages": stages}
        if cdiv(s.n, bn) >= GEMV_BLOCKS_PER_SM * gpu.sms and valid_linear(c, s, gpu):
            out.append(c)
    return out


def valid_linear(c: dict, s: Gemm, gpu: Gpu) -> bool:
    """Whether the weight-streaming kernels accept `c` and it fits: power-of-two tiles (a
    GEMV's column tile may be under 16: FMAs), one block's pipeline in shared memory."""
    tiles = c["block_n"], c["block_k"], c.get("block_m", 16)
    if any(t < 1 or t & (t - 1) for t in tiles) or c["num_warps"] not in (4, 8) or c["num_stages"] < 2:
        return False
    bn, bk, _ = linear_tiles(c, s)
    rows = 1 if s.m == 1 else 16
    return (c["split_k"] is None or c["split_k"] >= 1) and \
        c["num_stages"] * (rows + bn) * bk * element_bytes(s.dtype) <= gpu.smem_per_block


def linear_tiles(c: dict, s: Gemm) -> tuple[int, int, int]:
    """(column tile, K tile, K splits) as `matmul.gemm` derives them from `c` for m <= 16."""
    bn = min(int(c["block_n"]), max(16, pow2(s.n)))
    if s.m > 1:
        bn = max(bn, 16)
    while bn > 16 and cdiv(s.n, bn) < c.get("min_blocks", 1):
        bn //= 2
    bk = min(c["block_k"] * c["block_n"] // bn, max(16, pow2(s.k)))
    kt = cdiv(s.k, bk)
    if s.m == 1 or c.get("split_k"):
        splits = auto_splits(c, cdiv(s.n, bn), kt)
    else:
        splits = 1
    per = cdiv(kt, splits)
    return bn, bk, cdiv(kt, per)


def auto_splits(c: dict, tiles: int, k_tiles: int) -> int:
    """How many ways to split K: the config's `split_k`, or (None) enough splits for
    `min_blocks` blocks when the output has fewer tiles, each split keeping >= 4 K tiles.
    matmul launches by it and the model predicts by it."""
    want = c.get("split_k")
    if want is None:
        floor = c.get("min_blocks", 0)
        want = cdiv(floor, tiles) if tiles < floor else 1
        want = min(want, max(1, k_tiles // 4))
    return max(1, min(int(want), k_tiles))


def linear_us(s: Gemm, c: dict, gpu: Gpu) -> tuple[float, str]:
    """(predicted microseconds, limit) of the m <= 16 path with config `c`."""
    es = element_bytes(s.dtype)
    bn, bk, splits = linear_tiles(c, s)
    blocks = cdiv(s.n, bn) * splits
    rows = 1 if s.m == 1 else 16
    regs = (bk * bn // (c["num_warps"] * 32) + STREAM_REGS) if s.m == 1 else (rows * bn // (c["num_warps"] * 32) + 64)
    occ = max(1, min(gpu.regs_per_sm // (regs * c["num_warps"] * 32),
                     gpu.smem_per_sm // max(1, c["num_stages"] * (rows + bn) * bk * es), 16))
    active = min(blocks, gpu.sms * occ)
    inflight = active * c["num_stages"] * bn * bk * es
    rate = gpu.hbm_bytes_per_s * STREAM_EFFICIENCY * min(1.0, inflight / (gpu.sms * INFLIGHT_PER_SM))
    rate = min(rate, min(blocks, gpu.sms) * SM_STREAM_BYTES_PER_S)
    rounds = cdiv(blocks, gpu.sms * occ)
    quant = blocks / (rounds * gpu.sms * occ) if rounds > 1 else 1.0
    weight = s.n * s.k * es
    partials = 2 * splits * s.m * s.n * 4 if splits > 1 else 0
    us = (weight + s.m * (s.k + s.n) * es + partials) / (rate * quant) * 1e6
    us += gpu.launch_us + (STREAM_SPLIT_US if splits > 1 else 0.0) + rounds * STREAM_ROUND_US
    if c.get("prefetch") and s.m == 1 and splits == 1:               # the kernel prefetches only there
        us += PREFETCH_US
    else:
        us += rounds * cdiv(cdiv(s.k, bk), splits) * STREAM_ITER_US  # each block's chain of K tiles
    limit = "bandwidth" if rate >= 0.8 * gpu.hbm_bytes_per_s * STREAM_EFFICIENCY and quant > 0.85 else \
        ("wave quantisation" if quant <= 0.85 else "occupancy")
    return us, limit


def gemm_flop_us(s: Gemm, gpu: Gpu) -> float:
    """The product at the GPU's full tensor-core rate: the floor no config goes under."""
    return 2.0 * s.m * s.n * s.k / gpu.flops * 1e6


def roofline_us(s: Gemm, gpu: Gpu) -> float:
    es = element_bytes(s.dtype)
    return max(gemm_flop_us(s, gpu), (s.m * s.k + s.k * s.n + s.m * s.n) * es / gpu.hbm_bytes_per_s * 1e6)

