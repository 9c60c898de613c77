"""S8: a partition lends its tensor exclusively to the launches that write it tile by tile.

`t.partition(tile)` splits `t` into a grid of `tile`-shaped blocks (ragged at the edges)
and lends `t` to the partition: until `p.unpartition()` gives the same tensor back, every
other use of `t` is an OwnershipError that names where it was lent. A partition nobody can
reach any more cannot be launched either, so its lending ends when it is garbage-collected.
"""
from __future__ import annotations

import operator
import sys
import warnings
import weakref
from typing import TYPE_CHECKING

from ..errors import LaunchError, Loc, OwnershipError, caller_loc
from .aliasing import byte_set, self_overlaps
from .host_lock import LOCK
from .torch_version import version_of

if TYPE_CHECKING:   # for annotations only: tensor.py imports this module, not the other way at run time
    from ..dtypes import DType
    from .tensor import Tensor

MAX_RANK = 3


def where(loc: "Loc | tuple | None") -> str:
    """`file:line` of a recorded place (a Loc, or a `place()`), for messages."""
    if loc is None:
        return "an unknown place"
    if type(loc) is tuple:
        return f"{loc[0]}:{loc[1]}"
    return f"{loc.file}:{loc.line}"


def place() -> tuple | None:
    """(file, line) of the first caller outside tilesafe: where lending began or ended, kept
    for messages that may never be made. Cheaper than `caller_loc()` (no column, no Loc),
    since a partition made and given back per launch records two places per launch."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code in USER_CODE:             # seen before: set lookups, no call per frame
            return (code.co_filename, frame.f_lineno)
        if code not in _OURS:
            name = frame.f_globals.get("__name__", "")
            if not (name == "tilesafe" or name.startswith("tilesafe.")):
                if len(USER_CODE) >= 4096:    # code made at run time (exec, notebook cells): start over
                    USER_CODE.clear()
                USER_CODE.add(code)
                return (code.co_filename, frame.f_lineno)
            _OURS.add(code)
        frame = frame.f_back
    return None


# Code objects `place` has seen, by whose they are (a function's code belongs to one module);
# tensor.py's partition() reads USER_CODE inline too.
_OURS: set = set()
USER_CODE: set = set()


class Partition:
    """A tensor split into a grid of tiles and lent exclusively to the launches that write it.

    Made by `t.partition(tile)` or `t.partition_prefix(tile)`; `p.unpartition()` ends the
    lending and returns `t` itself.
    """
    __slots__ = ("_tensor", "_tile", "_prefix", "_lent_at", "_live", "_ended_at", "_version", "__weakref__")

    def __init__(self, tensor: "Tensor", tile, prefix: bool, lent_at: "Loc | tuple | None"):
        t = tensor._t
        self._tile = check_tile(tile, t.shape)
        self._tensor = tensor
        self._prefix = prefix
        self._lent_at = lent_at
        self._live = True
        # torch's version counter when lent (S13): version_of, inline (a partition is made per launch)
        self._version = 0 if t.is_inference() else t._version
        self._ended_at: Loc | None = None
        # StorageState.lend(None, self) and Tensor._lend(self), inline (a partition is made per
        # launch): its byte set is made when someone asks (lender_of).
        ref = weakref.ref(self)
        tensor._state._lent.append((None, ref))
        tensor._lender = ref

    @property
    def grid(self) -> tuple[int, ...]:
        """Tiles per axis: ceil(shape / tile)."""
        self._check_live()
        return tuple(-(-n // t) for n, t in zip(self._tensor._torch().shape, self._tile))

    @property
    def tile(self) -> tuple[int, ...]:
        self._check_live()
        return self._tile

    @property
    def shape(self) -> tuple[int, ...]:
        self._check_live()
        return tuple(self._tensor._torch().shape)

    @property
    def dtype(self) -> "DType":
        self._check_live()
        return self._tensor._dtype

    @property
    def prefix(self) -> bool:
        """True for `partition_prefix`: a launch grid may cover a leading part of `grid`."""
        self._check_live()
        return self._prefix

    def unpartition(self) -> "Tensor":
        """End the lending and return the tensor (the same object that was partitioned)."""
        with LOCK:   # ends lending that other threads check (host_lock; serialized, without a wrapper call)
            if not self._live:
                self._check_live()
            tensor = self._tensor
            t = tensor._t
            now = 0 if t.is_inference() else t._version   # torch_touched, inline: warns when it moved
            if now != self._version and now != tensor._state.own_write_version:
                self._check_torch_untouched(giving_back=True)
            self._live = False
            f = sys._getframe(1)                       # place(), inline for a caller seen before
            code = f.f_code
            self._ended_at = (code.co_filename, f.f_lineno) if code in USER_CODE else place()
            lent = tensor._state._lent
            if lent and lent[-1][1]() is self:         # StorageState.unlend's common case: the latest lending
                del lent[-1]
            else:
                tensor._state.unlend(self)
            lender = tensor._lender                    # Tensor._give_back, inline
            if lender is not None and lender() is self:
                tensor._lender = None
            return tensor

    def torch_touched(self) -> bool:
        """Best-effort S13: did torch modify the lent memory? Torch's version counter moved
        past both the lending and tilesafe's own last host write to this storage."""
        now = version_of(self._tensor._t)
        return now != self._version and now != self._tensor._state.own_write_version

    def _check_torch_untouched(self, giving_back: bool = False) -> None:
        """S13, best-effort. The version counter covers the whole torch storage and cannot say
        which bytes torch wrote: when the partition holds every byte of it, a moved counter
        means torch wrote lent bytes, and a launch is refused. When only part is lent, torch may
        have written the rest, so it is a warning. `unpartition()` always gives the tensor back
        (warning instead), else a counter could keep it lent for ever. Each move is reported once."""
        if not self.torch_touched():
            return
        t = self._tensor._torch()
        whole = self._lends_whole_storage()
        lent = (f"the {_describe(t)} tensor lent to this partition (at {where(self._lent_at)})")
        if whole and not giving_back:
            raise OwnershipError(
                f"{lent} was modified through torch while tilesafe held it",
                loc=caller_loc(),
                help="do not write a borrowed tensor (ts.from_torch) with torch while it is partitioned; "
                     "unpartition it first, or copy it (to_torch(copy=True)). This check is best-effort: "
                     "it sees torch's in-place operations, not writes through raw pointers")
        if whole:
            message = (f"{lent} was modified through torch while tilesafe held it; unpartition() gives it "
                       "back, but its values may mix torch's writes with the launches'")
        else:
            message = (f"torch modified the storage of {lent} while it was lent; only part of that storage is "
                       "lent and torch's version counter cannot say which bytes it wrote, so this may be "
                       "ordinary interop with the other bytes. Do not write lent bytes through torch")
        loc = caller_loc()
        warnings.warn_explicit(message, RuntimeWarning, loc.file if loc else "<unknown>", loc.line if loc else 0)
        self._version = version_of(t)            # reported: warn again only when it moves again

    def _lends_whole_storage(self) -> bool:
        """Every byte of the torch storage (all the version counter covers) is lent."""
        t = self._tensor._torch()
        bs = byte_set(t)
        return t.numel() * t.element_size() == t.untyped_storage().nbytes() and not self_overlaps(bs)

    def _check_live(self) -> None:
        if not self._live:
            raise OwnershipError(
                f"this partition was unpartitioned at {where(self._ended_at)}",
                loc=caller_loc(),
                help="use the tensor that unpartition() returned, or partition it again")

    def __repr__(self) -> str:
        if not self._live:
            return f"Partition(<unpartitioned at {where(self._ended_at)}>)"
        kind = "partition_prefix" if self._prefix else "partition"
        return (f"Partition(shape={self.shape}, tile={self._tile}, grid={self.grid}, "
                f"dtype={self._tensor._dtype!r}, kind={kind})")


def partition_for_step(tensor: "Tensor", tile) -> Partition:
    """A partition made and ended (`end_step`) inside one step that holds the runtime's lock
    throughout (a library call's launch, kernels/launch.py). No other thread can see `tensor`
    before its end, and the step itself uses it only through the launch, so the lending is not
    recorded by bytes nor by place: S8 protects other users, and there are none. The caller has
    checked that no other partition holds the bytes. (A function of this module, not a method:
    `Partition` is the user's, and this lending skips the records user code relies on.)"""
    p = Partition.__new__(Partition)
    p._tile = check_tile(tile, tensor._torch().shape)
    p._tensor, p._prefix, p._lent_at, p._live, p._ended_at = tensor, False, None, True, None
    p._version = version_of(tensor._torch())   # S13: a torch write during the step is still seen
    return p


def end_step(p: Partition) -> None:
    """The end of a `partition_for_step` partition: it is unusable from now on."""
    p._live = False


def _describe(t) -> str:
    """`(64, 32) float32` for messages."""
    return f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}"


def check_tile(tile, shape) -> tuple[int, ...]:
    """The tile as a tuple of ints, or a LaunchError naming the bad entry. `shape`: a tuple
    or a torch.Size (a tuple that hashes and compares as one: looked up without a copy)."""
    if tile is _LAST[0] and len(shape) == _LAST[1]:
        return tile                     # the very tuple checked last, for a shape of its rank
    if type(tile) is tuple:             # a tile checked before for this shape: a lookup
        checked = _CHECKED.get((tile, shape))
        if checked is not None:
            for entry in tile:
                if type(entry) is not int:  # True and 1.0 equal 1 in the key: checked in full
                    break
            else:
                _LAST[0], _LAST[1] = tile, len(shape)
                return checked
    shape = tuple(shape)                # messages print it as a tuple
    checked = _check_tile(tile, shape)
    if type(tile) is tuple:
        if len(_CHECKED) >= 1024:
            _CHECKED.clear()
        _CHECKED[(tile, shape)] = checked
    return checked


_CHECKED: dict = {}       # (tile, shape) -> the checked tile, for tuples of ints that passed
# The tuple of ints found in _CHECKED last, and the rank of its shape: a tile's check depends on
# the shape's rank only, and a tuple is immutable, so the same object (held here, so its id is
# not reused) passes again for any shape of that rank — a partition per launch with the tile
# written once in the caller's code (a constant) costs one identity test.
_LAST: list = [None, -1]


def _check_tile(tile, shape: tuple[int, ...]) -> tuple[int, ...]:
    if not isinstance(tile, (tuple, list)):
        example = (next_pow2(tile),) if isinstance(tile, int) and tile > 0 else (128,)
        raise LaunchError(f"a tile must be a tuple with one entry per axis, got {tile!r}",
                          loc=caller_loc(), help=f"write the tile as a tuple, e.g. {example}")
    if not 1 <= len(shape) <= MAX_RANK:
        raise LaunchError(f"only tensors of rank 1 to {MAX_RANK} can be partitioned; this one has rank {len(shape)}",
                          loc=caller_loc(), help="view it with .reshape(...) to a rank the kernel expects")
    if len(tile) != len(shape):
        raise LaunchError(f"tile {tuple(tile)} has {len(tile)} entries but the tensor has {len(shape)} axes {shape}",
                          loc=caller_loc(), help="give one tile size per axis")
    return tuple(_check_entry(axis, entry) for axis, entry in enumerate(tile))


def _check_entry(axis: int, entry) -> int:
    try:
        if isinstance(entry, bool):
            raise TypeError                       # True is an int to Python, never a tile size
        size = operator.index(entry)
    except TypeError:
        raise LaunchError(f"tile entry {axis} is {entry!r}, not an int",
                          loc=caller_loc(), help="tile sizes are positive powers of two, e.g. 64") from None
    if size <= 0 or size & (size - 1):
        suggestion = next_pow2(size) if size > 0 else 1
        raise LaunchError(f"tile entry {axis} is {size}, not a positive power of two",
                          loc=caller_loc(), help=f"use {suggestion}, the next power of two")
    return size


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << (n - 1).bit_length() if n > 1 else 1
