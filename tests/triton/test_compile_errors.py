"""Triton's compiler failing on a kernel tilesafe accepted is a `ts.CompileError` (a KernelError)
at the kernel's definition, with the compiler's message and a help line, not a raw exception
from inside Triton (backends/triton/compile_errors.py). The real case, Triton 3.6 crashing in
TritonGPUCoalesce, is tests/fuzz/test_finds.py's; here the compiler is made to fail on purpose,
so these tests stay when Triton is fixed."""
import builtins
import os

import numpy as np
import pytest

import tilesafe as ts
from tilesafe.backends.triton import adapter
from tilesafe.runtime.compile_ahead import compile_ahead

HERE = os.path.abspath(__file__)
CRASH = "PassManager::run failed"

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                reason="TRITON_INTERPRET=1 makes Triton's own library interpreted, so it cannot compile")


@ts.kernel
def doubled(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):  # E:compile
    z.store(ts.load_tile_like(x, z) * 2.0)


def _line(marker: str) -> int:
    with open(HERE) as f:
        hits = [i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1
    return hits[0]


def _fails_inside_triton_compile(message: str):
    """A function that raises like Triton's compiler does: from inside `triton.compile`
    (a frame named `compile` in triton/compiler/compiler.py, which is how a compile failure
    is told from a launch failure)."""
    scope: dict = {}
    source = f"def compile(*args, **kwargs):\n    raise RuntimeError({message!r})\n"
    exec(builtins.compile(source, os.path.join("site-packages", "triton", "compiler", "compiler.py"), "exec"), scope)
    return scope["compile"]


def _assert_compile_error(e: ts.CompileError, compiler_says: str) -> None:
    assert isinstance(e, ts.KernelError)
    assert (e.loc.file, e.loc.line) == (HERE, _line("E:compile"))          # the kernel's definition
    assert "`doubled`" in e.message and compiler_says in e.message
    assert "compiler bug" in e.help
    assert str(e).startswith("error: ")
    assert e.__cause__ is None and e.__suppress_context__                 # no traceback from inside Triton


def test_an_ahead_of_time_compile_failure_is_a_compile_error(monkeypatch):
    import triton
    from triton.compiler import compiler
    monkeypatch.setattr(triton.knobs.compilation, "always_compile", True)     # no cache hit skips the failure

    def make_ir(*args, **kwargs):
        raise RuntimeError(f"{CRASH}\nmore of what the compiler said")
    monkeypatch.setattr(compiler.ASTSource, "make_ir", make_ir)
    with pytest.raises(ts.CompileError) as ei:
        compile_ahead(doubled, ts.spec((16,), ts.f32, tile=(8,)), ts.spec((16,), ts.f32), arch=90)
    _assert_compile_error(ei.value, CRASH)


def test_a_compile_failure_at_the_first_launch_is_a_compile_error(monkeypatch):
    monkeypatch.setattr(adapter, "launch", _fails_inside_triton_compile(CRASH))
    z = ts.full((16,), np.nan)
    with pytest.raises(ts.CompileError) as ei:
        doubled(z.partition((8,)), ts.tensor(np.ones(16, np.float32)))
    _assert_compile_error(ei.value, CRASH)


def test_a_failure_outside_the_compiler_is_not_called_a_compile_error(monkeypatch):
    def launch(*args, **kwargs):
        raise RuntimeError("Triton Error [CUDA]: invalid argument")       # e.g. the driver refusing the launch
    monkeypatch.setattr(adapter, "launch", launch)
    z = ts.full((16,), np.nan)
    with pytest.raises(RuntimeError, match="invalid argument") as ei:
        doubled(z.partition((8,)), ts.tensor(np.ones(16, np.float32)))
    assert not isinstance(ei.value, ts.TileSafeError)


CHECKED = '''
import numpy as np
import tilesafe as ts


@ts.kernel
def double(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 2.0)


x = ts.tensor(np.arange(64, dtype=np.float32), device="cpu")
z = ts.empty(64, device="cpu")
double(z.partition((16,)), x)
'''


def test_check_target_lists_a_compiler_failure_as_not_compiled_not_as_the_kernels_error(monkeypatch, tmp_path,
                                                                                        capsys):
    """`tilesafe check --target` proves what it compiles; a launch the compiler failed on is
    listed as unchecked, as before CompileError existed, not reported as a rule the kernel breaks."""
    import triton
    from triton.compiler import compiler

    from tilesafe import cli
    monkeypatch.setattr(triton.knobs.compilation, "always_compile", True)

    def make_ir(*args, **kwargs):
        raise RuntimeError(CRASH)
    monkeypatch.setattr(compiler.ASTSource, "make_ir", make_ir)
    path = tmp_path / "kernels.py"
    path.write_text(CHECKED.lstrip())
    rc = cli.main(["check", "--target", "sm_90", str(path)])
    out = capsys.readouterr().out
    assert f"could not compile `double` for sm_90: {CRASH}" in out, out
    assert "0 errors in 1 kernel checked; 0 launches compiled for sm_90; could not check 1 kernel" in out, out
    assert rc == 1, out                          # not everything could be checked
