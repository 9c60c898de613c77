"""The sum, argmax and embedding twins launch with exactly the tiles, grid and Triton options
of the tilesafe launches they were built from (observed, not re-derived), and compute the
library's result, with whole tiles and ragged ones."""
import sys

import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.bench import families
from tilesafe.bench.observe import LaunchFacts, Observer
from tilesafe.bench.progress import Progress
from tilesafe.bench.runner import run_workload
from tilesafe.bench.timing import Policy
from tilesafe.bench.twins import reductions
from tilesafe.bench.workload import TORCH, TWIN, Impl, Setup

RED, LOOKUP = sys.modules["tilesafe.kernels.reduce"], sys.modules["tilesafe.kernels.rope"]


@pytest.fixture
def recorded(monkeypatch):
    """Launches recorded on their way to Triton's interpreter."""
    seen, real = [], reductions.launch

    def record(fn, grid, *args, options=None, **consts):
        seen.append((fn.__name__, grid, options, consts))
        real(fn, grid, *args, options=options, **consts)
    monkeypatch.setattr(reductions, "launch", record)
    return seen


def test_the_sum_twin_takes_the_observed_tiles_and_options(launches):
    seen = {"reduce_kernel": LaunchFacts("reduce_kernel", {"BM": 4, "OP": 0, "BN": 1024}, (1, 2048), {"num_warps": 4})}
    reductions.sum_twin(seen)(torch.empty(8192), torch.empty(8192, 4096))
    assert launches == [("row_sum", (2048,), {"num_warps": 4}, dict(BM=4, BN=1024, EVEN=True))]


def test_the_argmax_twin_takes_the_chunk_count_from_the_grid(launches):
    seen = {"argmax_partial_kernel": LaunchFacts("argmax_partial_kernel", {"BM": 1, "BN": 1024, "PER": 8}, (64, 19),
                                                 {"num_warps": 4}),
            "argmax_final_kernel": LaunchFacts("argmax_final_kernel", {"BM": 1, "SP": 32}, (64,))}
    workspace, run = reductions.argmax_twin(seen)
    x = torch.empty(64, 151936)
    ws = workspace(x)
    assert [(w.shape, w.dtype) for w in ws] == [((64, 19), torch.float32), ((64, 19), torch.int32)]
    run(torch.empty(64, dtype=torch.int32), x, ws)
    assert launches == [("argmax_partial", (64, 19), {"num_warps": 4}, dict(BM=1, BN=1024, PER=8, EVEN=False)),
                        ("argmax_final", (64,), {}, dict(BM=1, SP=32))]   # the final launch: Triton's defaults


def test_the_embedding_twin_takes_the_observed_tiles_and_options(launches):
    seen = {"embedding_kernel": LaunchFacts("embedding_kernel", {"BT": 4, "BD": 1024}, (4096, 4), {"num_warps": 4})}
    reductions.embedding_twin(seen)(torch.empty(16384, 4096), torch.zeros(16384, dtype=torch.long),
                                    torch.empty(1000, 4096))
    assert launches == [("embedding", (4096, 4), {"num_warps": 4}, dict(BT=4, BD=1024, EVEN=True))]


# Under Triton's interpreter on the CPU tiles (sum 2 x 32, argmax 2 x 32 in chunks of 64,
# embedding 2 x 32): whole tiles, then ragged ones.
@pytest.mark.parametrize("shape", [(8, 64), (7, 45)])
def test_the_sum_twin_computes_the_library_result(shape, recorded):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    with ts.backend("triton-interpreter"), Observer([RED.reduce_kernel]) as seen:
        want = tk.sum(x)
    got = reductions.sum_twin(seen)(torch.full(shape[:1], float("nan")), x)
    [(_, grid, _, consts)] = recorded
    assert seen["reduce_kernel"].grid == (1, *grid) and consts["EVEN"] == (shape == (8, 64))
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("shape", [(4, 256), (3, 3000)])
def test_the_argmax_twin_computes_the_library_result(shape, recorded):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    x[0, 5] = x[0, 40] = x[0, shape[1] - 3] = x.max() + 1       # ties across tiles and chunks: the first wins
    with ts.backend("triton-interpreter"), Observer([LOOKUP.argmax_partial_kernel, LOOKUP.argmax_final_kernel]) as seen:
        want = tk.argmax(x)
    workspace, run = reductions.argmax_twin(seen)
    got = run(torch.full(shape[:1], -1, dtype=torch.int32), x, workspace(x))
    assert [g for _, g, _, _ in recorded] == [seen["argmax_partial_kernel"].grid, seen["argmax_final_kernel"].grid]
    assert torch.equal(got, want) and torch.equal(got.long(), x.argmax(-1)) and got[0] == 5


@pytest.mark.parametrize("vocab,d,n", [(50, 64, 8), (50, 40, 7)])
def test_the_embedding_twin_computes_the_library_result(vocab, d, n, recorded):
    g = torch.Generator().manual_seed(2)
    table, ids = torch.randn(vocab, d, generator=g), torch.randint(0, vocab, (n,), generator=g)
    with ts.backend("triton-interpreter"), Observer([LOOKUP.embedding_kernel]) as seen:
        want = tk.embedding(ids, table)
    got = reductions.embedding_twin(seen)(torch.full((n, d), float("nan")), ids, table)
    [(_, grid, _, _)] = recorded
    assert grid == seen["embedding_kernel"].grid and torch.equal(got, want) and torch.equal(got, table[ids])


def test_argmax_indices_are_checked_exactly_and_an_unwritten_twin_shows():
    [w] = families.FAMILIES["argmax"](Setup(device="cpu", size="tiny"))

    def off_by_one(b):
        got = b["x"].argmax(-1)
        got[0] += 1
        return got
    w.impls.append(Impl("off-by-one", TORCH, off_by_one))
    w.twin = lambda seen: Impl("twin", TWIN, lambda b: b["out"])               # writes nothing
    with ts.backend("reference"):
        rec = run_workload(w, None, Policy(min_working_set=1, l2_bytes=1), Progress(0, enabled=False))
    assert rec["impls"]["tilesafe"]["status"] == "ok" and rec["impls"]["torch.argmax"]["status"] == "ok"
    assert rec["impls"]["off-by-one"]["status"] == "wrong" and rec["impls"]["twin"]["status"] == "wrong"
