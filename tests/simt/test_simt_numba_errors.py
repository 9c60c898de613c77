"""Code the CPU executor runs but numba-cuda cannot type for the GPU is refused as a
`ts.KernelError` at the user's line, not as numba's own exception.

The GPU launch runs on this CPU with the device stubbed (conftest's `stubbed_gpu`) and the
compile replaced by numba-cuda's real front end without the PTX step (as
test_simt_numba_typing.py does: typing and lowering need no GPU; numba-cuda is told the
device is of compute capability 9.0). The CUDA simulator is no help here: it runs the Python
as it is and types nothing."""
import math
import types

import pytest
import torch
from simt_helpers import assert_diagnostic

import tilesafe as ts
from tilesafe import simt
from tilesafe.simt import gpu_launch, numba_errors
from tilesafe.simt.binding import bind
from tilesafe.simt.examples.vector_add import vector_add

numba_cuda = pytest.importorskip("numba_cuda", reason="numba-cuda (the `simt` extra) is not installed")

HERE = __file__
BLOCK = simt.Contract(block=(32,))


@simt.kernel(contract=BLOCK)
def factorials(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        v = x[p]
        out[p] = v * math.factorial(3)  # E:factorial


@simt.kernel(contract=BLOCK)
def halves(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        h = p[0] / 2
        out[p] = x[h]  # E:float-index


@simt.kernel(contract=BLOCK)
def bool_index(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], N: int):
    for p in out.permits(simt.per_thread()):
        out[p] = x[p[0] > 3]


@pytest.fixture
def typing_compile(monkeypatch, stubbed_gpu):
    """The GPU compile as numba-cuda's typing and lowering only (no PTX, no GPU)."""
    from numba.cuda import dispatcher
    from numba.cuda import types as nt
    from numba.cuda.compiler import compile_cuda
    monkeypatch.setattr(dispatcher, "get_current_device", lambda: types.SimpleNamespace(compute_capability=(9, 0)))

    def compile_kernel(source, name, argtypes, device_index, tables, **options):
        compile_cuda(gpu_launch.python_kernel(source, name, tables), nt.void, argtypes, cc=(9, 0))
        return "compiled"
    monkeypatch.setattr(gpu_launch, "compile_kernel", compile_kernel)
    for k in (factorials, halves, vector_add, bool_index):
        monkeypatch.setattr(k, "_compiled", {})


def test_a_math_function_cuda_lacks_is_refused_at_its_line(typing_compile):
    with pytest.raises(ts.KernelError) as ei:
        factorials(torch.zeros(8), torch.ones(8))
    assert_diagnostic(ei.value, HERE, "E:factorial",
                      "numba-cuda cannot compile this line of `factorials` for the GPU: Unknown attribute "
                      "'factorial' of type Module(math)")
    assert "\x1b" not in ei.value.message                        # numba's terminal colours are dropped
    assert ei.value.__cause__ is None and ei.value.__suppress_context__


def test_a_float_index_is_refused_at_its_line(typing_compile):
    # numba's message names no line here: the line comes from the constraint it was typing
    with pytest.raises(ts.KernelError) as ei:
        halves(torch.zeros(8), torch.ones(8))
    assert_diagnostic(ei.value, HERE, "E:float-index",
                      "numba-cuda cannot compile this line of `halves` for the GPU: No implementation of function")


def test_the_stand_in_compile_accepts_a_kernel_numba_can_type(typing_compile):
    out, x, y = torch.zeros(8), torch.ones(8), torch.ones(8)
    assert vector_add.gpu_compiled(bind(vector_add, (out, x, y), {}, None), 0) == "compiled"


def test_an_error_that_is_not_numbas_is_left_as_it_is(monkeypatch, stubbed_gpu):
    def broken(*args, **options):
        raise RuntimeError("no CUDA driver")
    monkeypatch.setattr(gpu_launch, "compile_kernel", broken)
    monkeypatch.setattr(halves, "_compiled", {})
    with pytest.raises(RuntimeError, match="no CUDA driver"):
        halves.gpu_compiled(bind(halves, (torch.zeros(8), torch.ones(8)), {}, None), 0)


@pytest.mark.gpu
def test_gpu_a_math_function_cuda_lacks_is_refused_at_its_line():
    # the real compile (numba-cuda's jit for these types, then PTX) on the GPU
    with pytest.raises(ts.KernelError) as ei:
        factorials(torch.zeros(8, device="cuda"), torch.ones(8, device="cuda"))
    assert_diagnostic(ei.value, HERE, "E:factorial",
                      "numba-cuda cannot compile this line of `factorials` for the GPU: Unknown attribute "
                      "'factorial' of type Module(math)")
    assert "\x1b" not in ei.value.message                        # numba's terminal colours are dropped


def test_the_cpu_executor_refuses_a_float_index_as_the_gpu_does():
    # numba-cuda refuses `x[p[0] / 2]` (above); the CPU executor truncated it to an int and ran
    with pytest.raises(ts.KernelError) as ei:
        halves(torch.zeros(8), torch.ones(8)).sync()
    assert_diagnostic(ei.value, HERE, "E:float-index", "index 0.0 of `x` is a float")


def test_a_bool_index_compiles_as_on_the_cpu(typing_compile):
    # a bool is an int to Python and numba; the unsigned read check (__inb) typed only ints
    out, x = torch.zeros(8), torch.arange(8.0)
    assert bool_index.gpu_compiled(bind(bool_index, (out, x), {}, None), 0) == "compiled"


def test_a_bool_index_runs_on_the_cpu_executor():
    out = torch.full((8,), float("nan"))
    bool_index(out, torch.arange(8.0)).sync()
    assert out.tolist() == [0.0] * 4 + [1.0] * 4


def test_numbas_terminal_colours_are_dropped_from_its_words():
    class Coloured(Exception):
        pass
    said = numba_errors._said(Coloured("\x1b[1m\x1b[1mUnknown attribute 'factorial' of type Module(math) \x1b[0m"))
    assert said == "Unknown attribute 'factorial' of type Module(math)"
