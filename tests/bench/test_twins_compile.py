"""Every raw Triton twin compiles for Hopper (sm_90) on any machine, with the tiles the GPU
config table gives the tilesafe kernels; the GEMM and attention twins use tensor cores (wgmma,
or mma.sync for the 16-row tiles of the M <= 16 path, as the tilesafe kernel does)."""
import os

import pytest

triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from tilesafe.bench.twins import attention, elementwise, matmul, read, reductions, rows  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                reason="TRITON_INTERPRET=1 makes Triton's own library interpreted")
SCALARS = {"eps": "fp32", "qk_scale": "fp32", "log2_theta": "fp32"}
F32_PTRS = {"acc_ptr", "m_ptr", "l_ptr", "s_ptr", "out_ptr", "part_ptr", "best_ptr"}
I32_PTRS = {"lens_ptr", "pos_ptr", "count_ptr", "at_ptr", "idx_ptr"}
EVEN = dict(EVEN_M=True, EVEN_N=True, EVEN_K=True, TF32=False, A_TMA=False, B_TMA=False, B_COLS=False, C_TMA=False)
TMA = dict(EVEN, A_TMA=True, B_TMA=True, B_COLS=True, C_TMA=True)   # x @ w.T with every operand through TMA
CASES = {
    "add": (elementwise.binary, dict(OP=elementwise.ADD, BLOCK=2048, EVEN=True), None),
    "silu_mul": (elementwise.binary, dict(OP=elementwise.SILU_MUL, BLOCK=2048, EVEN=False), None),
    "mm": (matmul.mm, dict(BM=128, BN=128, BK=64, **EVEN), "wgmma"),
    "mm_tma": (matmul.mm, dict(BM=128, BN=128, BK=64, **TMA), "cp.async.bulk.tensor"),
    "mm_persistent": (matmul.mm_persistent, dict(BM=128, BN=128, BK=64, GROUP=8, **dict(EVEN, EVEN_N=False)), "wgmma"),
    "gemv": (matmul.skinny, dict(BM=1, BN=16, BK=512, DOT=False, **EVEN), None),
    "gemv_prefetch": (matmul.skinny, dict(BM=1, BN=8, BK=1024, DOT=False, PREFETCH=True, **EVEN), None),
    "skinny_m16": (matmul.skinny, dict(BM=16, BN=16, BK=512, DOT=True, **EVEN), "mma.sync"),
    "split_k": (matmul.split_k, dict(BM=64, BN=64, BK=128, DOT=True, TF32=False, EVEN_M=True, EVEN_N=True, EVEN_K=True),
                "wgmma"),
    "split_k_gemv": (matmul.split_k, dict(BM=1, BN=16, BK=512, DOT=False, TF32=False, EVEN_M=True, EVEN_N=True,
                                          EVEN_K=True), None),
    "split_sum": (matmul.split_sum, dict(BM=16, BN=128), None),
    "softmax": (rows.softmax, dict(BM=1, NP=4096, EVEN=True), None),
    "chunk_stats": (rows.chunk_stats, dict(BM=16, BN=2048, EVEN=False), None),
    "softmax_apply": (rows.softmax_apply, dict(BM=16, BN=2048, CP=64, EVEN=False), None),
    "rms_norm": (rows.rms_norm, dict(BM=1, NP=4096, EVEN=False), None),
    "rope": (rows.rope, dict(BT=4, BH=8, HP=64, EVEN=True), None),
    "flash_causal": (attention.flash, dict(CAUSAL=True, NEG_SCALE=False, BM=64, BN=64, DP=128, EVEN=True, REVERSE=True),
                     "wgmma"),
    "flash_rows_tma": (attention.flash_rows, dict(CAUSAL=True, NEG_SCALE=False, BM=128, BN=64, DP=128, EVEN_D=True, REVERSE=True,
                                                  Q_TMA=True, K_TMA=True, V_TMA=True), "cp.async.bulk.tensor"),
    "flash_rows": (attention.flash_rows, dict(CAUSAL=False, NEG_SCALE=False, BM=64, BN=64, DP=128, EVEN_D=True, REVERSE=False,
                                              Q_TMA=False, K_TMA=False, V_TMA=False), "wgmma"),
    "decode_partial": (attention.decode_partial, dict(NEG_SCALE=False, GP=16, GS=4, BN=64, DP=128, EVEN=True,
                                                      K_TMA=False, V_TMA=False), "mma.sync"),
    "decode_partial_tma": (attention.decode_partial, dict(NEG_SCALE=False, GP=16, GS=8, BN=64, DP=128, EVEN=True,
                                                          K_TMA=True, V_TMA=True), "cp.async.bulk.tensor"),
    "decode_partial_last": (attention.decode_partial, dict(NEG_SCALE=False, GP=16, GS=8, BN=64, DP=128, EVEN=True,
                                                           K_TMA=True, V_TMA=True, LAST=True),
                            "atom.global.gpu.acq_rel.add"),
    "decode_combine": (attention.decode_combine, dict(G=4, GS=4, SP=32, DP=128), None),
    "decode_combine_pdl": (attention.decode_combine, dict(G=4, GS=4, SP=32, DP=128, PDL=True), "griddepcontrol.wait"),
    "split_sum_pdl": (matmul.split_sum, dict(BM=16, BN=128, PDL=True), "griddepcontrol.wait"),
    "read": (read.read, dict(BLOCK=read.BLOCK, PER=read.PER), None),
    "log_softmax": (rows.softmax, dict(BM=1, NP=4096, EVEN=True, LOG=True), None),
    "log_softmax_apply": (rows.softmax_apply, dict(BM=16, BN=2048, CP=64, EVEN=False, LOG=True), None),
    "layer_norm": (rows.layer_norm, dict(BM=1, NP=4096, EVEN=True, HAS_B=True), None),
    "layer_norm_ragged": (rows.layer_norm, dict(BM=1, NP=4096, EVEN=False, HAS_B=False), None),
    "sum": (reductions.row_sum, dict(BM=4, BN=1024, EVEN=True), None),
    "argmax_partial": (reductions.argmax_partial, dict(BM=1, BN=1024, PER=8, EVEN=False), None),
    "argmax_final": (reductions.argmax_final, dict(BM=1, SP=32), None),
    "embedding": (reductions.embedding, dict(BT=4, BD=1024, EVEN=True), None),
    "bmm": (matmul.bmm, dict(BM=128, BN=128, BK=64, EVEN_M=True, EVEN_N=True, EVEN_K=True, TF32=False, A_TMA=False,
                             B_TMA=False, C_TMA=False, GROUP=1), "wgmma"),
    "bmm_persistent": (matmul.bmm_persistent, dict(BM=128, BN=256, BK=64, GROUP=8, EVEN_M=True, EVEN_N=True,
                                                   EVEN_K=True, TF32=False, A_TMA=False, B_TMA=False, C_TMA=False),
                       "wgmma"),
}


def _descriptors(c: dict) -> dict:
    """Descriptor arguments: name -> (passed as a host TMA descriptor, its box); when not, the
    launch passes the tensor itself."""
    bm, bn, bk, dp = (c.get(k) for k in ("BM", "BN", "BK", "DP"))
    return {"a": (c.get("A_TMA"), (bm, bk)), "b": (c.get("B_TMA"), (bn, bk) if c.get("B_COLS") else (bk, bn)),
            "c": (c.get("C_TMA"), (bm, bn)), "dq": (c.get("Q_TMA"), (bm, dp)), "dk": (c.get("K_TMA"), (bn, dp)),
            "dv": (c.get("V_TMA"), (bn, dp))}


@pytest.mark.parametrize("case", list(CASES))
def test_twin_compiles_for_hopper(case):
    fn, consts, mma = CASES[case]
    for flag in ("PDL", "PREFETCH", "LAST", "LOG"):             # constexprs with a default: give them as such
        if flag in fn.arg_names:
            consts = {flag: False, **consts}
    signature = {}
    descs = _descriptors(consts)
    for name in fn.arg_names:
        if name in consts:
            signature[name] = "constexpr"
        elif name in descs:
            use, box = descs[name]
            signature[name] = f"tensordesc<bf16[{box[0]}, {box[1]}]>" if use else "*bf16"
        elif name.endswith("_ptr"):
            signature[name] = ("*fp32" if name in F32_PTRS else "*i32" if name in I32_PTRS
                               else "*i64" if name == "ids_ptr" else "*bf16")
        else:
            signature[name] = SCALARS.get(name, "i32")
    k = triton.compile(ASTSource(fn, signature, consts, {}), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "num_stages": 3})
    ptx = k.asm["ptx"]
    if mma is None:
        assert "mma" not in ptx
    else:
        assert mma in ptx
    assert ("griddepcontrol" in ptx) == bool(consts.get("PDL"))
