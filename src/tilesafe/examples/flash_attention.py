"""Flash attention: softmax(Q K^T * scale) V without materialising the score matrix.

Each block owns BM query rows of one head and streams K and V in tiles of BN keys, keeping
a running row max `m`, row sum `l` and output accumulator (the online softmax). `causal` is
a compile-time constant (`ts.Const[bool]`), so each value is its own specialization. Grouped
query attention shares one K/V head among GROUP query heads: `kv_head = head // GROUP`.
Q, K, V and O share a dtype `T` (f32, f16, bf16); scores, statistics and the accumulator
are fp32, and `p` is rounded to T for the product with V (both `ts.mma` operands have one dtype).
"""
import numpy as np

import tilesafe as ts


@ts.kernel(preconditions=["dim(o, 0) == dim(q, 0)", "dim(o, 1) == dim(q, 1)", "dim(o, 2) == D",   # o shaped like q
                           "H == HKV * GROUP"])                                  # GROUP query heads per KV head
def attention(o: ts.Mut["T", (1, "BM", "D")], q: ts.Ref["T", ("H", "S", "D")],
              k: ts.Ref["T", ("HKV", "S", "D")], v: ts.Ref["T", ("HKV", "S", "D")],
              scale: float, T: ts.Const[ts.DType], causal: ts.Const[bool], GROUP: ts.Const[int],
              BM: ts.Const[int], BN: ts.Const[int], D: ts.Const[int], H: int, HKV: int, S: int):
    pq = q.partition((1, BM, D))                                  # query tiles: (1, BM, D)
    pk = k.partition((1, BN, D))                                  # key tiles: (1, BN, D)
    pv = v.partition((1, BN, D))                                  # value tiles: (1, BN, D)
    head, i = ts.block_id(0), ts.block_id(1)
    kv_head = head // GROUP
    qt = ts.reshape(pq.load((head, i, 0)), (BM, D))               # (BM, D)
    rows = ts.expand_dims(i * BM + ts.arange(0, BM), 1)           # (BM, 1) query positions
    m = ts.full((BM, 1), -float("inf"), ts.f32)                   # (BM, 1) running max
    l = ts.zeros((BM, 1), ts.f32)                                 # (BM, 1) running sum
    acc = ts.zeros((BM, D), ts.f32)                               # (BM, D)
    for j in range(ts.num_tiles(pk, 1)):
        kt = ts.reshape(pk.load((kv_head, j, 0)), (BN, D))        # (BN, D)
        vt = ts.reshape(pv.load((kv_head, j, 0)), (BN, D))        # (BN, D)
        s = ts.dot(qt, ts.transpose(kt)) * scale                  # (BM, BN)
        cols = ts.expand_dims(j * BN + ts.arange(0, BN), 0)       # (1, BN) key positions
        keep = cols < S                                           # (1, BN): drop padded keys
        if causal:
            keep = keep & (cols <= rows)                          # (BM, BN)
        s = ts.where(keep, s, -float("inf"))                      # (BM, BN)
        m_new = ts.maximum(m, ts.max(s, axis=1, keepdims=True))   # (BM, 1)
        p = ts.exp(s - m_new)                                     # (BM, BN)
        alpha = ts.exp(m - m_new)                                 # (BM, 1) rescales the old state
        l = l * alpha + ts.sum(p, axis=1, keepdims=True)          # (BM, 1)
        acc = ts.mma(p.astype(T), vt, acc * alpha)                # (BM, D); p rounded to V's dtype
        m = m_new
    o.store(ts.reshape(acc / l, (1, BM, D)).astype(T))            # (1, BM, D)


def reference(q, k, v, scale, causal):
    """Plain NumPy attention with GQA: (H, S, D) queries, (HKV, S, D) keys and values."""
    group = q.shape[0] // k.shape[0]
    k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)   # (H, S, D)
    s = (q @ k.transpose(0, 2, 1)) * scale                             # (H, S, S)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v                     # (H, S, D)


def main():
    rng = np.random.default_rng(0)
    H, HKV, S, D = 4, 2, 80, 64                                        # 2 query heads per K/V head
    q = rng.standard_normal((H, S, D)).astype(np.float32)             # (H, S, D)
    k = rng.standard_normal((HKV, S, D)).astype(np.float32)           # (HKV, S, D)
    v = rng.standard_normal((HKV, S, D)).astype(np.float32)           # (HKV, S, D)
    scale = 1.0 / np.sqrt(D)
    for causal in (False, True):
        o = ts.empty((H, S, D))
        out = attention(o.partition((1, 32, D)), ts.tensor(q), ts.tensor(k), ts.tensor(v),
                        scale=scale, causal=causal, GROUP=H // HKV, BN=32).sync()   # grid (4, 3, 1)
        result = out.unpartition().numpy()                             # (H, S, D)
        np.testing.assert_allclose(result, reference(q, k, v, scale, causal), rtol=1e-4, atol=1e-5)
    print(f"flash_attention: ok, {H} heads ({HKV} K/V heads), seq {S}, head dim {D}, causal and not")


if __name__ == "__main__":
    main()
