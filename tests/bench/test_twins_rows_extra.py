"""The log-softmax and LayerNorm twins launch with the tiles, grid and Triton options of the
tilesafe launch they mirror (log-softmax: the softmax twins with the library's LOG constant
passed on), and compute the library's result."""
import importlib

import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.bench.observe import LaunchFacts, Observer
from tilesafe.bench.twins import rows

red = importlib.import_module("tilesafe.kernels.reduce")      # the modules (`tk.max` and co. are functions)
norms = importlib.import_module("tilesafe.kernels.norms")


def test_the_layer_norm_twin_takes_the_launch_tiles_and_options(launches):
    seen = {"layer_norm_kernel": LaunchFacts("layer_norm_kernel", {"HAS_B": True, "BM": 1, "NP": 4096}, (1, 1000),
                                             {"num_warps": 4})}
    x = torch.empty(1000, 2560)
    rows.layer_norm_twin(seen)(torch.empty_like(x), x, torch.empty(2560), torch.empty(2560), 1e-5)
    [(name, grid, options, consts)] = launches
    assert name == "layer_norm" and grid == (1000,) and options == {"num_warps": 4}
    assert consts == dict(BM=1, NP=4096, EVEN=False, HAS_B=True)      # 2560 columns pad to 4096


def test_the_log_softmax_twins_pass_the_log_constant_on(launches):
    seen = {"softmax_kernel": LaunchFacts("softmax_kernel", {"LOG": True, "BM": 1, "NP": 4096}, (1, 8192),
                                          {"num_warps": 4})}
    x = torch.empty(8192, 4096)
    rows.softmax_twin(seen)(torch.empty_like(x), x)
    pdl = {"num_warps": 4, "launch_pdl": True}
    seen = {"row_stats_kernel": LaunchFacts("row_stats_kernel", {"BM": 2, "BN": 2048}, (1, 32, 38), pdl,
                                            scalars={"PER": 2}),
            "softmax_apply_kernel": LaunchFacts("softmax_apply_kernel", {"LOG": True, "BM": 2, "BN": 2048, "CP": 64},
                                                (1, 32, 75), pdl, reversed_axes=(1, 2))}
    x = torch.empty(64, 151936)
    rows.softmax_twin(seen)(torch.empty_like(x), x)
    assert [(n, g, o) for n, g, o, _ in launches] == [("softmax", (8192,), {"num_warps": 4}),
                                                      ("chunk_stats", (32, 38), pdl), ("softmax_apply", (32, 75), pdl)]
    one, stats, apply = (c for _, _, _, c in launches)
    assert one == dict(BM=1, NP=4096, EVEN=True, LOG=True)
    assert "LOG" not in stats                                   # the statistics are softmax's
    assert apply == dict(BM=2, BN=2048, CP=64, EVEN=False, PDL=True, REVERSE=True, LOG=True)


@pytest.mark.parametrize("n", [100, 3000])                      # one tile a row; statistics per chunk, then a pass
def test_the_log_softmax_twin_computes_the_library_result(n):
    x = torch.randn(3, n, generator=torch.Generator().manual_seed(n)) * 4
    kernels = [red.softmax_kernel, red.row_stats_kernel, red.softmax_apply_kernel]
    with ts.backend("triton-interpreter"), Observer(kernels) as seen:
        want = tk.log_softmax(x)
    assert all(f.consts["LOG"] is True for k, f in seen.items() if k != "row_stats_kernel")
    assert ("row_stats_kernel" in seen) == (n > 1024)          # the CPU config's row_max
    got = rows.softmax_twin(seen)(torch.full_like(x, float("nan")), x)
    assert torch.allclose(got, want, atol=1e-5) and torch.allclose(got, torch.log_softmax(x, -1), atol=1e-4)


@pytest.mark.parametrize("has_b", [True, False])
def test_the_layer_norm_twin_computes_the_library_result(has_b):
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(7, 100, generator=g), torch.randn(100, generator=g), torch.randn(100, generator=g)
    b = b if has_b else None
    with ts.backend("triton-interpreter"), Observer([norms.layer_norm_kernel]) as seen:
        want = tk.layer_norm(x, w, b, 1e-5)
    facts = seen["layer_norm_kernel"]
    assert facts.consts["NP"] == 128 and 7 % facts.consts["BM"] != 0    # ragged rows and columns
    got = rows.layer_norm_twin(seen)(torch.full_like(x, float("nan")), x, w, w if b is None else b, 1e-5)
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.allclose(got, torch.nn.functional.layer_norm(x, (100,), w, b, 1e-5), atol=1e-4)
