"""Host constructors: `ts.zeros`, `ts.empty`, `ts.tensor`, `ts.from_torch`, ...

Every tensor's memory comes from PyTorch (its caching allocator on CUDA). `device=None`
picks CUDA when present, else the CPU. Only `empty` makes a tensor whose bytes are not yet
written (S14); everything else is fully initialised.
"""
from __future__ import annotations

import operator

import ml_dtypes
import numpy as np
import torch

from .. import dtypes
from ..dtypes import BY_TORCH, DType, f32, i32
from ..errors import LaunchError, caller_loc
from . import numpy_bridge, ordering
from .host_lock import LOCK
from .storage_state import STATE_ATTR, StorageState
from .tensor import Tensor, read_of

_FP8 = (dtypes.f8e4m3fn, dtypes.f8e5m2)
_STRIDED = torch.strided


def zeros(shape, dtype=f32, device=None) -> Tensor:
    """A tensor of zeros."""
    return _filled(shape, 0, dtype, device)


def ones(shape, dtype=f32, device=None) -> Tensor:
    """A tensor of ones."""
    return _filled(shape, 1, dtype, device)


def full(shape, value, dtype=f32, device=None) -> Tensor:
    """A tensor with every element `value` (fp8 saturates to its finite range, as GPUs do)."""
    return _filled(shape, value, dtype, device)


def empty(shape, dtype=f32, device=None) -> Tensor:
    """An uninitialised tensor: write-only until every element has been written (S14)."""
    dt, dev, dims = resolve_dtype(dtype), resolve_device(device), resolve_shape(shape)
    try:
        t = torch.empty(dims, dtype=dt.torch, device=dev)
    except RuntimeError as e:   # a size that overflows, or more than the device holds
        raise _cannot_allocate(dt, dims, e) from None
    state = StorageState(t.untyped_storage().nbytes(), initialised=False)
    return Tensor(t, StorageState.attach(t, state))


def arange(start, stop=None, step=1, dtype=i32, device=None) -> Tensor:
    """`start, start+step, ...` below `stop`; `arange(n)` is `0..n-1`."""
    if stop is None:
        start, stop = 0, start
    dt, dev = resolve_dtype(dtype), resolve_device(device)
    try:
        t = _in_compute_dtype(dt, lambda cdt: torch.arange(start, stop, step, dtype=cdt, device=dev))
    except (RuntimeError, TypeError) as e:
        raise LaunchError(f"arange({start!r}, {stop!r}, {step!r}) failed: {e}", loc=caller_loc(),
                          help="start, stop and step are numbers and step is not 0") from None
    return _own(t)


def rand(shape, dtype=f32, seed=None, device=None) -> Tensor:
    """Uniform random values in [0, 1); `seed` makes them reproducible.

    Inside a kernel `ts.rand(seed, offsets)` is a different operation: Philox 4x32-10 f32
    uniforms, one per offset, the same on every backend (docs/language.md).
    """
    dt, dev = _float_dtype(dtype, "rand"), resolve_device(device)
    gen = _generator(seed, dev)
    t = torch.rand(resolve_shape(shape), dtype=_wide(dt), device=dev, generator=gen)
    # Rounding to a narrow dtype can reach 1.0; pull those back to the largest value below 1.
    below_one = 1.0 - float(ml_dtypes.finfo(dt.np).epsneg)
    return _own(torch.where(t.to(dt.torch).to(_wide(dt)) >= 1.0, below_one, t).to(dt.torch))


def randn(shape, dtype=f32, seed=None, device=None) -> Tensor:
    """Standard normal random values; `seed` makes them reproducible."""
    dt, dev = _float_dtype(dtype, "randn"), resolve_device(device)
    gen = _generator(seed, dev)
    return _own(torch.randn(resolve_shape(shape), dtype=_wide(dt), device=dev, generator=gen).to(dt.torch))


def tensor(data, dtype=None, device=None) -> Tensor:
    """A new tensor holding a copy of `data`.

    `data` may be a NumPy array (ml_dtypes bf16/fp8 arrays too), a nested list, a scalar,
    a torch tensor or a tilesafe tensor. Without `dtype`, arrays and tensors keep theirs and
    Python data follows torch (floats f32, ints i64). Without `device`, tensors stay on
    their device and other data goes to the default device.
    """
    source, reads = _source_tensor(data)
    if dtype is not None:
        dt = resolve_dtype(dtype)
    elif isinstance(data, (np.ndarray, np.generic, torch.Tensor, Tensor)):
        dt = dtypes.from_torch(source.dtype)
    else:
        dt = f32 if source.dtype == torch.float64 else dtypes.from_torch(source.dtype)
    keep = device is None and isinstance(data, (torch.Tensor, Tensor))
    dev = source.device if keep else resolve_device(device)
    copy = torch.empty(source.shape, dtype=dt.torch, device=dev)
    copy.copy_(numpy_bridge.saturated_for(source, dt.torch))   # one copy: casts, moves, packs
    return _own(copy, reads)


def from_torch(t) -> Tensor:
    """Borrow a torch tensor without copying (S13): the result shares its storage.

    The storage stays alive as long as the tilesafe tensor does. The borrowed elements
    count as written: torch made them (unless they are a tilesafe tensor's bytes handed over
    with to_torch() that torch has not written since: those keep their S14 tracking).
    """
    # The common case without the runtime's lock: a plain dense CPU or CUDA tensor over memory
    # seen before (its storage carries the state), never handed to torch, every byte written,
    # a contiguous view inside its storage. It only reads shared state (each read atomic), so
    # it returns what the locked path would return had it run whole just then; anything to
    # mark, join or refuse takes the locked path (with the view and storage already in hand).
    if type(t) is torch.Tensor and t.layout is _STRIDED and (t.is_cuda or t.is_cpu):
        dt = BY_TORCH.get(t.dtype)
        if dt is not None:
            v = t.detach()
            storage = v.untyped_storage()
            state = getattr(storage, STATE_ATTR, None)
            if state is not None and state.handed is None and state.init_mask is None and v.is_contiguous() \
                    and (v.storage_offset() + v.numel()) * v.element_size() <= storage.nbytes():
                return Tensor(v, state, dt)
            with LOCK:
                return _borrow(v, storage, dt)
    with LOCK:   # marks bytes written that other threads' launches check (host_lock)
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"ts.from_torch takes a torch.Tensor, got {type(t).__name__}",
                              loc=caller_loc(), help="use ts.tensor(data) to copy other data")
        if t.layout is not torch.strided or not (t.is_cuda or t.is_cpu):
            raise LaunchError(f"ts.from_torch takes a dense CPU or CUDA tensor, got layout {t.layout} on {t.device}",
                              loc=caller_loc(), help="convert it with .to_dense() / .to('cuda') first")
        dt = BY_TORCH.get(t.dtype)                 # dtypes.from_torch's lookup, inline: a dtype seen before
        if dt is None:
            try:
                dt = dtypes.from_torch(t.dtype)
            except ValueError:
                dt = resolve_dtype(t.dtype)         # words the refusal
        t = t.detach()                              # same storage, no autograd history
        return _borrow(t, t.untyped_storage(), dt)


def _borrow(t: torch.Tensor, storage, dt: DType) -> Tensor:
    """from_torch of a dense CPU or CUDA view `t` (detached; `storage` its storage, `dt` its
    dtype), under the runtime's lock: the extent check, the memory's state (joined on first
    use), and the S14 marks."""
    item = t.element_size()                         # dt's itemsize: dt is t's dtype
    if not t.is_contiguous() or (t.storage_offset() + t.numel()) * item > storage.nbytes():
        _check_extent(t, item, storage)             # all but a contiguous view inside its storage
    state = getattr(storage, STATE_ATTR, None)      # memory seen before: one getattr
    if state is None:
        state = StorageState.of_storage(storage)
    # A tilesafe storage handed to torch (to_torch) comes back with its S14 tracking: torch
    # made its bytes only if torch wrote since the hand-over (its version counter moved).
    # Memory never handed over is torch's, written (a mask only where tilesafe allocated it).
    if state.handed is None:
        if state.init_mask is not None:
            state.mark_written(t)
    elif state.torch_wrote(t):
        state.mark_written(t)
    return Tensor(t, state, dt)


# -- argument normalisation --------------------------------------------------------------


def resolve_shape(shape) -> tuple[int, ...]:
    """An int or a sequence of non-negative ints, as a tuple."""
    entries = shape if isinstance(shape, (tuple, list, torch.Size)) else (shape,)
    try:
        if any(isinstance(n, bool) for n in entries):
            raise TypeError
        dims = tuple(operator.index(n) for n in entries)
    except TypeError:
        raise LaunchError(f"a shape is an int or a tuple of ints, got {shape!r}",
                          loc=caller_loc(), help="write e.g. (128, 64)") from None
    if any(n < 0 for n in dims):
        raise LaunchError(f"shape {dims} has a negative dimension", loc=caller_loc(),
                          help="dimensions are >= 0")
    return dims


def resolve_dtype(dtype) -> DType:
    """A DType from a DType, a name ("bf16"), a NumPy or a torch dtype."""
    try:
        return dtypes.coerce(dtype)
    except (ValueError, TypeError):
        names = ", ".join(f"ts.{d.name}" for d in dtypes.ALL)
        raise LaunchError(f"{dtype!r} is not a tilesafe dtype", loc=caller_loc(),
                          help=f"use one of {names}") from None


def resolve_device(device) -> torch.device:
    """None: CUDA when present, else the CPU."""
    from .graph import refuse_in_capture
    refuse_in_capture("allocating a tensor")
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise LaunchError(f"{device!r} is not a device tilesafe supports", loc=caller_loc(),
                          help='use "cpu", "cuda" or "cuda:N", or leave device=None')
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise LaunchError(f"device {device!r} was asked for but CUDA is not available",
                          loc=caller_loc(), help='use device="cpu", or leave device=None')
    return dev


# -- helpers -------------------------------------------------------------------------------


def _own(t: torch.Tensor, reads=()) -> Tensor:
    """Wrap a freshly made torch tensor, fully initialised, with its own state. The device
    work that made it (a fill, a copy) is recorded as a write, and `reads` as reads, on the
    current stream, exactly like a launch (S10)."""
    state = StorageState.attach(t, StorageState(t.untyped_storage().nbytes()))
    ordering.record_work([(state, t, True), *reads])
    return Tensor(t, state)


def _filled(shape, value, dtype, device) -> Tensor:
    dt, dev, dims = resolve_dtype(dtype), resolve_device(device), resolve_shape(shape)
    try:
        return _own(_in_compute_dtype(dt, lambda cdt: torch.full(dims, value, dtype=cdt, device=dev)))
    except (RuntimeError, TypeError) as e:
        if _value_fits(dt, value):   # then the shape is what failed: too many bytes
            raise _cannot_allocate(dt, dims, e) from None
        raise LaunchError(f"cannot fill a {dt!r} tensor with {value!r}: {e}", loc=caller_loc(),
                          help=f"pass a number that fits {dt!r}") from None


def _value_fits(dt: DType, value) -> bool:
    """Whether a one-element tensor of `dt` takes `value` (cheap, unlike the failed fill)."""
    try:
        _in_compute_dtype(dt, lambda cdt: torch.full((), value, dtype=cdt))
    except (RuntimeError, TypeError):
        return False
    return True


def _cannot_allocate(dt: DType, dims, e: Exception) -> LaunchError:
    return LaunchError(f"cannot allocate a {dt!r} tensor of shape {dims}: {e}", loc=caller_loc(),
                       help="pick a shape whose bytes fit in the device's memory")


def _in_compute_dtype(dt: DType, make) -> torch.Tensor:
    # torch builds few things directly in fp8; build in f32, then cast saturating.
    if dt in _FP8:
        return numpy_bridge.saturated_for(make(torch.float32), dt.torch).to(dt.torch)
    return make(dt.torch)


def _wide(dt: DType) -> torch.dtype:
    """The dtype random values are drawn in before rounding to `dt`."""
    return torch.float64 if dt == dtypes.f64 else torch.float32


def _float_dtype(dtype, what: str) -> DType:
    dt = resolve_dtype(dtype)
    if not dt.is_float:
        raise LaunchError(f"ts.{what} makes floating-point values, not {dt!r}", loc=caller_loc(),
                          help="pass a float dtype such as ts.f32 or ts.bf16, then convert")
    return dt


def _generator(seed, device: torch.device) -> torch.Generator | None:
    if seed is None:
        return None
    return torch.Generator(device=device).manual_seed(operator.index(seed))


def _source_tensor(data) -> tuple[torch.Tensor, list]:
    """`data` as a torch tensor (may share memory with it; `tensor` copies), and the reads of
    tilesafe memory that copying it makes."""
    if isinstance(data, Tensor):
        data._check_usable("ts.tensor()")
        data._check_read("ts.tensor()")
        return data._torch(), [(data._state, data._torch(), False)]
    try:
        source = numpy_bridge.to_torch(data)
    except (ValueError, TypeError, OverflowError) as e:
        raise LaunchError(f"cannot make a tensor from {type(data).__name__}: {e}", loc=caller_loc(),
                          help="pass a NumPy array, a (nested) list of numbers or a tensor") from None
    return source, read_of(source, "ts.tensor()")   # a torch alias of tilesafe memory waits (S9)


def _check_extent(t: torch.Tensor, item: int, storage) -> None:
    """The view lies inside its storage (S13); torch guarantees it, foreign memory may not.
    A contiguous view (the common case) reaches `numel` elements past its offset."""
    n = t.numel()
    if n == 0:
        return
    offset = t.storage_offset() * item
    if t.is_contiguous():
        last = (n - 1) * item
    else:
        last = sum((n - 1) * s for n, s in zip(t.shape, t.stride())) * item
    if offset < 0 or offset + last + item > storage.nbytes():
        raise LaunchError("the torch tensor reaches outside its storage", loc=caller_loc(),
                          help="pass a view that lies within its storage")


def _register_device_constructors() -> None:
    """Host constructors double as device ops inside kernels (a tile instead of a tensor)."""
    import inspect
    from ..lang import calls, random_numbers
    calls.REGISTRY[zeros] = calls.zeros_handler
    calls.REGISTRY[full] = calls.full_handler
    calls.REGISTRY[arange] = calls.arange_handler
    calls.REGISTRY[rand] = random_numbers.rand_handler
    calls.SIGNATURES[zeros] = inspect.signature(lambda shape, dtype=f32: None)
    calls.SIGNATURES[full] = inspect.signature(lambda shape, value, dtype=f32: None)
    calls.SIGNATURES[arange] = inspect.signature(lambda start, stop=None: None)
    calls.SIGNATURES[rand] = inspect.signature(lambda seed, offsets: None)


_register_device_constructors()
