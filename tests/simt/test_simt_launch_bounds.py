"""Contract(blocks_per_sm=n): the GPU compile gets CUDA launch bounds (threads a block, n blocks an
SM), so the compiler keeps a thread's registers within what n blocks leave (softmax_rows_staged:
8 blocks of 256, 32 registers, where it took 48 and 5 blocks fit)."""
import pytest
import torch

import tilesafe as ts
from tilesafe import simt
from tilesafe.simt import gpu_launch
from tilesafe.simt.binding import bind
from tilesafe.simt.examples import softmax_rows, vector_add


def test_the_compile_gets_the_launch_bounds(monkeypatch):
    seen = {}

    def compile_kernel(source, name, argtypes, device_index, tables, **kw):
        seen[name] = kw
        return "compiled"
    monkeypatch.setattr(gpu_launch, "compile_kernel", compile_kernel)
    k = softmax_rows.softmax_rows_staged
    k.gpu_compiled(bind(k, (torch.zeros(2, 300), torch.zeros(2, 300)), {"K": 2}, None), 0)
    assert seen["simt_softmax_rows_staged"] == {"launch_bounds": (256, 8)}
    v = vector_add.vector_add
    v.gpu_compiled(bind(v, (torch.zeros(8), torch.zeros(8), torch.zeros(8)), {}, None), 0)
    assert seen["simt_vector_add"] == {}                              # no hint: numba's defaults


@pytest.mark.parametrize("per_sm", [0, 9, 2.0])
def test_blocks_per_sm_must_fit_an_sm(per_sm):
    with pytest.raises(ts.KernelError, match="blocks_per_sm"):
        @simt.kernel(contract=simt.Contract(block=(256,), blocks_per_sm=per_sm))      # 9 x 256 > 2048 threads
        def k(out: simt.Disjoint[ts.f32, ("N",)], N: int):
            for p in out.permits(simt.per_thread()):
                out[p] = 1.0
