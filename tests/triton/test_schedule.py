"""Schedule hints: carried apart from the IR, part of the compiled-code key, never the results."""
import numpy as np
import pytest

import tilesafe as ts
from tilesafe.runtime.compile_ahead import compile_ahead
from triton_helpers import gemm


@ts.kernel
def axpy(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int, a: float):
    z.store(ts.load_tile_like(x, z) * a + 1.0)


@pytest.mark.parametrize("backend", ["reference", "triton-interpreter"])
def test_a_schedule_changes_the_code_key_not_the_result(backend):
    x = ts.tensor(np.random.default_rng(3).standard_normal(300).astype(np.float32))
    with ts.backend(backend):
        outs = []
        for sched in (None, ts.schedule(num_warps=8, num_stages=2), ts.schedule(num_warps=2)):
            z = ts.full(300, np.nan)
            outs.append(axpy(z.partition((128,)), x, a=3.0, schedule=sched).sync().unpartition().numpy())
    for out in outs:
        np.testing.assert_allclose(out, x.numpy() * 3.0 + 1.0, rtol=1e-6)
    keys = [k for k in axpy.specializer.code if k[1] == backend]
    assert len({k[-1] for k in keys}) == 3          # one compiled entry per schedule


def test_kernel_default_schedule_and_bad_hints():
    @ts.kernel(schedule=ts.schedule(num_warps=4))
    def copy(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
        z.store(ts.load_tile_like(x, z))

    x = ts.tensor(np.arange(64, dtype=np.float32) - 7.5)
    with ts.backend("reference"):
        out = copy(ts.empty(64).partition((32,)), x).sync().unpartition()
    assert np.array_equal(out.numpy(), x.numpy())
    assert copy.schedule == ts.schedule(num_warps=4)
    with pytest.raises(ts.LaunchError, match="num_warps=3"):
        ts.schedule(num_warps=3)
    with pytest.raises(ts.LaunchError, match="schedule= takes ts.schedule"):
        copy(ts.empty(64).partition((32,)), x, schedule={"num_warps": 8})


def test_num_warps_reaches_the_hopper_binary():
    specs = ts.spec((256, 256), ts.bf16, tile=(128, 128)), ts.spec((256, 256), ts.bf16), ts.spec((256, 256), ts.bf16)
    four = compile_ahead(gemm, *specs, BK=64, schedule=ts.schedule(num_warps=4))
    eight = compile_ahead(gemm, *specs, BK=64, schedule=ts.schedule(num_warps=8, num_stages=4))
    assert '"ttg.num-warps" = 4' in four.asm["ttgir"]
    assert '"ttg.num-warps" = 8' in eight.asm["ttgir"]
    assert four.metadata.num_warps == 4 and eight.metadata.num_stages == 4
