"""The host-side tensor: a torch view plus what tilesafe knows about its storage.

Storage is always a torch tensor (CPU or CUDA, from PyTorch's caching allocator). Views
(`view`, `reshape`, slicing, `permute`, `transpose`) share the storage *and* its
`StorageState`, so initialisation (S14) and pending device work (S9) are tracked by bytes,
whichever handle touches them. Ownership (S8, S13) is per handle: a tensor lent to a
partition, or handed over to torch, refuses every public use.
"""
from __future__ import annotations

import math
import operator
import sys
import weakref

import numpy as np
import torch

from .. import dtypes
from ..dtypes import DType
from ..errors import AliasError, Loc, OwnershipError, TileSafeError, caller_loc
from . import numpy_bridge, ordering
from .aliasing import ByteSet, byte_set, overlaps, self_overlaps
from .graph import refuse_in_capture
from .host_lock import LOCK, serialized
from .partition import USER_CODE, Partition, place, where
from .storage_state import StorageState
from .torch_version import version_of


class Tensor:
    """A tilesafe tensor: made by `ts.zeros`, `ts.empty`, `ts.tensor`, `ts.from_torch`, ...

    Hashable by identity. Host reads (`numpy()`, `to_torch()`, printing) wait for pending
    writers; host writes (`x[i] = v`, `copy_`) wait for pending readers and writers.
    """
    __slots__ = ("_t", "_state", "_dtype", "_lender", "_handed_at", "__weakref__")

    def __init__(self, t: torch.Tensor, state: StorageState, dtype: DType | None = None):
        self._t = t
        self._state = state
        self._dtype: DType = dtype if dtype is not None else dtypes.from_torch(t.dtype)
        self._lender: weakref.ref[Partition] | None = None
        self._handed_at: Loc | None = None

    # -- internal accessors for the launcher and backends (no ownership check) ------------

    def _torch(self) -> torch.Tensor:
        return self._t

    def _byte_set(self) -> ByteSet:
        return byte_set(self._t)

    def _lent_to(self) -> Partition | None:
        return self._lender() if self._lender is not None else None

    def _lend(self, partition: Partition) -> None:
        self._lender = weakref.ref(partition)

    def _give_back(self, partition: Partition) -> None:
        if self._lent_to() is partition:
            self._lender = None

    def _check_usable(self, what: str) -> None:
        """S8/S13: refuse any use while lent to a partition or handed over to torch."""
        if self._handed_at is not None:
            raise OwnershipError(
                f"cannot use `{what}`: this tensor was handed to torch at {where(self._handed_at)}",
                loc=caller_loc(),
                help="call ts.from_torch(t) on the torch tensor to get a tilesafe tensor back, "
                     "or next time use to_torch(copy=True) to keep using this tensor")
        partition = self._lent_to()
        if partition is not None:
            raise OwnershipError(
                f"cannot use `{what}`: this tensor is lent to a partition (lent at {where(partition._lent_at)})",
                loc=caller_loc(),
                help="call .unpartition() on that partition first; it returns this tensor")

    def _check_not_lent_elsewhere(self, view: torch.Tensor, what: str) -> None:
        """S8 by bytes: bytes lent to a partition are writable only through that partition,
        also when another handle (a view taken earlier) reaches them."""
        lender = self._state.lender_of(byte_set(view))
        if lender is not None:
            raise OwnershipError(
                f"cannot {what}: its bytes are lent to a partition (lent at {where(lender._lent_at)})",
                loc=caller_loc(),
                help="call .unpartition() on that partition first; lent bytes are written only "
                     "through their partition")

    def _check_lendable(self, what: str) -> None:
        """S8 before lending this tensor to a partition: the handle is usable and no other
        partition holds any of its bytes (no byte set is built while nothing is lent)."""
        self._check_usable(what)
        if self._state._lent:
            self._check_not_lent_elsewhere(self._t, "partition this tensor")
        if self._state.frozen:
            self._check_not_frozen(self._t, "partition this tensor (a partition is a kernel's output)")

    def _check_not_frozen(self, view: torch.Tensor, what: str) -> None:
        """Frozen bytes (ts.freeze, runtime/freeze.py) are never written again."""
        if self._state.touches_frozen(view):
            raise OwnershipError(
                f"cannot {what}: its bytes are frozen (ts.freeze), and frozen memory is never written again",
                loc=caller_loc(),
                help="write a copy instead: a frozen tensor (a model's weights) stays read-only, which "
                     "lets kernels under ts.pdl() read it before they wait")

    def _check_read(self, what: str) -> None:
        """S14 then S9: the bytes were written, and no pending launch still writes them."""
        refuse_in_capture(f"reading `{what}` on the host")
        if not self._state.is_written(self._t):
            raise OwnershipError(
                f"`{what}` reads a tensor that came from ts.empty and has not been written",
                loc=caller_loc(),
                help="write it with a kernel or a host write (x[...] = value) first, "
                     "or initialise it with ts.zeros")
        self._state.wait_for_host(byte_set(self._t), write=False, what=f"`{what}`")

    # -- metadata ---------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        self._check_usable("shape")
        return tuple(self._t.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements."""
        self._check_usable("strides")
        return tuple(self._t.stride())

    @property
    def dtype(self) -> DType:
        self._check_usable("dtype")
        return self._dtype

    @property
    def ndim(self) -> int:
        self._check_usable("ndim")
        return self._t.dim()

    @property
    def numel(self) -> int:
        self._check_usable("numel")
        return self._t.numel()

    @property
    def device(self) -> str:
        """"cpu" or "cuda:N"."""
        self._check_usable("device")
        return str(self._t.device)

    @property
    def nbytes(self) -> int:
        """Bytes of the elements this view covers (not of the whole storage)."""
        self._check_usable("nbytes")
        return self._t.numel() * self._t.element_size()

    def is_contiguous(self) -> bool:
        self._check_usable("is_contiguous()")
        return self._t.is_contiguous()

    def __len__(self) -> int:
        self._check_usable("len()")
        if self._t.dim() == 0:
            raise TileSafeError("len() of a 0-d tensor", loc=caller_loc(), help="use .shape or .numel")
        return self._t.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # -- host reads -------------------------------------------------------------------------

    @serialized   # checks then updates shared state: one thread at a time (host_lock)
    def numpy(self) -> np.ndarray:
        """A copy of the values as a NumPy array (ml_dtypes arrays for bf16 and fp8)."""
        self._check_usable("numpy()")
        self._check_read("numpy()")
        return numpy_bridge.to_numpy(self._t)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        values = self.numpy()
        return values if dtype is None else values.astype(dtype)

    @serialized
    def to_torch(self, copy: bool = False) -> torch.Tensor:
        """The values as a torch tensor.

        copy=True: an independent copy (a host read). copy=False: the torch tensor sharing
        this storage; this handle is then handed over to torch and refuses further use
        (`ts.from_torch(t)` gives a tilesafe tensor back). Handing over is not a read, so an
        unwritten `ts.empty` tensor may be handed to torch to be filled there.
        """
        self._check_usable("to_torch()")
        if copy:
            self._check_read("to_torch(copy=True)")
            values = self._t.clone(memory_format=torch.contiguous_format)
            ordering.record_work([(self._state, self._t, False)])   # the clone reads on this stream
            return values
        self._check_not_lent_elsewhere(self._t, "hand to torch with `to_torch()`")
        # torch may write the bytes, so wait as a host write would.
        self._state.wait_for_host(byte_set(self._t), write=True, what="`to_torch()`")
        self._handed_at = caller_loc()
        self._state.hand_over(self._t)                  # from_torch asks whether torch wrote it (S14)
        return self._t

    def __str__(self) -> str:
        self._check_usable("str()")
        return self._format(self.numpy())

    def __repr__(self) -> str:
        # Never raises: debuggers and test reports call repr on everything. str() and
        # numpy() are the checked reads.
        try:
            return self._format(self.numpy())
        except OwnershipError as e:
            return self._format(f"<{e.message}>")

    def _format(self, values) -> str:
        body = values if isinstance(values, str) else np.array2string(values, separator=", ")
        return (f"ts.Tensor({body}, shape={tuple(self._t.shape)}, dtype={self._dtype!r}, "
                f"device={str(self._t.device)!r})")

    # -- host writes ------------------------------------------------------------------------

    @serialized
    def __setitem__(self, index, value) -> None:
        self._check_usable("x[...] = value")
        self._host_write(_index(self._t, index), value, "x[...] = value")

    @serialized
    def copy_(self, value) -> "Tensor":
        """Overwrite every element with `value` (array-like, broadcast to this shape)."""
        self._check_usable("copy_()")
        self._host_write(self._t, value, "copy_()")
        return self

    def _host_write(self, target: torch.Tensor, value, what: str) -> None:
        refuse_in_capture(f"writing `{what}` from the host")
        self._check_not_lent_elsewhere(target, f"write through `{what}`")
        if self._state.frozen:
            self._check_not_frozen(target, f"write through `{what}`")
        if self_overlaps(byte_set(target)):
            raise AliasError(f"cannot write through `{what}`: the view's elements share bytes "
                             "(stride 0 or overlapping strides)", loc=caller_loc(),
                             help="write through a view whose elements are distinct")
        source, reads = _host_source(value, target, what)
        # Everything that can refuse has run: now order after pending work (S9) and write.
        self._state.wait_for_host(byte_set(target), write=True, what=f"`{what}`")
        target.copy_(numpy_bridge.saturated_for(source, target.dtype))
        ordering.record_work([(self._state, target, True), *reads])   # a device copy, like a launch (S10)
        self._state.own_write_version = version_of(target)   # our write, not torch's (S13 detection)
        self._state.mark_written(target)

    # -- views (share storage and state) ----------------------------------------------------

    def __getitem__(self, index) -> "Tensor":
        self._check_usable("x[...]")
        return Tensor(_index(self._t, index), self._state)

    def view(self, *shape) -> "Tensor":
        """The same bytes with another shape; refuses when the strides do not allow it."""
        self._check_usable("view()")
        return Tensor(_reshaped(self._t, shape, "view"), self._state)

    def reshape(self, *shape) -> "Tensor":
        """Like `view`: never copies, so the result always shares this tensor's bytes."""
        self._check_usable("reshape()")
        return Tensor(_reshaped(self._t, shape, "reshape"), self._state)

    def permute(self, *dims) -> "Tensor":
        self._check_usable("permute()")
        dims = _int_args(dims, "permute")
        n = self._t.dim()
        if not all(-n <= d < n for d in dims) or sorted(d % n for d in dims) != list(range(n)):
            raise TileSafeError(f"permute{dims} is not a permutation of the {n} axes",
                                loc=caller_loc(), help=f"name each axis 0..{n - 1} exactly once")
        return Tensor(self._t.permute(dims), self._state)

    def transpose(self, a: int, b: int) -> "Tensor":
        self._check_usable("transpose()")
        try:
            return Tensor(self._t.transpose(a, b), self._state)
        except (IndexError, TypeError) as e:
            raise TileSafeError(f"cannot transpose axes {a!r} and {b!r} of a {self._t.dim()}-d tensor",
                                loc=caller_loc(), help="axes are ints in [-ndim, ndim)") from e

    @property
    def T(self) -> "Tensor":
        """The transpose of a 2-D tensor."""
        self._check_usable("T")
        if self._t.dim() != 2:
            raise TileSafeError(f".T needs a 2-D tensor, this one is {self._t.dim()}-D",
                                loc=caller_loc(), help="use .permute(...) to reorder axes")
        return Tensor(self._t.t(), self._state)

    # -- partitions -------------------------------------------------------------------------

    def partition(self, tile) -> Partition:
        """Lend this tensor to a partition into `tile`-shaped blocks (S8)."""
        with LOCK:   # (serialized, without its wrapper's call: a partition is made per launch)
            if self._handed_at is not None or self._lender is not None or self._state._lent or self._state.frozen:
                self._check_lendable("partition()")   # (nothing to refuse otherwise: no calls)
            f = sys._getframe(1)             # place(), inline for a caller seen before (a partition per launch)
            code = f.f_code
            return Partition(self, tile, False, (code.co_filename, f.f_lineno) if code in USER_CODE else place())

    @serialized
    def partition_prefix(self, tile) -> Partition:
        """Like `partition`, but a launch may cover only a leading part of the tile grid."""
        self._check_lendable("partition_prefix()")
        return Partition(self, tile, prefix=True, lent_at=place())


def _host_source(value, target: torch.Tensor, what: str) -> tuple[torch.Tensor, list]:
    """`value` as a torch tensor on target's device that broadcasts to target's shape, and
    the reads of tilesafe memory that copying it makes (for `ordering.record_work`)."""
    if isinstance(value, Tensor):
        value._check_usable(what)
        value._check_read(what)
        source = value._t
        reads = [(value._state, source, False)]
        if overlaps(byte_set(source), byte_set(target)):
            source = source.clone()          # copy_ between overlapping views is undefined
    else:
        try:
            source = numpy_bridge.to_torch(value)
        except (ValueError, TypeError, OverflowError) as e:
            raise TileSafeError(f"cannot write {type(value).__name__} through `{what}`: {e}",
                                loc=caller_loc(), help="pass a number, a NumPy array, a list or a tensor") from None
        reads = read_of(source, what)
        if reads and overlaps(byte_set(source), byte_set(target)):
            source = source.clone()          # a torch alias of the target's own bytes
    try:
        fits = torch.broadcast_shapes(source.shape, target.shape) == target.shape
    except RuntimeError:
        fits = False
    if not fits:
        raise TileSafeError(f"cannot write a value of shape {tuple(source.shape)} into shape {tuple(target.shape)}",
                            loc=caller_loc(), help="the value must broadcast to the target's shape")
    return source.to(target.device), reads


def read_of(source: torch.Tensor, what: str) -> list:
    """S9 for a torch tensor (or NumPy array) tilesafe reads on the host's behalf: when its
    memory is (an alias of) tilesafe memory, wait for the pending writers of those bytes,
    whichever handle launched them. Returns the read to record, as `ordering.record_work`
    takes it."""
    state = StorageState.find(source)
    if state is None:
        return []
    state.wait_for_host(byte_set(source), write=False, what=f"`{what}`")
    return [(state, source, False)]


def _index(t: torch.Tensor, index) -> torch.Tensor:
    """Basic indexing only (ints, slices with positive steps, ..., None)."""
    items = index if isinstance(index, tuple) else (index,)
    for item in items:
        _check_index_item(item)
    try:
        return t[index]
    except IndexError as e:
        raise TileSafeError(f"index {index!r} is out of range for shape {tuple(t.shape)}",
                            loc=caller_loc(), help=f"{e}") from None


def _check_index_item(item) -> None:
    if item is None or item is Ellipsis:
        return
    if isinstance(item, slice):
        for part in (item.start, item.stop, item.step):
            if part is not None and (isinstance(part, bool) or not _is_int(part)):
                raise TileSafeError(f"slice bounds must be ints, got {item!r}", loc=caller_loc(),
                                    help="use integer start:stop:step")
        if item.step is not None and operator.index(item.step) <= 0:
            raise TileSafeError(f"slice step must be positive, got {item!r}", loc=caller_loc(),
                                help="views with negative or zero steps are not supported; "
                                     "slice with a positive step")
        return
    if not isinstance(item, (bool, np.ndarray, torch.Tensor)) and _is_int(item):
        return
    raise TileSafeError(f"advanced indexing with {type(item).__name__} is not supported",
                        loc=caller_loc(),
                        help="index with ints and slices (views share storage); "
                             "for a gathered copy use x.numpy()[index]")


def _is_int(x) -> bool:
    try:
        operator.index(x)
        return True
    except TypeError:
        return False


def _int_args(args: tuple, what: str) -> tuple[int, ...]:
    """Accept f(1, 2) and f((1, 2)); every entry an int."""
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        args = tuple(args[0])
    try:
        if any(isinstance(a, bool) for a in args):
            raise TypeError
        return tuple(operator.index(a) for a in args)
    except TypeError:
        raise TileSafeError(f"{what} takes ints, got {args!r}", loc=caller_loc(),
                            help=f"write e.g. x.{what}(4, 8)") from None


def _reshaped(t: torch.Tensor, shape: tuple, what: str) -> torch.Tensor:
    shape = _int_args(shape, what)
    new = _resolve_shape(shape, t.numel(), what)
    try:
        return t.view(new)
    except RuntimeError:
        raise TileSafeError(f"cannot {what} a view of shape {tuple(t.shape)} and strides "
                            f"{tuple(t.stride())} to {new} without copying", loc=caller_loc(),
                            help=f"copy it first: ts.tensor(x).{what}{new}") from None


def _resolve_shape(shape: tuple[int, ...], numel: int, what: str) -> tuple[int, ...]:
    """Fill in a single -1 and check the element count."""
    if shape.count(-1) > 1:
        raise TileSafeError(f"shape {shape} has more than one -1", loc=caller_loc(),
                            help="at most one dimension can be inferred with -1")
    known = math.prod(n for n in shape if n != -1)
    bad = any(n < -1 for n in shape)
    if not bad and -1 in shape:
        bad = known == 0 or numel % known != 0
        shape = tuple(numel // known if n == -1 else n for n in shape) if not bad else shape
    if bad or math.prod(shape) != numel:
        raise TileSafeError(f"cannot {what} {numel} elements to shape {shape}", loc=caller_loc(),
                            help=f"the new shape must hold exactly {numel} elements (at most one -1)")
    return shape
