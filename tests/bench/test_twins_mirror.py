"""A twin launches with exactly the tiles, grid and Triton options of the tilesafe launch it
was built from (observed, not re-derived), and computes the same result."""
import sys

import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.bench.observe import LaunchFacts, Observer
from tilesafe.bench.twins import attention, matmul

MM = sys.modules["tilesafe.kernels.matmul"]


def test_the_gemm_twin_takes_the_persistent_launch_tiles_group_and_options(launches):
    seen = {"mm_persistent_kernel": LaunchFacts("mm_persistent_kernel", {"BM": 128, "BN": 256, "BK": 64, "GROUP": 4,
                                                                        "TF32": False}, None, {"num_warps": 8})}
    c, a, b = torch.empty(1000, 2048), torch.empty(1000, 512), torch.empty(512, 2048)
    matmul.gemm_twin(seen, workers=132)(c, a, b)
    [(name, grid, options, consts)] = launches
    assert name == "mm_persistent" and grid == (min(8 * 8, 132),) and options == {"num_warps": 8}
    assert consts == dict(BM=128, BN=256, BK=64, GROUP=4, EVEN_M=False, EVEN_N=True, EVEN_K=True, TF32=False,
                          A_TMA=False, B_TMA=False, B_COLS=False, C_TMA=False)     # the launch used no TMA


def test_the_decode_twin_takes_the_split_count_from_the_grid(launches):
    seen = {"decode_partial_kernel": LaunchFacts("decode_partial_kernel", {"GP": 16, "GS": 4, "BN": 64, "DP": 128},
                                                 (32, 8), {"num_warps": 4, "num_stages": 3}),
            "decode_combine_kernel": LaunchFacts("decode_combine_kernel", {"G": 4, "GS": 4, "SP": 32, "DP": 128},
                                                 (32, 1))}
    workspace, run = attention.decode_twin(seen, 0.1)
    q = torch.empty(32, 128)
    ws = workspace(q)
    assert ws[0].shape == (32, 8 * 4, 128) and ws[1].shape == (32, 32)     # only the 4 real rows per KV head
    run(torch.empty(32, 128), q, torch.empty(8, 4096, 128), torch.empty(8, 4096, 128), torch.tensor([4096]), ws)
    assert [(n, g, o) for n, g, o, _ in launches] == [("decode_partial", (32, 8), {"num_warps": 4, "num_stages": 3}),
                                                      ("decode_combine", (32,), {})]
    consts = {k: v for k, v in launches[0][3].items() if k not in ("o_ptr", "count_ptr")}
    assert consts == dict(NEG_SCALE=False, GP=16, GS=4, BN=64, DP=128, EVEN=True, K_TMA=False, V_TMA=False,
                          PDL=False, LAST=False)


def test_the_one_kernel_decode_twin_combines_in_its_last_program(launches):
    seen = {"decode_rows_last_kernel": LaunchFacts("decode_rows_last_kernel", {"GP": 16, "GS": 4, "BN": 64,
                                                                              "DP": 128}, (32, 8), {"num_warps": 4})}
    workspace, run = attention.decode_twin(seen, 0.1)
    q = torch.empty(32, 128)
    ws = workspace(q)
    assert ws[3].shape == (8,) and not ws[3].any()                          # one ticket counter per KV head
    o = torch.empty(32, 128)
    run(o, q, torch.empty(8, 4096, 128), torch.empty(8, 4096, 128), torch.tensor([4096]), ws)
    [(name, grid, options, consts)] = launches                              # no second kernel
    assert name == "decode_partial" and grid == (32, 8) and consts["LAST"]
    assert consts["o_ptr"] is o and consts["count_ptr"] is ws[3]


def test_the_twins_launch_with_pdl_where_the_library_did(launches):
    pdl = {"num_warps": 4, "launch_pdl": True}
    seen = {"decode_rows_kernel": LaunchFacts("decode_rows_kernel", {"GP": 16, "GS": 4, "BN": 64, "DP": 128},
                                              (32, 8), pdl),
            "decode_combine_kernel": LaunchFacts("decode_combine_kernel", {"G": 4, "GS": 4, "SP": 32, "DP": 128},
                                                 (32, 1), {"launch_pdl": True})}
    workspace, run = attention.decode_twin(seen, 0.1)
    q, kv = torch.empty(32, 128), torch.empty(8, 4096, 128)
    run(torch.empty(32, 128), q, kv, kv, torch.tensor([4096]), workspace(q))
    seen = {"split_k_kernel": LaunchFacts("split_k_kernel", {"BM": 16, "BN": 32, "BK": 128, "DOT": True}, (4, 1, 80),
                                          pdl, scalars={"PER": 5}),
            "split_sum_kernel": LaunchFacts("split_sum_kernel", {"BM": 16, "BN": 128}, (1, 20), {"launch_pdl": True})}
    matmul.gemm_twin(seen, workers=132)(torch.empty(16, 2560), torch.empty(16, 2560), torch.empty(2560, 2560))
    assert [(n, o.get("launch_pdl"), c["PDL"]) for n, _, o, c in launches] == [
        ("decode_partial", True, True), ("decode_combine", True, True), ("split_k", True, True),
        ("split_sum", True, True)]


def test_the_decode_twin_reads_the_caches_through_tma_when_the_library_did(launches):
    seen = {"decode_rows_kernel": LaunchFacts("decode_rows_kernel", {"GP": 16, "GS": 8, "BN": 64, "DP": 128},
                                              (32, 8), {}, {"k": "rows", "v": "rows"}),
            "decode_combine_kernel": LaunchFacts("decode_combine_kernel", {"G": 8, "GS": 8, "SP": 32, "DP": 128},
                                                 (64, 1))}
    workspace, run = attention.decode_twin(seen, 0.1)
    q, kv = torch.empty(64, 128), torch.empty(8, 4096, 128)
    run(torch.empty(64, 128), q, kv, kv, torch.tensor([4096]), workspace(q))
    (name, grid, _, consts), _ = launches
    assert name == "decode_partial" and grid == (32, 8) and consts["K_TMA"] and consts["V_TMA"]


def test_the_flash_twin_reads_the_matrices_the_library_read(launches):
    seen = {"flash_rows_kernel": LaunchFacts("flash_rows_kernel", {"BM": 128, "BN": 64, "DP": 128}, (32, 8),
                                             {"num_warps": 8, "num_stages": 3}, {"q": "rows", "k": "rows", "v": "rows"},
                                             reversed_axes=(1,))}
    q, k = torch.empty(1, 32, 1024, 128), torch.empty(1, 8, 1024, 128)
    attention.flash_twin(seen, True, 0.1)(torch.empty(1, 32, 1024, 128), q, k, k)
    [(name, grid, options, consts)] = launches
    assert name == "flash_rows" and grid == (32, 8) and options == {"num_warps": 8, "num_stages": 3}
    assert consts == dict(CAUSAL=True, NEG_SCALE=False, BM=128, BN=64, DP=128, EVEN_D=True, Q_TMA=True, K_TMA=True,
                          V_TMA=True, REVERSE=True)


def test_flash_takes_the_matrix_kernel_when_sequences_divide_and_the_twin_agrees():
    import tilesafe.kernels.attention as att
    q, k, v = (torch.randn(1, 2, 64, 64, generator=torch.Generator().manual_seed(i)) for i in range(3))
    with ts.backend("triton-interpreter"), Observer([att.flash_kernel, att.flash_rows_kernel]) as seen:
        want = tk.flash_attention(q, k, v, causal=True, config={"block_m": 32, "block_n": 16})
    assert list(seen) == ["flash_rows_kernel"] and seen["flash_rows_kernel"].tma == {}
    assert seen["flash_rows_kernel"].reversed_axes == (1,)               # causal: longest query tiles first
    got = attention.flash_twin(seen, True, 64 ** -0.5)(torch.full_like(q, float("nan")), q, k, v)
    assert torch.allclose(got, want, atol=1e-5)


def test_observed_tiles_are_the_ones_the_library_launched():
    a, b = torch.randn(16, 96), torch.randn(96, 100)
    with ts.backend("reference"), Observer([MM.mm_kernel, MM.mm_persistent_kernel, MM.skinny_kernel]) as seen:
        tk.matmul(a, b, config={"block_n": 16, "block_k": 16})
    assert list(seen) == ["skinny_kernel"]
    facts = seen["skinny_kernel"]
    assert (facts.consts["BM"], facts.consts["BN"], facts.consts["DOT"]) == (16, 16, True)
    assert facts.grid == (1, 7) and facts.options == {}
    c = torch.full((16, 100), float("nan"))
    matmul.gemm_twin(seen, workers=3)(c, a, b)
    assert torch.allclose(c, a @ b, atol=1e-4)


def test_an_observer_records_nothing_when_the_call_raises():
    with pytest.raises(ts.LaunchError):
        with Observer([MM.mm_kernel]) as seen:
            tk.matmul(torch.randn(4, 5), torch.randn(6, 7))
    assert seen == {}


def test_attention_twins_through_tma_descriptors_compute_the_library_result():
    # Under Triton's interpreter the descriptor path runs too: both cache layouts, both flash masks.
    g = torch.Generator().manual_seed(0)
    q = torch.randn(8, 64, generator=g)
    seen = {"decode_rows_kernel": LaunchFacts("decode_rows_kernel", {"GP": 16, "GS": 4, "BN": 16, "DP": 64}, (5, 2),
                                              {}, {"k": "rows", "v": "rows"}),
            "decode_combine_kernel": LaunchFacts("decode_combine_kernel", {"G": 4, "GS": 4, "SP": 8, "DP": 64}, (8, 1))}
    workspace, run = attention.decode_twin(seen, 0.125)
    for kc in (torch.randn(2, 128, 64, generator=g), torch.randn(128, 2, 64, generator=g).transpose(0, 1)):
        vc = torch.randn(2, 128, 64, generator=g)
        got = run(torch.full((8, 64), float("nan")), q, kc, vc, torch.tensor([100], dtype=torch.int32), workspace(q))
        with ts.backend("reference"):
            want = tk.decode_attention(q, kc, vc, 100, scale=0.125)
        assert torch.allclose(got, want, atol=1e-5)
    seen = {"decode_rows_last_kernel": LaunchFacts("decode_rows_last_kernel", {"GP": 16, "GS": 4, "BN": 16,
                                                                              "DP": 64}, (5, 2), {},
                                                   {"k": "rows", "v": "rows"})}
    workspace, run = attention.decode_twin(seen, 0.125)
    ws = workspace(q)
    for n in (100, 7):                                                      # the counters reset themselves
        got = run(torch.full((8, 64), float("nan")), q, kc, vc, torch.tensor([n], dtype=torch.int32), ws)
        with ts.backend("reference"):
            want = tk.decode_attention(q, kc, vc, n, scale=0.125)
        assert torch.allclose(got, want, atol=1e-5) and not ws[3].any()
    q, k, v = (torch.randn(1, 4, 64, 64, generator=g) for _ in range(3))
    seen = {"flash_rows_kernel": LaunchFacts("flash_rows_kernel", {"BM": 32, "BN": 16, "DP": 64}, (4, 2), {},
                                             {"q": "rows", "k": "rows", "v": "rows"})}
    got = attention.flash_twin(seen, True, 0.125)(torch.full_like(q, float("nan")), q, k, v)
    with ts.backend("reference"):
        want = tk.flash_attention(q, k, v, causal=True, scale=0.125)
    assert torch.allclose(got, want, atol=1e-5)


# Under Triton's interpreter, 3 workers, every operand through host TMA descriptors:
# rows: 4 rows of 32 x 32 tiles -> 3 rows, then the last (ragged) row in 2 K-slices;
# columns: one row of 4 tiles (M = 24) -> 3 columns, then the last (ragged) column in
# 2 K-slices, with the weight a transposed (N, K) matrix (and c's 123-float rows too
# unaligned for TMA). Per case: a, b, b transposed, the split grid, the main launch's TMA.
TAIL_CASES = {"rows": ((100, 256), (256, 32), False, (2, 1, 1), {"a": "rows", "b": "rows", "c": "rows"}),
              "columns": ((24, 256), (123, 256), True, (2, 1, 1), {"a": "rows", "b": "columns"})}


@pytest.mark.parametrize("case", list(TAIL_CASES))
def test_the_tail_split_twin_and_tma_descriptors_compute_the_library_result(case):
    a_shape, b_shape, transposed, split_grid, tma = TAIL_CASES[case]
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(*a_shape, generator=g), torch.randn(*b_shape, generator=g)
    b = b.T if transposed else b
    cfg = {"block_m": 32, "block_n": 32, "block_k": 32, "tail_split": True, "persistent": False, "tma": True}
    kernels = [MM.mm_kernel, MM.mm_persistent_kernel, MM.split_k_kernel, MM.split_sum_kernel]
    with ts.backend("triton-interpreter"), Observer(kernels) as seen:
        want = tk.matmul(a, b, config=cfg)
    assert list(seen) == ["mm_kernel", "split_k_kernel", "split_sum_kernel"]
    assert seen["mm_kernel"].tma == tma
    assert seen["split_k_kernel"].grid == split_grid
    got = matmul.gemm_twin(seen, workers=3)(torch.full((a.shape[0], b.shape[1]), float("nan")), a, b)
    assert torch.allclose(got, want, atol=1e-4) and torch.allclose(got, a @ b, atol=1e-3)


def test_the_gemv_twin_prefetches_where_the_library_did():
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(1, 300, generator=g), torch.randn(70, 300, generator=g)
    with ts.backend("triton-interpreter"), Observer([MM.skinny_kernel]) as seen:
        want = tk.linear(x, w, config={"block_n": 8, "block_k": 32, "split_k": 1, "prefetch": True})
    assert seen["skinny_kernel"].consts["PREFETCH"] is True
    got = matmul.gemm_twin(seen, workers=3)(torch.full((1, 70), float("nan")), x, w.T)
    assert torch.allclose(got, want, atol=1e-4) and torch.allclose(got, x @ w.T, atol=1e-3)
