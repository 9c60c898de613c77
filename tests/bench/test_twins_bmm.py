"""The bmm twin launches with exactly the tiles, grid and Triton options of the tilesafe
`bmm_kernel` or `bmm_persistent_kernel` launch it was built from, and computes the same
result (as test_twins_mirror)."""
import sys

import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.bench.observe import LaunchFacts, Observer
from tilesafe.bench.twins import matmul

MM = sys.modules["tilesafe.kernels.matmul"]
WORKERS = 3                                       # the persistent grid, as the CPU backends run it


def test_the_bmm_twin_takes_the_launch_tiles_grid_and_options(launches):
    seen = {"bmm_kernel": LaunchFacts("bmm_kernel", {"BM": 128, "BN": 128, "BK": 64, "TF32": False}, (64, 8, 8),
                                      {"num_warps": 8, "num_stages": 3})}
    c, a, b = torch.empty(64, 1000, 1024), torch.empty(64, 1000, 128), torch.empty(64, 128, 1024)
    matmul.bmm_twin(seen, WORKERS)(c, a, b)
    [(name, grid, options, consts)] = launches
    assert name == "bmm" and grid == (64, 8, 8) and options == {"num_warps": 8, "num_stages": 3}
    assert consts == dict(BM=128, BN=128, BK=64, GROUP=1, EVEN_M=False, EVEN_N=True, EVEN_K=True, TF32=False,
                          A_TMA=False, B_TMA=False, C_TMA=False)                 # the launch used no TMA


@pytest.mark.parametrize("persistent", [False, True])
def test_the_bmm_twin_grid_is_the_observed_one(launches, persistent):
    a, b = torch.randn(3, 40, 48), torch.randn(3, 48, 36)
    with ts.backend("reference"), Observer([MM.bmm_kernel, MM.bmm_persistent_kernel]) as seen:
        tk.bmm(a, b, precision="tf32", config={"persistent": persistent, "group": 2})
    name = "bmm_persistent_kernel" if persistent else "bmm_kernel"
    assert list(seen) == [name]
    facts = seen[name]
    assert facts.grid == (None if persistent else (3, 2, 2)) and facts.tma == {}   # None: the backend's

    matmul.bmm_twin(seen, WORKERS)(torch.empty(3, 40, 36), a, b)
    [(twin, grid, options, consts)] = launches
    assert twin == ("bmm_persistent" if persistent else "bmm") and options == facts.options
    assert grid == ((WORKERS,) if persistent else facts.grid)                   # 12 tiles on 3 workers
    assert {k: consts[k] for k in ("BM", "BN", "BK")} == {k: facts.consts[k] for k in ("BM", "BN", "BK")}
    assert consts["TF32"] is True                                              # passed on as the launch had it
    assert consts["GROUP"] == (2 if persistent else 1)


# Under Triton's interpreter: ragged M, N and K (tiles of 32); b shared by the batch (a
# stride-0 view); every operand through rank-3 TMA descriptors, as a forced `tma=True`
# launch has them (the automatic choice keeps rank-3 tensors on pointers); and the
# persistent walk (matrix by matrix, grouped), which the interpreter runs on 3 workers.
TMA = {"a": "rows", "b": "rows", "c": "rows"}
CASES = {"pointers": (False, {"persistent": False}, {}), "shared_b": (True, {"persistent": False}, {}),
         "tma": (False, {"tma": True, "persistent": False}, TMA),
         "tma_shared_b": (True, {"tma": True, "persistent": False}, TMA),
         "persistent": (False, {"persistent": True, "group": 2}, {}),
         "persistent_tma_shared_b": (True, {"persistent": True, "tma": True}, TMA)}


@pytest.mark.parametrize("case", list(CASES))
def test_the_bmm_twin_computes_the_library_result(case):
    shared, cfg, tma = CASES[case]
    g = torch.Generator().manual_seed(3)
    a = torch.randn(3, 40, 48, generator=g)
    b = torch.randn(48, 36, generator=g) if shared else torch.randn(3, 48, 36, generator=g)
    with ts.backend("triton-interpreter"), Observer([MM.bmm_kernel, MM.bmm_persistent_kernel]) as seen:
        want = tk.bmm(a, b, config=cfg)
    [facts] = seen.values()
    assert facts.tma == tma
    bz = b.expand(3, 48, 36)                                                   # stride 0 over the batch
    got = matmul.bmm_twin(seen, WORKERS)(torch.full((3, 40, 36), float("nan")), a, bz)
    assert torch.allclose(got, want, atol=1e-5) and torch.allclose(got, a @ bz, atol=1e-4)
