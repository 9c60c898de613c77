"""The one module that touches Triton beyond its public language (pinned to Triton 3.6).

  * `load`: Triton reads a kernel's source from its file (`inspect.getsource`), so generated
    source is written under `<cache_dir>/triton/<name>-<hash>.py` and imported from there.
    The name is content-hashed: an existing file with other content is rewritten (a corrupt
    entry is a miss, never a failure).
  * The interpreter switch. Triton 3.6 decides "interpreted or compiled" when `@triton.jit`
    runs — for its own standard library (`tl.sum`, `tl.max`, `tl.zeros`, ...) that is when
    `triton` is first imported, from TRITON_INTERPRET. Setting that variable would switch
    the whole process (every later GPU launch and `triton.compile` would be interpreted), so
    we do not: the generated function is wrapped in Triton's `InterpretedFunction`, and while
    an interpreted launch runs, calling a compiled-mode library `JITFunction` runs it through
    the interpreter too (what TRITON_INTERPRET=1 would have made it; see `_interpreting`).
    Outside a kernel `JITFunction.__call__` only raises, so nothing else changes. Launches are
    serialised by a lock because Triton's interpreter patches `triton.language` for the
    duration of a run, and every patch is undone afterwards, so compiled-mode launches and
    `triton.compile` keep working in the same process.
  * `compile_for`: ahead-of-time `triton.compile` for a GPU target (Hopper's sm_90, AMD's
    gfx942, ...; see targets.py) on any machine, for assembly checks in CI.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import threading
from pathlib import Path

_INTERPRETER_LOCK = threading.RLock()

# tilesafe dtype name -> Triton signature type
_SIG = {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "f8e4m3fn": "fp8e4nv", "f8e5m2": "fp8e5", "f64": "fp64",
        "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "u8": "u8", "bool_": "i1"}


def source_path(generated, cache_dir: Path) -> Path:
    digest = hashlib.sha256(generated.text.encode()).hexdigest()[:16]
    return Path(cache_dir) / "triton" / f"{generated.name}-{digest}.py"


def load(generated, cache_dir: Path, interpret: bool):
    """The launchable function for `generated`: a JITFunction, or an InterpretedFunction."""
    path = _write(generated.text, source_path(generated, cache_dir))
    module_name = f"tilesafe_generated.{path.stem.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[module_name] = module   # so inspect and Triton can find the function's module
    jitted = getattr(module, generated.name)
    if not interpret:
        return jitted
    from triton.runtime.interpreter import InterpretedFunction
    return jitted if isinstance(jitted, InterpretedFunction) else InterpretedFunction(jitted.fn)


def _write(text: str, path: Path) -> Path:
    try:
        if path.exists() and path.read_text() == text:
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)   # atomic: a concurrent reader sees the old or the new file
        return path
    except OSError:
        import tempfile
        fallback = Path(tempfile.gettempdir()) / "tilesafe-triton" / path.name
        if fallback != path:
            return _write(text, fallback)
        raise


def launch(fn, grid: tuple[int, ...], args: list, interpret: bool, options: dict | None = None) -> None:
    if interpret:
        with _INTERPRETER_LOCK, _interpreting():
            fn[grid](*args)
    else:
        fn[grid](*args, **(options or {}))


@contextlib.contextmanager
def _interpreting():
    """Make Triton 3.6's interpreter work inside a process whose Triton is in compiled mode.

    1. Library calls: a compiled-mode `JITFunction` called from interpreted code runs
       interpreted, its `triton.language` patches undone when it returns (Triton's own
       `InterpretedFunction.__call__` leaves them in place, which would break every later
       compilation in this process).
    2. Scalars: the interpreter holds a scalar as a 1-element 1-D array and converts it with
       `int(array)`, which NumPy >= 2.5 refuses (`range(lo, hi)` over runtime bounds).
    3. Ints in [2**31, 2**32): the interpreter types such an argument i64 (as compiled Triton
       does, and tilesafe) but stores it as a NumPy uint32, so arithmetic on it wraps 32 bits
       (`s + s` of 2**31 is 0). They are passed as int64 data instead.
    4. Floats: the interpreter keeps a float argument a Python number, which becomes a constant
       inside (`semantic.scalar_constant`: -0.0 == 0, so +0.0); compiled Triton passes an fp32
       value. They are passed as fp32 data, sign of zero and all.
    """
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction
    originals = (JITFunction.__call__, interpreter._patch_lang_tensor, interpreter._implicit_cvt)
    library_compiled = not isinstance(tl.standard.sum, interpreter.InterpretedFunction)
    cache: dict = {}

    def call(self, *args, **kwargs):
        f = cache.get(self.fn)
        if f is None:
            f = cache[self.fn] = interpreter.InterpretedFunction(self.fn)
        scope = interpreter._patch_lang(self.fn)
        try:
            return f.rewrite()(*args, **kwargs)
        finally:
            scope.restore()

    def patch_tensor(tensor, scope):
        originals[1](tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    def implicit_cvt(arg):
        if isinstance(arg, int) and not isinstance(arg, bool) and 2**31 <= arg < 2**32:
            return tl.tensor(interpreter.TensorHandle(np.array([arg], np.int64), tl.int64), tl.int64)
        if isinstance(arg, float):
            return tl.tensor(interpreter.TensorHandle(np.array([arg], np.float32), tl.float32), tl.float32)
        return originals[2](arg)

    if library_compiled:
        JITFunction.__call__ = call
    interpreter._patch_lang_tensor = patch_tensor
    interpreter._implicit_cvt = implicit_cvt
    try:
        yield
    finally:
        JITFunction.__call__, interpreter._patch_lang_tensor, interpreter._implicit_cvt = originals


def compile_for(generated, values: list, cache_dir: Path, gpu_target, **options):
    """`triton.compile` the generated kernel for `gpu_target` (Triton's GPUTarget: CUDA or
    HIP), specialized like a JIT launch on `values` (one per ArgSlot; pointers are assumed
    16-byte aligned). Works without a GPU: Triton 3.6 ships both backends' compilers."""
    import triton
    from triton.backends.compiler import BaseBackend
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction, native_specialize_impl
    path = _write(generated.text, source_path(generated, cache_dir))
    spec = importlib.util.spec_from_file_location(f"tilesafe_aot.{path.stem.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, generated.name)
    fn = fn if isinstance(fn, JITFunction) else JITFunction(fn.fn)
    signature, constexprs, attrs = {}, {}, {}
    for i, (slot, value) in enumerate(zip(generated.args, values)):
        if slot.what in ("ptr", "arrivals"):
            signature[slot.name] = "*" + _SIG[slot.dtype.name if slot.dtype else "i32"]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif slot.what == "desc":   # what Triton's JIT calls a host-built TensorDescriptor argument
            signature[slot.name] = f"tensordesc<{_SIG[slot.dtype.name]}[{', '.join(map(str, slot.box))}]>"
        elif slot.what == "scalar" and not slot.dtype.is_int:
            signature[slot.name] = _SIG[slot.dtype.name]
        else:
            ty, spec_ = native_specialize_impl(BaseBackend, int(value), False, True, True)
            signature[slot.name] = ty
            if ty == "constexpr":
                constexprs[slot.name] = spec_
            elif spec_ == "D":
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn, signature, constexprs, attrs)
    return triton.compile(src, target=gpu_target, options=options or None)


def _c_launch(run):
    """(launch, cooperative, pdl): the C launch function behind Triton 3.6's CudaLauncher and
    the flags its `__call__` passes, for a kernel that needs no scratch memory (the call then
    allocates none and adds only these); None for anything else, which goes through `run`."""
    if type(run).__name__ != "CudaLauncher":
        return None
    try:
        if run.global_scratch_size or run.profile_scratch_size:
            return None
        return run.launch, run.launch_cooperative_grid, run.launch_pdl
    except AttributeError:     # another Triton's launcher
        return None


def compiled_kernel(fn, grid, args, options: dict):
    """Triton's compiled kernel for these exact arguments and options (compiling it if needed)."""
    return fn.warmup(*args, grid=grid, **options)


def direct_launcher(kernel, grid3):
    """A function `launch(stream_handle, args)` that starts the compiled kernel directly,
    skipping the JIT dispatcher (Triton 3.6 internals: the call `JITFunction.run` makes once
    it has found the kernel). Launch hooks, when a profiler installs them, still run."""
    from triton import knobs
    run, function, packed = kernel.run, kernel.function, kernel.packed_metadata
    g0, g1, g2 = grid3

    runtime = knobs.runtime
    # The C launch and its flags, unpacked once (c_run None: go through `run`).
    c_run, cooperative, pdl = _c_launch(run) or (None, None, None)

    def launch(stream: int, args: tuple) -> None:
        enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
        if getattr(enter, "calls", True) or getattr(leave, "calls", True):   # a profiler's hooks
            run(g0, g1, g2, stream, function, packed, kernel.launch_metadata(grid3, stream, *args), enter, leave,
                *args)
        elif c_run is not None:   # CudaLauncher.__call__'s call, for a kernel without scratch memory
            c_run(g0, g1, g2, stream, function, cooperative, pdl, None, None, packed, None, None, None, *args)
        else:   # Triton 3.6's hook chains are never None; empty ones need no metadata and no calls
            run(g0, g1, g2, stream, function, packed, None, None, None, *args)
    return launch
