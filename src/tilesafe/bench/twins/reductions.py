"""Twins of the reduction and lookup kernels, over rows of (M, N) with unit column stride:

- `reduce_kernel` (sum): BM rows per program, walking the row in (BM, BN) column tiles
  accumulated in fp32, one sum per row stored in x's dtype;
- argmax, two-stage as the library's: `argmax_partial_kernel` (program (i, s): the best
  fp32 value of BM rows over the PER column tiles of chunk s, and its index, the first on
  ties) into an (M, chunks) workspace, then `argmax_final_kernel` (per row, the index of the
  first best chunk, as i32);
- `embedding_kernel`: (BT, BD) tiles of the table rows at BT ids.

The embedding twin reads the rows at the ids as given, as a Triton user writes it; the
library's bounds check (ids outside [0, V) read zeros) is part of the safety it measures.
"""
import torch
import triton
import triton.language as tl

from .launch import cdiv, launch
from .tiles import load_rows


@triton.jit
def row_sum(z_ptr, x_ptr, M, N, sxm, BM: tl.constexpr, BN: tl.constexpr, EVEN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)                   # summed across tiles, reduced once at the end
    for k in range(0, tl.cdiv(N, BN)):
        acc += load_rows(x_ptr, rm, k * BN + rn, M, N, sxm, EVEN, 0.0)
    s = tl.sum(acc, axis=1).to(z_ptr.dtype.element_ty)
    if EVEN:
        tl.store(z_ptr + rm, s)
    else:
        tl.store(z_ptr + rm, s, mask=rm < M)


@triton.jit
def argmax_partial(best_ptr, at_ptr, x_ptr, M, N, sxm, S, BM: tl.constexpr, BN: tl.constexpr, PER: tl.constexpr,
                   EVEN: tl.constexpr):
    i, s = tl.program_id(0), tl.program_id(1)
    rm = i * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    best = tl.full((BM,), -float("inf"), tl.float32)
    at = tl.zeros((BM,), tl.int32)
    for t in range(s * PER, tl.minimum((s + 1) * PER, tl.cdiv(N, BN))):
        v = load_rows(x_ptr, rm, t * BN + rn, M, N, sxm, EVEN, -float("inf"))
        vmax = tl.max(v, axis=1)
        better = vmax > best                               # strict: an earlier tile keeps a tie
        best = tl.where(better, vmax, best)
        at = tl.where(better, tl.argmax(v, axis=1) + t * BN, at)
    if EVEN:
        tl.store(best_ptr + rm * S + s, best)
        tl.store(at_ptr + rm * S + s, at)
    else:
        tl.store(best_ptr + rm * S + s, best, mask=rm < M)
        tl.store(at_ptr + rm * S + s, at, mask=rm < M)


@triton.jit
def argmax_final(idx_ptr, best_ptr, at_ptr, M, S, BM: tl.constexpr, SP: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rs = tl.arange(0, SP)
    inside = (rm[:, None] < M) & (rs[None, :] < S)         # SP = next_pow2(S): always masked
    v = tl.load(best_ptr + rm[:, None] * S + rs[None, :], mask=inside, other=-float("inf"))
    ix = tl.load(at_ptr + rm[:, None] * S + rs[None, :], mask=inside, other=0)
    first = tl.argmax(v, axis=1)                           # the first best chunk: chunks run left to right
    tl.store(idx_ptr + rm, tl.sum(tl.where(rs[None, :] == first[:, None], ix, 0), axis=1), mask=rm < M)


@triton.jit
def embedding(y_ptr, ids_ptr, table_ptr, NT, D, stv, sym, BT: tl.constexpr, BD: tl.constexpr, EVEN: tl.constexpr):
    rt = tl.program_id(0) * BT + tl.arange(0, BT)
    rd = tl.program_id(1) * BD + tl.arange(0, BD)
    if EVEN:
        rows = tl.load(ids_ptr + rt)
        v = tl.load(table_ptr + rows[:, None] * stv + rd[None, :])
        tl.store(y_ptr + rt[:, None] * sym + rd[None, :], v)
    else:
        mask = (rt[:, None] < NT) & (rd[None, :] < D)
        rows = tl.load(ids_ptr + rt, mask=rt < NT, other=0)
        v = tl.load(table_ptr + rows[:, None] * stv + rd[None, :], mask=mask)
        tl.store(y_ptr + rt[:, None] * sym + rd[None, :], v, mask=mask)


def sum_twin(seen):
    """`run(z, x)`: z = x.sum(-1) for x of shape (M, N) and a contiguous z of shape (M,)."""
    facts = seen["reduce_kernel"]
    bm, bn = facts.consts["BM"], facts.consts["BN"]

    def run(z, x):
        m, n = x.shape
        launch(row_sum, (cdiv(m, bm),), z, x, m, n, x.stride(0), options=facts.options, BM=bm, BN=bn,
               EVEN=m % bm == 0 and n % bn == 0)
        return z
    return run


def argmax_twin(seen):
    """`(workspace(x), run(idx, x, ws))`: idx (M,) i32 = x.argmax(-1) for x of shape (M, N),
    through a workspace of the observed chunk count (made once, before timing)."""
    part, final = seen["argmax_partial_kernel"], seen["argmax_final_kernel"]
    bm, bn, per = part.consts["BM"], part.consts["BN"], part.consts["PER"]
    chunks = part.grid[1]

    def workspace(x):
        m = x.shape[0]
        return (torch.empty((m, chunks), dtype=torch.float32, device=x.device),
                torch.empty((m, chunks), dtype=torch.int32, device=x.device))

    def run(idx, x, ws):
        m, n = x.shape
        best, at = ws
        launch(argmax_partial, (cdiv(m, bm), chunks), best, at, x, m, n, x.stride(0), chunks, options=part.options,
               BM=bm, BN=bn, PER=per, EVEN=m % bm == 0 and n % bn == 0)
        launch(argmax_final, (cdiv(m, final.consts["BM"]),), idx, best, at, m, chunks, options=final.options,
               BM=final.consts["BM"], SP=final.consts["SP"])
        return idx
    return workspace, run


def embedding_twin(seen):
    """`run(y, ids, table)`: y (T, D) = table[ids] for contiguous ids (T,) and a table (V, D)
    and y with unit column stride."""
    facts = seen["embedding_kernel"]
    bt, bd = facts.consts["BT"], facts.consts["BD"]

    def run(y, ids, table):
        t, d = ids.shape[0], table.shape[1]
        launch(embedding, (cdiv(t, bt), cdiv(d, bd)), y, ids, table, t, d, table.stride(0), y.stride(0),
               options=facts.options, BT=bt, BD=bd, EVEN=t % bt == 0 and d % bd == 0)
        return y
    return run
