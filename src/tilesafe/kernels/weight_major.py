"""Weight-major products of a few rows (2..128): `linear`'s x @ w.T with the weight as the
tensor cores' wide operand.

A batched decode step multiplies a few rows by a large weight. The row-major GEMM
(`matmul.mm_kernel`) puts the rows on the MMA's M side, where Hopper's warpgroup MMA needs 64
of them (fewer are padded, or the kernel drops to the older MMA), and its tiles of >= 64 output
columns leave most SMs idle on a 2560-6144 wide weight. Here each block owns BN rows of the
weight (BN output columns) and computes the transposed tile, acc (BN, BM) = w_tile (BN, BK) @
x_tile.T (BK, BM): the weight fills the MMA's M side, the rows (padded to BM >= 16, masked)
its N side, and every weight tile is read once for all BM rows, as the GEMV reads it for one.
Where the column tiles do not fill one wave of blocks, K is split and the last split of each
tile to finish adds the partials up in split order (`ts.last_arrival`, S16), as the GEMV's
split does.
"""
import tilesafe as ts

from . import scratch
from .gemm_steps import epilogue, mac, split_total
from .gemm_model import WEIGHT_MAJOR_MAX_ROWS as MAX_ROWS
from .gemm_model import weight_major_slots, weight_major_splits, weight_major_stages
from .launch import cdiv, launch, pow2, workers
from .machine_model import gpu_of


@ts.function
def k_slice_t(a, b, s, i, j, PER, TF32, BM, BN, BK):
    """The fp32 (BM, BN) sum over K tiles [s * PER, (s + 1) * PER) of output tile (i, j),
    computed transposed: the weight tile is the MMA's left operand."""
    pa = a.partition((BM, BK))                                   # (BM, BK) rows of x
    pb = b.partition((BK, BN))                                   # (BK, BN) of w.T: w's rows j
    lo = s * PER
    hi = min(lo + PER, ts.num_tiles(pa, 1))                      # this split's K tiles: [lo, hi)
    acc = ts.zeros((BN, BM), ts.f32)                             # (BN, BM): the output tile, transposed
    for k in range(lo, hi):
        acc = mac(ts.transpose(pb.load((k, j))), ts.transpose(pa.load((i, k))), acc, TF32)
    return ts.transpose(acc)                                     # (BM, BN)


@ts.kernel
def weight_major_kernel(c: ts.Mut["TC", ("BM", "BN")], a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")],
                        bias: ts.Ref["TB", (-1,)], T: ts.Const[ts.DType], TC: ts.Const[ts.DType],
                        TB: ts.Const[ts.DType], HAS_BIAS: ts.Const[bool], ACT: ts.Const[int], TF32: ts.Const[bool],
                        BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], PER: int, M: int, N: int, K: int):
    """Output tile (i, j) over all of K (PER: every K tile)."""
    j = ts.block_id(1)
    acc = k_slice_t(a, b, 0, ts.block_id(0), j, PER, TF32, BM, BN, BK)
    c.store(epilogue(acc, bias, j, BN, HAS_BIAS, ACT).astype(TC))


@ts.kernel
def weight_major_split_kernel(c: ts.MutLast["TC", ("BM", "BN")], part: ts.Mut[ts.f32, (1, "BM", "BN")],
                              a: ts.Ref["T", ("M", "K")], b: ts.Ref["T", ("K", "N")], bias: ts.Ref["TB", (-1,)],
                              T: ts.Const[ts.DType], TC: ts.Const[ts.DType], TB: ts.Const[ts.DType],
                              HAS_BIAS: ts.Const[bool], ACT: ts.Const[int], TF32: ts.Const[bool],
                              BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], PER: int, M: int, N: int,
                              K: int):
    """Split s = block_id(0) of output tile (i, j): its partial into part[s]; the last split of
    the tile to finish adds all of them up, in split order, and stores the tile."""
    j = ts.block_id(2)
    acc = k_slice_t(a, b, ts.block_id(0), ts.block_id(1), j, PER, TF32, BM, BN, BK)
    part.store(ts.reshape(acc, (1, BM, BN)))
    if ts.last_arrival():
        c.store(epilogue(split_total(part, BM, BN), bias, j, BN, HAS_BIAS, ACT).astype(TC))


def tiles(cfg: dict, m: int, n: int, k: int) -> tuple[int, int, int]:
    """(block_m, block_n, block_k): the rows padded to a power of two of 16..MAX_ROWS, the
    config's weight rows and K tile (>= 16 each: tensor-core tiles)."""
    bm = max(16, min(MAX_ROWS, pow2(m)))
    bn = max(16, min(cfg["block_n"], pow2(n)))
    bk = max(16, min(cfg["block_k"], pow2(k)))
    return bm, bn, bk


def run(cv, cfg: dict, common: dict) -> None:
    """c = epilogue(a @ b) for the arguments `common` (matmul.gemm's: a, b = w.T, bias,
    HAS_BIAS, ACT, TF32) into the output view cv, weight-major."""
    a, b = common["a"], common["b"]
    (m, k), n = a.shape, b.shape[1]
    bm, bn, bk = tiles(cfg, m, n, k)
    es, kt = a.dtype.itemsize, cdiv(k, bk)
    cfg = dict(cfg, num_stages=weight_major_stages(cfg.get("num_stages"), bm, bn, bk, es))
    slots = weight_major_slots(bm, bn, bk, cfg["num_stages"], es, workers(a.device), gpu_of(None).smem_per_sm)
    s = weight_major_splits(cfg.get("split_k"), cdiv(m, bm) * cdiv(n, bn), kt, slots)
    per = cdiv(kt, s)
    s = cdiv(kt, per)                                            # no empty split
    if s == 1:
        launch(weight_major_kernel, {"c": (cv, (bm, bn))}, cfg=cfg, BK=bk, PER=kt, **common)
        return
    part, = scratch.views(a.device, (s, m, n))
    launch(weight_major_split_kernel, {"c": (cv, (bm, bn)), "part": (part, (1, bm, bn))}, cfg=cfg, BK=bk, PER=per,
           pdl=True, **common)
