"""`compile_ahead` checks what a launch checks — S6 binding and the preconditions — once:
called directly (as `tilesafe check --target` and the compile tests do) it refused no
precondition, and `kernel.compile(target=)` bound the arguments twice."""
import pytest

import tilesafe as ts
from tilesafe.runtime.compile_ahead import compile_ahead


@ts.kernel(preconditions=["dim(x, 0) % 8 == 0"])
def copy8(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z))


def test_a_direct_compile_refuses_a_broken_precondition():
    with pytest.raises(ts.LaunchError) as ei:
        compile_ahead(copy8, ts.spec((12,), tile=(4,)), ts.spec((12,)), target="sm_90")
    assert "dim(x, 0) % 8 == 0" in ei.value.message


def test_a_compile_for_a_target_binds_once(binds):
    compiled = copy8.compile(ts.spec((16,), tile=(8,)), ts.spec((16,)), target="sm_90")
    assert "ld.global" in compiled.asm["ptx"] or "cp.async" in compiled.asm["ptx"]
    assert binds[0] == 1
    with pytest.raises(ts.LaunchError) as ei:
        copy8.compile(ts.spec((12,), tile=(4,)), ts.spec((12,)), target="sm_90")  # E:pre
    assert "dim(x, 0) % 8 == 0" in ei.value.message and ei.value.loc.file == __file__
