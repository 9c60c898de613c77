"""GEMMs against torch in float64: ragged M/N/K, transposed operands, bias and activations,
tiled and persistent schedules, the weight-streaming path for M <= 16, batched products."""
import importlib

import numpy as np
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from kernel_helpers import assert_close, f64, poisoned, randn

F = torch.nn.functional
# Products of K ~ 50 terms: half inputs are exact in fp32, so only the output rounding counts.
MM_TOL = {"f32": dict(rtol=1e-4, atol=1e-4), "f16": dict(rtol=1e-2, atol=2e-2), "bf16": dict(rtol=2e-2, atol=5e-2)}


def t64(x):
    return torch.as_tensor(f64(x))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("schedule", ["tiled", "persistent"])
def test_matmul_ragged(backend, device, schedule, dtype):
    a, b = randn((70, 50), dtype, 1, device), randn((50, 40), dtype, 2, device)
    out = poisoned((70, 40), dtype, device)
    got = tk.matmul(a, b, out=out, config={"persistent": schedule == "persistent"})
    assert got is out
    assert_close(got, t64(a) @ t64(b), dtype, **MM_TOL[dtype])


@pytest.mark.parametrize("transpose", ["a", "b", "both"])
def test_matmul_transposed_operands_are_read_through_strides(backend, device, transpose):
    a = randn((50, 70), "f32", 3, device).T if transpose in ("a", "both") else randn((70, 50), "f32", 3, device)
    b = randn((40, 50), "f32", 4, device).T if transpose in ("b", "both") else randn((50, 40), "f32", 4, device)
    assert_close(tk.matmul(a, b), t64(a) @ t64(b), "f32", **MM_TOL["f32"])


@pytest.mark.parametrize("activation", [None, "silu", "gelu"])
def test_matmul_bias_activation_out_dtype(backend, device, activation):
    a, b = randn((40, 48), "f16", 5, device), randn((48, 36), "f16", 6, device)
    bias = randn((36,), "f32", 7, device)
    got = tk.matmul(a, b, out_dtype=ts.f32, bias=bias, activation=activation)
    assert got.dtype == torch.float32
    want = t64(a) @ t64(b) + t64(bias)
    want = {None: want, "silu": F.silu(want), "gelu": F.gelu(want, approximate="tanh")}[activation]
    assert_close(got, want, "f32", **MM_TOL["f32"])


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("schedule", ["tiled", "persistent"])
@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_bias_and_activation_on_both_schedules(backend, device, activation, schedule, dtype):
    # The epilogue runs on the fp32 accumulator before the one rounding to the output dtype.
    a, b = randn((70, 50), dtype, 20, device), randn((50, 40), dtype, 21, device)
    bias = randn((40,), dtype, 22, device)
    out = poisoned((70, 40), dtype, device)
    got = tk.matmul(a, b, bias=bias, activation=activation, out=out,
                    config={"persistent": schedule == "persistent"})
    assert got is out
    want = t64(a) @ t64(b) + t64(bias)
    want = {"silu": F.silu(want), "gelu": F.gelu(want, approximate="tanh")}[activation]
    assert_close(got, want, dtype, **MM_TOL[dtype])


@pytest.mark.reference_only
def test_fp32_precision_follows_torch(backend, device):
    a, b = randn((32, 64), "f32", 8, device), randn((64, 32), "f32", 9, device)
    exact = t64(a) @ t64(b)
    ieee = tk.matmul(a, b)                                   # torch's default: "highest"
    assert np.abs(f64(ieee) - exact.numpy()).max() < 1e-4
    tf32 = tk.matmul(a, b, precision="tf32")                 # inputs rounded to 10 mantissa bits
    err = np.abs(f64(tf32) - exact.numpy()).max()
    assert 1e-4 < err < 5e-2
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        assert np.array_equal(f64(tk.matmul(a, b)), f64(tf32))
    finally:
        torch.set_float32_matmul_precision(old)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("m", [1, 5, 16, 40])
def test_linear_decode_and_prefill(backend, device, m, dtype):
    x, w = randn((m, 96), dtype, 10, device), randn((72, 96), dtype, 11, device)     # w: (N, K)
    bias = randn((72,), dtype, 12, device)
    out = poisoned((m, 72), dtype, device)
    got = tk.linear(x, w, bias=bias, out=out)
    assert_close(got, F.linear(t64(x), t64(w), t64(bias)), dtype, **MM_TOL[dtype])


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("m", [1, 5, 40])
@pytest.mark.parametrize("splits", [2, 3, 50])
def test_split_k_partials_add_up_with_bias_and_activation(backend, device, m, splits, dtype):
    """K = 150 in tiles of 32: 5 K tiles over 2 or 3 splits (a ragged last split), or as many
    splits as tiles (50 asks for more); M = 1 uses FMAs, 5 and 40 tensor-core tiles."""
    x, w = randn((m, 150), dtype, 16, device), randn((72, 150), dtype, 17, device)
    bias = randn((72,), dtype, 18, device)
    out = poisoned((m, 72), dtype, device)
    got = tk.linear(x, w, bias=bias, activation="silu", out=out, config={"split_k": splits})
    assert got is out
    assert_close(got, F.silu(F.linear(t64(x), t64(w), t64(bias))), dtype, **MM_TOL[dtype])


@pytest.mark.parametrize("m, splits, dtype", [(1, 3, "f32"), (40, 3, "bf16"), (5, 50, "f32")])
def test_one_kernel_split_k_adds_the_splits_in_the_last_block(backend, device, monkeypatch, m, splits, dtype):
    """`one_kernel`: the last split of each output tile to finish adds the splits up and
    stores the tile (S16), in one launch; the same result as the two-kernel form (ragged
    last split, ragged M and N, bias and activation in the last block's epilogue)."""
    mm = importlib.import_module("tilesafe.kernels.matmul")
    if device == "cuda" and m <= mm.SKINNY_M:
        m += mm.SKINNY_M        # the GPU sends up to 16 rows to its tuned GEMV configs (their own splits)
    x, w = randn((m, 150), dtype, 26, device), randn((72, 150), dtype, 27, device)
    bias = randn((72,), dtype, 28, device)
    launched = []
    real = mm.launch
    monkeypatch.setattr(mm, "launch", lambda kernel, outputs, **kw: (launched.append(kernel.name),
                                                                       real(kernel, outputs, **kw))[1])
    cfg = {"split_k": splits, "one_kernel": True}
    out = poisoned((m, 72), dtype, device)
    got = tk.linear(x, w, bias=bias, activation="silu", out=out, config=cfg)
    assert got is out and launched == ["split_k_last_kernel"]
    assert_close(got, F.silu(F.linear(t64(x), t64(w), t64(bias))), dtype, **MM_TOL[dtype])
    again = tk.linear(x, w, bias=bias, activation="silu", out=poisoned((m, 72), dtype, device), config=cfg)
    assert np.array_equal(f64(again), f64(got))      # the tickets are back at zero: the same sum again


@pytest.mark.parametrize("m, cfg, tile", [
    (1, {"block_n": 4, "block_k": 64, "split_k": 1}, (1, 4)),       # GEMV: columns narrower than 16
    (1, {"block_n": 2, "block_k": 128, "split_k": 1}, (1, 2)),
    (1, {"block_n": 8, "block_k": 32, "split_k": 2}, (1, 8)),       # ... and split over K
    (5, {"block_n": 4, "block_k": 64, "split_k": 1}, (16, 16)),     # tensor cores: never below 16
    (5, {"block_m": 64, "block_n": 16, "block_k": 32, "split_k": 1}, (64, 16)),   # rows padded to 64
])
def test_skinny_tiles_follow_the_config(backend, device, monkeypatch, m, cfg, tile):
    mm = importlib.import_module("tilesafe.kernels.matmul")
    x, w = randn((m, 150), "f32", 21, device), randn((70, 150), "f32", 22, device)    # ragged N and K
    launched = []
    real = mm.launch
    monkeypatch.setattr(mm, "launch", lambda kernel, outputs, **kw: (launched.append((kernel.name, outputs)),
                                                                       real(kernel, outputs, **kw))[1])
    out = poisoned((m, 70), "f32", device)
    got = tk.linear(x, w, bias=None, activation="gelu", out=out, config=cfg)
    first_name, first_outputs = launched[0]
    (_, first_tile), = first_outputs.values()
    assert first_tile[-2:] == tile
    assert first_name == ("split_k_kernel" if cfg["split_k"] > 1 else "skinny_kernel")
    assert_close(got, F.gelu(F.linear(t64(x), t64(w)), approximate="tanh"), "f32", **MM_TOL["f32"])


@pytest.mark.parametrize("bk", [32, 512])          # several K tiles (ragged last one), or one
def test_gemv_prefetch_loads_the_next_k_tile_first(backend, device, bk):
    x, w = randn((1, 300), "f32", 41, device), randn((70, 300), "f32", 42, device)
    out = poisoned((1, 70), "f32", device)
    got = tk.linear(x, w, out=out, config={"block_n": 8, "block_k": bk, "split_k": 1, "prefetch": True})
    assert_close(got, F.linear(t64(x), t64(w)), "f32", **MM_TOL["f32"])


def test_tail_split_rule():
    mm = importlib.import_module("tilesafe.kernels.matmul")
    on = {"tail_split": True}
    # H200, 2048 x 2560: 320 tiles of 128 x 128 on 132 SMs -> 13 rows of tiles (260) in two
    # waves, the last 3 rows (60 tiles) in 2 K-slices; 160 tiles of 128 x 256 -> 130, 4 slices
    assert mm.tail_split(on, 2048, 2560, 128, 128, 64, 132) == (0, 1664, 2)
    assert mm.tail_split(on, 2048, 2560, 128, 256, 64, 132) == (0, 1664, 4)
    # 128 x 10240 (32B qkv at M = 128): one row of 160 tiles of 128 x 64 -> 132 columns of
    # tiles in one wave, the last 28 in 4 K-slices (112 blocks)
    assert mm.tail_split(on, 128, 10240, 128, 64, 80, 132) == (1, 8448, 4)
    assert mm.tail_split(on, 128, 6144, 128, 64, 40, 132) is None      # 96 tiles: not one whole wave
    assert mm.tail_split({"tail_split": False}, 2048, 2560, 128, 128, 64, 132) is None
    assert mm.tail_split(on, 2048, 2048, 128, 128, 64, 132) is None    # 128 tiles left: too many to split
    assert mm.tail_split(on, 1536, 1408, 128, 128, 64, 132) is None    # 132 tiles: one whole wave already
    assert mm.tail_split(on, 2048, 2560, 128, 128, 6, 132) is None     # too few K tiles to split


def test_tail_split_runs_whole_waves_then_split_rows(backend, device, monkeypatch):
    mm = importlib.import_module("tilesafe.kernels.matmul")
    m, n, k = (1056, 160, 512) if device == "cuda" else (100, 30, 256)   # ragged M and N on the CPU
    cfg = {"block_m": 32, "block_n": 32, "block_k": 32, "tail_split": True, "persistent": False}
    axis, rows, splits = mm.tail_split(cfg, m, n, 32, 32, k // 32,
                                       importlib.import_module("tilesafe.kernels.launch").workers(device))
    assert axis == 0
    a, b, bias = randn((m, k), "f32", 31, device), randn((k, n), "f32", 32, device), randn((n,), "f32", 33, device)
    launched = []
    real = mm.launch
    monkeypatch.setattr(mm, "launch", lambda kernel, outputs, **kw: (launched.append((kernel.name, outputs)),
                                                                       real(kernel, outputs, **kw))[1])
    out = poisoned((m, n), "f32", device)
    got = tk.matmul(a, b, bias=bias, activation="silu", out=out, config=cfg)
    assert [name for name, _ in launched] == ["mm_kernel", "split_k_kernel", "split_sum_kernel"]
    assert launched[0][1]["c"][0].shape == (rows, n) and launched[1][1]["part"][0].shape == (splits, m - rows, n)
    assert_close(got, F.silu(t64(a) @ t64(b) + t64(bias)), "f32", **MM_TOL["f32"])


@pytest.mark.parametrize("one_kernel", [False, True])
def test_tail_split_of_one_row_of_tiles_runs_whole_waves_of_columns_then_split_columns(backend, device,
                                                                                       monkeypatch, one_kernel):
    """One row of tiles (M = 24 under 32-row tiles): the first columns of tiles fill whole
    waves, the last columns run as K-slices; the bias follows its columns. `one_kernel`: the
    K-slices' last block of each tile stores into the column view of the output (strided)."""
    mm = importlib.import_module("tilesafe.kernels.matmul")
    workers = importlib.import_module("tilesafe.kernels.launch").workers(device)
    m, k, n = 24, 256, 32 * (workers + 1) - 5                 # a ragged last column tile
    cfg = {"block_m": 32, "block_n": 32, "block_k": 32, "tail_split": True, "persistent": False,
           "one_kernel": one_kernel}
    assert mm.tail_split(cfg, m, n, 32, 32, k // 32, workers) == (1, 32 * workers, 2)
    a, b, bias = randn((m, k), "f32", 41, device), randn((k, n), "f32", 42, device), randn((n,), "f32", 43, device)
    launched = []
    real = mm.launch
    monkeypatch.setattr(mm, "launch", lambda kernel, outputs, **kw: (launched.append((kernel.name, outputs, kw)),
                                                                       real(kernel, outputs, **kw))[1])
    out = poisoned((m, n), "f32", device)
    got = tk.matmul(a, b, bias=bias, activation="silu", out=out, config=cfg)
    names = ["mm_kernel", "split_k_last_kernel"] if one_kernel else ["mm_kernel", "split_k_kernel", "split_sum_kernel"]
    assert [name for name, _, _ in launched] == names
    assert launched[0][1]["c"][0].shape == (m, 32 * workers) and launched[1][1]["part"][0].shape == (2, m, 27)
    assert launched[-1][2]["bias"].shape == (27,)
    assert_close(got, F.silu(t64(a) @ t64(b) + t64(bias)), "f32", **MM_TOL["f32"])


def test_split_k_is_chosen_when_tiles_are_too_few_to_fill_the_workers(backend, device, monkeypatch):
    mm = importlib.import_module("tilesafe.kernels.matmul")   # the module (tk.matmul is the function)
    assert mm._splits({"split_k": None, "min_blocks": 264}, 40, 76) == 7       # 40 tiles: 7 splits
    assert mm._splits({"split_k": None, "min_blocks": 264}, 40, 12) == 3       # >= 4 K tiles a split
    assert mm._splits({"split_k": None, "min_blocks": 264}, 300, 76) == 1      # enough tiles already
    assert mm._splits({"split_k": 4, "min_blocks": 264}, 300, 3) == 3          # at most one split a K tile
    a, b = randn((64, 256), "f32", 19, device), randn((256, 32), "f32", 20, device)
    launched = []
    real = mm.launch
    monkeypatch.setattr(mm, "launch", lambda kernel, outputs, **kw: (launched.append((kernel.name, outputs, kw)),
                                                                       real(kernel, outputs, **kw))[1])
    # Tiles given, so every backend has 2 output tiles and 8 K tiles: 2 splits.
    got = tk.matmul(a, b, config={"split_k": None, "min_blocks": 8, "block_m": 32, "block_n": 32, "block_k": 32})
    assert [name for name, _, _ in launched] == ["split_k_kernel", "split_sum_kernel"]
    part = launched[0][1]["part"][0]
    assert part.shape == (2, 64, 32) and launched[0][2]["PER"] == 4
    assert_close(got, t64(a) @ t64(b), "f32", **MM_TOL["f32"])


def test_linear_shapes(backend, device):
    w = randn((24, 40), "f32", 13, device)
    x1 = randn((40,), "f32", 14, device)
    got = tk.linear(x1, w, activation="silu")
    assert got.shape == (24,)
    assert_close(got, F.silu(F.linear(t64(x1), t64(w))), "f32", **MM_TOL["f32"])
    x3 = randn((2, 3, 40), "f32", 15, device)                    # (batch, tokens, K)
    assert_close(tk.linear(x3, w), F.linear(t64(x3), t64(w)), "f32", **MM_TOL["f32"])


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_bmm(backend, device, dtype, persistent):
    # persistent: 3 matrices of 2 x 1 tiles (CPU) walked by fewer workers, with groups of 1,
    # so a tile's matrix, row and column all come from the walk
    a, b = randn((3, 40, 48), dtype, 16, device), randn((3, 48, 24), dtype, 17, device)
    out = poisoned((3, 40, 24), dtype, device)
    got = tk.bmm(a, b, out=out, config={"persistent": persistent, "group": 1})
    assert_close(got, t64(a) @ t64(b), dtype, **MM_TOL[dtype])


def test_bmm_picks_the_persistent_kernel_for_many_tiles(backend, device, monkeypatch):
    mm = importlib.import_module("tilesafe.kernels.matmul")
    launched = []
    real = mm.launch
    monkeypatch.setattr(mm, "launch", lambda kernel, outputs, **kw: (launched.append(kernel.name),
                                                                       real(kernel, outputs, **kw))[1])
    a, b = randn((1, 32, 16), "f32", 20, device), randn((1, 16, 32), "f32", 21, device)
    tk.bmm(a, b)                                                  # one tile
    many_a, many_b = randn((8, 96, 16), "f32", 22, device), randn((8, 16, 96), "f32", 23, device)
    got = tk.bmm(many_a, many_b, config={"block_m": 16, "block_n": 16})     # 288 tiles (264 on two H200 waves)
    assert launched == ["bmm_kernel", "bmm_persistent_kernel"]
    assert_close(got, t64(many_a) @ t64(many_b), "f32", **MM_TOL["f32"])


def test_bmm_shared_and_transposed_b(backend, device):
    a = randn((2, 20, 33), "f32", 18, device)
    b = randn((17, 33), "f32", 19, device).T                    # (K, N), one for the whole batch
    got = tk.bmm(a, b, out_dtype="f16")
    assert got.dtype == torch.float16
    assert_close(got, t64(a) @ t64(b), "f16", **MM_TOL["f16"])


def test_tilesafe_tensors(backend, device):
    a = ts.tensor(np.linspace(-1, 1, 20 * 30, dtype=np.float32).reshape(20, 30), device=device)
    b = ts.tensor(np.linspace(2, -2, 30 * 18, dtype=np.float32).reshape(30, 18), device=device)
    got = tk.matmul(a, b)
    assert isinstance(got, ts.Tensor)
    np.testing.assert_allclose(got.numpy(), a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tk.matmul(a, b.T.T[:, :5]).numpy(), a.numpy() @ b.numpy()[:, :5], rtol=1e-4, atol=1e-4)


@pytest.mark.reference_only
def test_errors(backend, device):
    a, b = randn((4, 5), "f32", 20, device), randn((6, 3), "f32", 21, device)
    with pytest.raises(ts.LaunchError, match=r"inner dimensions differ: \(4, 5\) @ \(6, 3\)"):
        tk.matmul(a, b)
    with pytest.raises(ts.LaunchError, match=r"`bias` must have shape \(3,\)"):
        tk.matmul(a, randn((5, 3), "f32", 22, device), bias=a[0])
    with pytest.raises(ts.LaunchError, match="activation must be"):
        tk.linear(a, a, activation="tanh")
    with pytest.raises(ts.LaunchError, match="precision must be"):
        tk.matmul(a, a.T, precision="fp64")
    with pytest.raises(ts.LaunchError, match="dtype f16 but `a` has f32"):
        tk.matmul(a, a.T.half())
