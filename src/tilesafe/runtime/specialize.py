"""Specialization: from a bound launch to IR (cached by compile-time facts) to code.

Two cache levels, keyed only by what changes the code — never by raw extents, so a decode
step does not recompile per token:
  * IR key: Const values, dtypes, ranks, tiles, scalar dtypes;
  * code key: the IR key plus the launch facts that select masks (S11), the backend, and
    the 32/64-bit offset fact.
"""
from __future__ import annotations

import math
import inspect
from dataclasses import dataclass

from .. import dtypes as dt
from ..backends.registry import backend_named
from ..errors import KernelError
from ..lang import bounds
from ..lang.annotations import CONST, REF, OUTPUTS
from ..lang.builder import Bindings
from ..lang.coverage import definitely_written, reads_outputs
from ..lang.frontend import build_function, grid_rank_of
from ..lang.ir import Function
from ..lang.typing_rules import python_scalar_dtype
from ..settings import SETTINGS


@dataclass
class Spec:
    """One specialization's IR, its bounds analysis and its S14 facts (computed once here,
    not per launch): the outputs it reads before writing them and those it writes whole."""
    fn: Function
    checks: list
    reads: frozenset = frozenset()
    written: frozenset = frozenset()


class LaunchFacts:
    """Answers the leaves of bounds conditions for one launch."""
    __slots__ = ("bound",)

    def __init__(self, bound):
        self.bound = bound

    def extent(self, name, axis):
        return self.bound.tensors[name].shape[axis]

    def scalar(self, name):
        return self.bound.scalars.get(name, self.bound.consts.get(name))

    def grid(self, axis):
        g = self.bound.grid
        if g is None:
            # A persistent kernel launched without grid= runs on the backend's choice of grid
            # (3 on the reference backend, #SMs-based on a GPU): assume any size, so an access
            # indexed by block_id keeps its mask rather than trusting a grid of 1.
            return math.inf
        return g[axis] if axis < len(g) else 1


class Specializer:
    def __init__(self, kernel):
        self.kernel = kernel
        self.specs: dict = {}
        self.code: dict = {}
        self.grid_rank = grid_rank_of(kernel.params)

    def ir_key(self, bound) -> tuple:
        k = self.kernel
        tensors = tuple((n, f.dtype.name, len(f.shape), f.tile if k.param(n).kind in OUTPUTS else None)
                        for n, f in bound.tensors.items())
        consts = tuple(sorted((n, repr(v)) for n, v in bound.consts.items()))
        scalars = tuple(sorted((n, _scalar_dtype(k.param(n).dtype, v).name) for n, v in bound.scalars.items()))
        return tensors, consts, scalars

    def bindings(self, bound) -> Bindings:
        k = self.kernel
        tensors = {n: (f.dtype, len(f.shape), f.tile if k.param(n).kind in OUTPUTS else None)
                   for n, f in bound.tensors.items()}
        scalars = {n: _scalar_dtype(k.param(n).dtype, v) for n, v in bound.scalars.items()}
        return Bindings(dict(bound.consts), tensors, scalars)

    def spec(self, bound) -> Spec:
        key = self.ir_key(bound)
        spec = self.specs.get(key)
        if spec is None:
            spec = self._build(self.bindings(bound))
            self.specs[key] = spec
        return spec

    def _build(self, bindings: Bindings) -> Spec:
        k = self.kernel
        fn = build_function(k.name, k.src, k.params, bindings, k.unsafe, self.grid_rank)
        static = {}
        for p in k.params:
            if p.kind == REF:
                for axis, entry in enumerate(p.shape):
                    if isinstance(entry, int) and entry >= 0:
                        static[(p.name, axis)] = entry
                    elif isinstance(entry, str) and entry in bindings.consts:
                        static[(p.name, axis)] = bindings.consts[entry]
        return Spec(fn, bounds.analyze(fn, static), frozenset(reads_outputs(fn)), frozenset(definitely_written(fn)))

    def try_at_definition(self) -> None:
        """Build the IR now when no launch fact is needed, so S3 errors surface at definition."""
        k = self.kernel
        consts, tensors, scalars = {}, {}, {}
        for p in k.params:
            if p.kind == CONST:
                if p.default is _EMPTY:
                    return
                consts[p.name] = p.default
        for p in k.params:
            if p.is_tensor:
                dtype = p.dtype if not isinstance(p.dtype, str) else consts.get(p.dtype)
                if dtype is None:
                    return
                tile = None
                if p.kind in OUTPUTS:
                    tile = tuple(e if isinstance(e, int) else consts.get(e) for e in p.shape)
                    if None in tile:
                        return
                tensors[p.name] = (dt.coerce(dtype), len(p.shape) if p.shape else 1, tile)
            elif p.kind != CONST:
                scalars[p.name] = {int: dt.i32, float: dt.f32, bool: dt.bool_}[p.dtype]
        self._build(Bindings(consts, tensors, scalars))

    def report(self, bound) -> bounds.Report:
        return bounds.report(self.spec(bound).checks, LaunchFacts(bound))

    def compiled(self, bound, backend: str, schedule=None):
        spec = self.spec(bound)
        facts = LaunchFacts(bound)
        masks = bounds.masks_for(spec.checks, facts)
        if self.kernel.deny_kernel_checks:
            refuse_denied_masks(self.kernel, spec, masks)
        wide = needs_64bit(bound)
        key = (self.ir_key(bound), backend, tuple(sorted((i, m) for i, m in masks.items())), wide, schedule)
        code = self.code.get(key)
        if code is None:
            code = backend_named(backend).compile(self.kernel, spec, masks, wide, bound, schedule)
            self.code[key] = code
            if SETTINGS.dump:
                _dump(self.kernel.name, spec, code)
        return code

    def triton_source(self, bound) -> str:
        spec = self.spec(bound)
        masks = bounds.masks_for(spec.checks, LaunchFacts(bound))
        from ..backends.triton import codegen
        return codegen.generate(self.kernel, spec, masks, needs_64bit(bound)).text


_EMPTY = inspect.Parameter.empty


def _dump(name: str, spec: Spec, code) -> None:
    """TILESAFE_DUMP=1: print each new specialization's IR and generated source to stderr."""
    import sys
    from ..lang.ir import format_function
    print(f"=== tilesafe: IR of {name} ===\n{format_function(spec.fn)}", file=sys.stderr)
    source = getattr(code, "source", None)
    if source:
        print(f"=== tilesafe: Triton source of {name} ===\n{source}", file=sys.stderr)


def _scalar_dtype(kind, value):
    if kind is float:
        return dt.f32
    if kind is bool:
        return dt.bool_
    return python_scalar_dtype(value)


def needs_64bit(bound) -> bool:
    """Offsets are 32-bit only when every element offset of every tensor fits, and so does
    every extent (a stride-0 axis spans nothing, yet its coordinates count up to its extent).
    Then a masked tile in range computes coordinates below its (power-of-two) tiles' cover of
    the extent, at most 2**31. Tile indices from runtime values need nothing here: where the
    launch cannot show that index * tile fits, the access guards its index (bounds.GUARD)."""
    for f in bound.tensors.values():
        span = sum((n - 1) * abs(s) for n, s in zip(f.shape, f.strides) if n > 0)
        if span >= 2**31 - 1 or any(n > 2**31 - 1 for n in f.shape):
            return True
    return False


def refuse_denied_masks(kernel, spec: Spec, masks) -> None:
    """A kernel with deny_kernel_checks=True refuses arguments whose tiles would need an edge mask."""
    for c in spec.checks:
        if any(masks[id(c.op)]):
            axes = [a.axis for a, m in zip(c.axes, masks[id(c.op)]) if m]
            raise KernelError(f"`{kernel.name}` denies in-kernel bounds checks, but this {c.kind} of `{c.tensor}` "
                              f"needs a mask on axis {axes[0]} for these arguments",
                              c.loc, help="make the extents divide by the tile (pad the tensor), or drop "
                                          "deny_kernel_checks=True to let edges be masked")
