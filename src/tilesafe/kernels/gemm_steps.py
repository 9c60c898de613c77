"""The steps every tensor-core product shares: the multiply-accumulate and the epilogue
(bias, activation) of an fp32 output tile, used by `matmul`'s kernels, the fused GEMVs
(`linear_fusions`) and the weight-major kernels (`weight_major`)."""
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
