"""S7: which bytes a tensor view reaches, and whether two views share any byte.

A view is a strided lattice of elements over its storage. `overlaps` answers exactly for
contiguous ranges and for strided lattices; only when both views are huge and irregular
does it answer a conservative True (the launcher then refuses: never a missed alias).

The exact test works on *runs*: each view is rewritten as `width` contiguous bytes placed
at `origin + sum(k_d * s_d)` (size-1 and stride-0 axes dropped, mergeable axes merged,
the innermost dense axis folded into `width`). One view's runs are enumerated (the
*probe*); for each, the other view's nearest run start at or before the probe's end is
found (greedily when its strides are nested, else by binary search over its sorted
starts), and the two runs are compared. Addresses, not storage identities, are compared,
so two storage objects over the same memory (e.g. a DLPack round trip) are still seen.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

# Above this many runs, enumerating a view is too slow for a launch check.
ENUMERATE_LIMIT = 1 << 22
# Peeling a common outer axis pays off only when few row offsets can meet.
_MAX_ROW_SHIFTS = 16


class ByteSet(NamedTuple):
    """The bytes one view reaches: `shape` elements of `itemsize` bytes at `offset` plus
    `sum(i_d * strides[d])` bytes into the storage that starts at address `storage`.
    (A named tuple: every launch makes one per tensor, and a frozen dataclass took twice as
    long to build.)"""
    device: str
    storage: int                 # address of the storage's first byte (its identity)
    storage_nbytes: int
    offset: int                  # byte offset of element (0, ..., 0) in the storage
    shape: tuple[int, ...]
    strides: tuple[int, ...]     # in bytes, never negative (torch guarantees it)
    itemsize: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def start(self) -> int:
        """Absolute address of the first byte reached."""
        return self.storage + self.offset

    @property
    def end(self) -> int:
        """Absolute address one past the last byte reached (meaningless when empty)."""
        last = sum((n - 1) * s for n, s in zip(self.shape, self.strides))
        return self.start + last + self.itemsize


def byte_set(view: torch.Tensor) -> ByteSet:
    """The ByteSet of a torch view (any dtype, any device)."""
    storage = view.untyped_storage()
    item = view.element_size()
    device = view.device
    name = _DEVICE_NAMES.get(device)
    if name is None:
        name = _DEVICE_NAMES[device] = str(device)
    return ByteSet(name, storage.data_ptr(), storage.nbytes(),
                   view.storage_offset() * item,   # not data_ptr(): it is 0 for empty views
                   tuple(view.shape), tuple([s * item for s in view.stride()]), item)


_DEVICE_NAMES: dict = {}     # torch.device -> "cpu" / "cuda:0": str() of a device costs ~1 us


def first_address(view: torch.Tensor, sptr: int) -> int:
    """The address of a view's first element (`sptr`: its storage's address), also for an empty
    view: torch's `data_ptr()` is 0 there, so distances to other views of its storage would be
    garbage. The one definition; the per-launch loops (byte_set_slots.placed, prepared_launch)
    write it inline, as the byte offset `ptr - sptr if ptr else storage_offset * item`."""
    return view.data_ptr() or sptr + view.storage_offset() * view.element_size()


def device_name(device) -> str:
    """str(device), cached (byte_set looks the cache up inline: it runs per tensor per launch)."""
    name = _DEVICE_NAMES.get(device)
    if name is None:
        name = _DEVICE_NAMES[device] = str(device)
    return name


def overlaps(a: ByteSet, b: ByteSet) -> bool:
    """True when some byte is reached by both views (exact unless both are huge and irregular)."""
    if a.device != b.device or a.numel == 0 or b.numel == 0:
        return False
    return _runs_overlap(_Runs.of(a), _Runs.of(b))


def dense_span(a: ByteSet) -> tuple[int, int] | None:
    """[start, end) addresses when the view's bytes are one contiguous range, else None
    (also for an empty view): such sets merge exactly into one range."""
    if a.numel == 0:
        return None
    runs = _Runs.of(a)
    return None if runs.dims else (runs.origin, runs.origin + runs.width)


def self_overlaps(a: ByteSet) -> bool:
    """True when two elements of one view share a byte (stride 0, or overlapping strides)."""
    if a.numel == 0:
        return False
    if any(n > 1 and s == 0 for n, s in zip(a.shape, a.strides)):
        return True
    dims = _merge(sorted(((n, s) for n, s in zip(a.shape, a.strides) if n > 1),
                         key=lambda d: d[1], reverse=True))
    if _byte_nested(dims, a.itemsize):
        return False
    if a.numel > ENUMERATE_LIMIT:
        return True                       # conservative: too many elements to check
    starts = np.sort(_lattice(dims))
    return bool(np.any(np.diff(starts) < a.itemsize))


@dataclass(frozen=True, slots=True)
class _Runs:
    """`width` contiguous bytes at `origin + sum(k_d * s_d)`, dims outermost (largest stride) first."""
    origin: int
    dims: tuple[tuple[int, int], ...]    # (count, byte stride)
    width: int

    @staticmethod
    def of(a: ByteSet) -> "_Runs":
        # Size-1 and stride-0 axes add no bytes to the *set*, so they go.
        dims = _merge(sorted(((n, s) for n, s in zip(a.shape, a.strides) if n > 1 and s > 0),
                             key=lambda d: d[1], reverse=True))
        width = a.itemsize
        while dims and dims[-1][1] <= width:   # innermost axis touches or overlaps: one run
            n, s = dims.pop()
            width += (n - 1) * s
        return _Runs(a.start, tuple(dims), width)

    @property
    def end(self) -> int:
        """One past the last byte reached."""
        return self.origin + sum((n - 1) * s for n, s in self.dims) + self.width

    @property
    def count(self) -> int:
        return math.prod(n for n, _ in self.dims)

    def nested(self) -> bool:
        """Each stride is at least the inner axes' largest offset, so starts sort lexicographically."""
        inner = 0
        for n, s in reversed(self.dims):
            if s < inner:
                return False
            inner += (n - 1) * s
        return True

    def predecessor(self, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For offsets (from origin): (found, largest run start <= target)."""
        found = targets >= 0
        if self.nested():
            # Greedy digit by digit is exact for nested strides; no enumeration needed.
            rest = np.where(found, targets, 0)
            best = np.zeros_like(rest)
            for n, s in self.dims:
                k = np.minimum(rest // s, n - 1)
                best += k * s
                rest -= k * s
            return found, best
        starts = np.sort(_lattice(list(self.dims)))
        idx = np.searchsorted(starts, targets, side="right") - 1
        return found & (idx >= 0), starts[np.maximum(idx, 0)]


def _merge(dims: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Fuse an outer axis into the next inner one when it just continues it (stride = n*s)."""
    merged: list[tuple[int, int]] = []
    for n, s in dims:
        if merged and merged[-1][1] == n * s:
            merged[-1] = (merged[-1][0] * n, s)
        else:
            merged.append((n, s))
    return merged


def _byte_nested(dims: list[tuple[int, int]], itemsize: int) -> bool:
    """Each stride clears everything the inner axes reach: no two elements share a byte."""
    extent = itemsize
    for n, s in reversed(dims):
        if s < extent:
            return False
        extent += (n - 1) * s
    return True


def _lattice(dims: list[tuple[int, int]]) -> np.ndarray:
    """All offsets sum(k_d * s_d), as a flat int64 array."""
    offsets = np.zeros(1, dtype=np.int64)
    for n, s in dims:
        offsets = (offsets[:, None] + np.arange(n, dtype=np.int64)[None, :] * s).ravel()
    return offsets


def _residues_disjoint(a: _Runs, b: _Runs) -> bool:
    """Every start is origin + a multiple of g; if the two byte windows mod g never meet,
    no bytes are shared. A cheap proof that settles interleaved views without enumeration."""
    g = 0
    for _, s in a.dims + b.dims:
        g = math.gcd(g, s)
    if g == 0 or a.width >= g or b.width >= g:
        return False
    ra, rb = a.origin % g, b.origin % g
    return (rb - ra) % g >= a.width and (ra - rb) % g >= b.width


def _runs_overlap(a: _Runs, b: _Runs) -> bool:
    """Cheapest exact argument first; enumeration last."""
    if a.end <= b.origin or b.end <= a.origin:
        return False                      # spans are apart
    if not a.dims and not b.dims:
        return True                       # two contiguous ranges whose spans meet
    if _residues_disjoint(a, b):
        return False                      # e.g. interleaved columns x[:, 0::2] / x[:, 1::2]
    rows = _pair_rows(a, b)
    if rows is not None:
        return any(_runs_overlap(ra, rb) for ra, rb in rows)
    return _runs_meet(a, b)


def _pair_rows(a: _Runs, b: _Runs) -> list[tuple[_Runs, _Runs]] | None:
    """Peel a common outermost stride s: rows i of a and j of b can only meet for the few
    k = j - i where their spans meet, and then the question no longer depends on i. Turns
    two huge row-major lattices (e.g. x[:, 0::3] and x[:, 1::3]) into small ones."""
    if not a.dims or not b.dims or a.dims[0][1] != b.dims[0][1]:
        return None
    (na, s), (nb, _) = a.dims[0], b.dims[0]
    ra, rb = _Runs(a.origin, a.dims[1:], a.width), _Runs(b.origin, b.dims[1:], b.width)
    extent_a, extent_b, d = ra.end - ra.origin, rb.end - rb.origin, b.origin - a.origin
    # rows meet iff -extent_b < d + k*s < extent_a
    k_lo = max(-(na - 1), (-extent_b - d) // s + 1)
    k_hi = min(nb - 1, -((d - extent_a) // s) - 1)
    if k_hi - k_lo + 1 > _MAX_ROW_SHIFTS:
        return None
    return [(ra, _Runs(rb.origin + k * s, rb.dims, rb.width)) for k in range(k_lo, k_hi + 1)]


def _runs_meet(a: _Runs, b: _Runs) -> bool:
    """Exact when the probe is enumerable and the target searchable; otherwise True."""
    for probe, target in sorted([(a, b), (b, a)], key=lambda pt: pt[0].count):
        if probe.count <= ENUMERATE_LIMIT and (target.nested() or target.count <= ENUMERATE_LIMIT):
            starts = _lattice(list(probe.dims)) + (probe.origin - target.origin)
            found, prev = target.predecessor(starts + probe.width - 1)
            return bool(np.any(found & (prev + target.width > starts)))
    return True                           # conservative: both huge and irregular
