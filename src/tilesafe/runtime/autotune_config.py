"""`ts.Config`: one autotuning candidate, and `ts.auto`, the launch keyword that asks for one.

A config is written in one keyword form, the same shape as a row of the kernel library's
config table, so that table can be read into configs unchanged:

    ts.Config(BM=128, BN=128, BK=64, num_warps=8, num_stages=3)
    ts.Config(tile=(256,), num_warps=4)

`num_warps`, `num_stages`, `maxnreg`, `tma`, `reverse_blocks` and `waves_per_eu` are schedule hints
(`ts.schedule`); every other keyword sets a `ts.Const` parameter; `tile=` gives the
outputs' tile outright (one tuple for every output, or `{output: tuple}`), for kernels
whose tile is not named by Consts. Checks
that need only the config run here; checks against a kernel run in `Prepared.of`, when
`@ts.autotune` is applied.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import DType
from ..errors import KernelError, LaunchError, caller_loc
from ..lang.annotations import CONST, OUTPUTS
from .partition import next_pow2
from .schedule import Schedule, schedule

SCHEDULE_KEYS = ("num_warps", "num_stages", "maxnreg", "tma", "reverse_blocks", "pdl", "waves_per_eu")


class Auto:
    """The type of `ts.auto`: `kernel(z, x, tile=ts.auto)` lets the autotuner pick the tile."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "ts.auto"


AUTO = Auto()


@dataclass(frozen=True, slots=True, init=False)
class Config:
    """An autotuning candidate: `ts.Config(tile=None, **consts_and_schedule_hints)`."""
    tile: tuple | None            # one tile for every output, or ((output, tile), ...) sorted
    consts: tuple                 # ((Const name, value), ...) in the order given
    schedule: Schedule | None

    def __init__(self, tile=None, **values):
        try:
            self._init(tile, values)
        except KernelError as e:   # point at the user's ts.Config(...), without our frames
            raise KernelError(e.message, caller_loc(), e.help) from None

    def _init(self, tile, values) -> None:
        hints = {k: values.pop(k) for k in SCHEDULE_KEYS if k in values}
        try:
            sched = schedule(**hints) if hints else None
        except LaunchError as e:
            raise KernelError(f"ts.Config: {e.message}", help=e.help or "num_warps is 1, 2, 4, 8, 16 or 32") from None
        for name, value in values.items():
            if isinstance(value, bool) or isinstance(value, (int, float, DType)):
                continue
            raise KernelError(f"ts.Config: `{name}` = {value!r} is not a compile-time value",
                              help="configs set ts.Const parameters to ints, floats, bools or dtypes")
        object.__setattr__(self, "tile", _normal_tile(tile))
        object.__setattr__(self, "consts", tuple(values.items()))
        object.__setattr__(self, "schedule", sched)

    def __eq__(self, other) -> bool:
        return isinstance(other, Config) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(repr(self.to_json()))

    def to_json(self) -> dict:
        """The keyword form as JSON values (what `Config(**d)` and the tuned files hold)."""
        out = {}
        if self.tile is not None:
            out["tile"] = ({name: list(t) for name, t in self.tile} if _per_output(self.tile) else list(self.tile))
        out.update({k: (v.name if isinstance(v, DType) else v) for k, v in sorted(self.consts)})
        if self.schedule is not None:
            out.update(self.schedule.hints())
        return out

    def __repr__(self) -> str:
        parts = [] if self.tile is None else [f"tile={dict(self.tile) if _per_output(self.tile) else self.tile}"]
        parts += [f"{k}={v!r}" for k, v in self.consts]
        if self.schedule is not None:
            parts += [f"{k}={v}" for k, v in self.schedule.hints().items()]
        return f"Config({', '.join(parts)})"


def _per_output(tile: tuple) -> bool:
    return bool(tile) and isinstance(tile[0], tuple)


def _normal_tile(tile):
    if tile is None:
        return None
    if isinstance(tile, dict):
        return tuple(sorted((str(name), _tile_tuple(t, f" of `{name}`")) for name, t in tile.items()))
    return _tile_tuple(tile, "")


def _tile_tuple(tile, of: str) -> tuple[int, ...]:
    if not isinstance(tile, (tuple, list)) or not tile:
        raise KernelError(f"ts.Config: the tile{of} must be a tuple of ints, got {tile!r}",
                          help="e.g. ts.Config(tile=(128,)), or {output: (64, 64)} for several outputs")
    return tuple(_pow2(entry, f"tile entry {axis}{of}") for axis, entry in enumerate(tile))


def _pow2(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise KernelError(f"ts.Config: {what} is {value!r}, not an int",
                          help="tile sizes are positive powers of two, e.g. 64")
    if value <= 0 or value & (value - 1):
        raise KernelError(f"ts.Config: {what} is {value}, not a positive power of two",
                          help=f"use {next_pow2(value) if value > 0 else 1}, the next power of two")
    return value


@dataclass(frozen=True, slots=True)
class Prepared:
    """A config checked against one kernel: each output's tile, the Consts, the hints."""
    config: Config
    tiles: dict          # output name -> tile tuple
    consts: dict         # Const name -> value (as the config gives it)

    @staticmethod
    def of(kernel, config, index: int) -> "Prepared":
        if not isinstance(config, Config):
            raise KernelError(f"configs[{index}] is {type(config).__name__}, not a ts.Config",
                              help="write configs=[ts.Config(BM=64, num_warps=4), ...]")
        consts = dict(config.consts)
        for name, value in consts.items():
            _check_const(kernel, config, name, value)
        tiles = {p.name: _output_tile(kernel, config, p, consts) for p in kernel.params
                 if p.kind in OUTPUTS}
        return Prepared(config, tiles, consts)


def _check_const(kernel, config, name, value) -> None:
    params = {p.name: p for p in kernel.params}
    p = params.get(name)
    if p is None or p.kind != CONST:
        known = ", ".join(q.name for q in kernel.params if q.kind == CONST) or "none"
        what = "is not a parameter" if p is None else "is not a ts.Const parameter"
        raise KernelError(f"{config!r} sets `{name}`, which {what} of `{kernel.name}`",
                          help=f"configs set compile-time ts.Const parameters (here: {known}) and the schedule "
                               f"hints {', '.join(SCHEDULE_KEYS)}")
    kind = p.dtype
    ok = (isinstance(value, DType) if kind is DType else isinstance(value, bool) if kind is bool
          else isinstance(value, int) and not isinstance(value, bool) if kind is int
          else isinstance(value, (int, float)) and not isinstance(value, bool))
    if not ok:
        raise KernelError(f"{config!r} sets `{name}` = {value!r}, but `{name}` is a "
                          f"ts.Const[{getattr(kind, '__name__', kind)}]",
                          help=f"give `{name}` a value of that type")


def _output_tile(kernel, config, p, consts) -> tuple[int, ...]:
    """The tile `config` gives output `p`: from `tile=` or from its annotation's Consts."""
    given = config.tile
    if given is not None and _per_output(given):
        given = dict(given).get(p.name)
    derived = []
    for axis, entry in enumerate(p.shape):
        if isinstance(entry, int):
            derived.append(entry)
        elif entry in consts:
            derived.append(consts[entry])
        else:
            default = kernel.param(entry).default
            derived.append(default if isinstance(default, int) and not isinstance(default, bool) else None)
    if given is None:
        if None in derived:
            names = [e for e, d in zip(p.shape, derived) if d is None]
            raise KernelError(f"{config!r} does not fix the tile of `{p.name}` (its tile is {p.shape})",
                              help=f"set {' and '.join(names)} in the config, or give tile=(...)")
        for axis, size in enumerate(derived):
            _pow2_tile(config, p.name, axis, size)
        return tuple(derived)
    if len(given) != len(p.shape):
        raise KernelError(f"{config!r} gives `{p.name}` the tile {given}, but its tile has rank {len(p.shape)}",
                          help=f"give one size per axis of {p.shape}")
    for axis, (size, want, entry) in enumerate(zip(given, derived, p.shape)):
        if want is not None and want != size and (isinstance(entry, int) or entry in consts):
            raise KernelError(f"{config!r} gives `{p.name}` the tile {given}, but axis {axis} is {want} "
                              f"(`{entry}`)", help=f"make tile= agree with {entry}, or leave one of them out")
    return given


def _pow2_tile(config, name: str, axis: int, size) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0 or size & (size - 1):
        hint = f"use {next_pow2(size)}, the next power of two" if isinstance(size, int) and size > 0 else \
            "tile sizes are positive powers of two, e.g. 64"
        raise KernelError(f"{config!r} gives `{name}` a tile whose entry {axis} is {size!r}, "
                          "not a positive power of two", help=hint)
