"""The steps every tensor-core product shares: the multiply-accumulate and the epilogue
(bias, activation) of an fp32 output tile, used by `matmul`'s kernels, the fused GEMVs
(`linear_fusions`) and the weight-major kernels (`weight_major`), and the sum of a K split's
partials that its last split to arrive stores (`matmul`'s one-kernel split, `weight_major`'s)."""
import tilesafe as ts

from .elementwise import unary_op


@ts.function
def mac(a, b, acc, TF32):
    """acc + a @ b, with tf32 products when TF32."""
    if TF32:
        r = ts.mma(a, b, acc, precision="tf32")
    else:
        r = ts.mma(a, b, acc)
    return r


@ts.function
def epilogue(acc, bias, j, BN, HAS_BIAS, ACT):
    """Bias (of output column tile j) and activation on an fp32 (BM, BN) tile."""
    if HAS_BIAS:
        acc = acc + ts.reshape(ts.load(bias, (j,), shape=(BN,)).astype(ts.f32), (1, BN))
    if ACT >= 0:
        acc = unary_op(acc, ACT)
    return acc


@ts.function
def split_total(part, BM, BN):
    """The fp32 (BM, BN) sum of the group's partials of `part` (1, BM, BN) tiles, in split
    order (the same bits whichever split arrives last); inside `if ts.last_arrival():`."""
    total = ts.zeros((BM, BN), ts.f32)                           # (BM, BN)
    for s in part.members():
        total = total + ts.reshape(part.load(s), (BM, BN))
    return total
