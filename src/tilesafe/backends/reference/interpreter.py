"""The reference backend: a NumPy interpreter of the tile IR, one block at a time.

Tensors are NumPy views of the launch's memory, so stores write through. Each block runs
the whole function body on NumPy tiles. Padding is semantics: every load pads, every
store drops out-of-range elements, whatever the bounds plan says (the sanitizer checks
the plan instead).
"""
from __future__ import annotations

import itertools

import numpy as np

from ... import dtypes as dt
from ...lang.ir import Block, Function, Op, TensorType
from ...lang.tile_order import tile_coords
from . import numerics as nx
from . import philox


class _Yield(Exception):
    pass


class Interpreter:
    def __init__(self, fn: Function, tensors: dict, scalars: dict, grid: tuple[int, ...], sanitizer=None):
        self.fn = fn
        self.tensors = tensors            # param name -> NumPy array (a view of device memory)
        self.scalars = scalars            # param name -> Python number
        self.grid = tuple(grid)
        self.san = sanitizer
        self.block_id: tuple[int, ...] = ()
        self.arrived: dict = {}           # S16: group (block_id without axis 0) -> blocks arrived

    def run(self) -> None:
        for bid in itertools.product(*(range(g) for g in self.grid)):
            self.block_id = bid
            env = {}
            for p in self.fn.params:
                if p.value is not None and isinstance(p.value.type, TensorType):
                    env[id(p.value)] = self.tensors[p.name]
                elif p.value is not None:
                    env[id(p.value)] = np.asarray(self.scalars[p.name], p.value.dtype.np)
            self.exec_block(self.fn.body, env)

    # --- control ------------------------------------------------------------------------------
    def exec_block(self, block: Block, env: dict):
        for op in block.ops:
            if op.opcode == "yield":
                return [env[id(a)] for a in op.args]
            out = getattr(self, "op_" + op.opcode)(op, [env[id(a)] for a in op.args], env)
            if op.results:
                outs = out if len(op.results) > 1 or op.opcode in _MULTI else [out]
                for r, v in zip(op.results, outs):
                    env[id(r)] = v
        return []

    def region(self, block: Block, env: dict, args) -> list:
        inner = dict(env)
        for a, v in zip(block.args, args):
            inner[id(a)] = v
        return self.exec_block(block, inner)

    def op_for(self, op: Op, args, env):
        lo, hi, step, *carried = args
        for i in range(int(lo), int(hi), int(step)):
            carried = self.region(op.regions[0], env, [np.asarray(i, op.args[0].dtype.np), *carried])
        return carried

    def op_while(self, op: Op, args, env):
        carried = list(args)
        while True:
            cond, *carried = self.region(op.regions[0], env, carried)
            if not bool(cond):
                return carried
            carried = self.region(op.regions[1], env, carried)

    def op_arrive(self, op: Op, args, env):
        """The ticket of `ts.last_arrival()`: blocks run one after another, so the group's
        last block in that order is the one that sees every member's stores."""
        group = self.block_id[1:]
        n = self.arrived[group] = self.arrived.get(group, 0) + 1
        return np.asarray(n == self.grid[0])

    def op_if(self, op: Op, args, env):
        return self.region(op.regions[0] if bool(args[0]) else op.regions[1], env, [])

    def op_tiles(self, op: Op, args, env):
        z = self.tensors[op.attrs["output"]]
        tile = self._param_type(op.attrs["output"]).tile
        grid = tuple(-(-n // t) for n, t in zip(z.shape, tile))
        rank = op.attrs["rank"]
        window = [int(a) for a in args[:2 * rank]] if op.attrs["windowed"] else None
        carried = list(args[2 * rank:] if window else args)
        walk = grid if window is None else tuple(max(0, window[2 * a + 1]) for a in range(rank))
        total = int(np.prod(walk))
        nprog = self.grid[0]
        pid = (self.block_id[0] - op.attrs.get("first", 0)) % nprog   # block `first` takes tile 0
        for t in range(pid, total, nprog):
            coords = tile_coords(t, walk, op.attrs["group"])
            if window is not None:
                coords = tuple(c + window[2 * a] for a, c in enumerate(coords))
            idx = [np.asarray(c).astype(np.int32) for c in coords]   # start + c wraps in i32, as in Triton
            carried = self.region(op.regions[0], env, idx + carried)
        return carried

    def op_subtiles(self, op: Op, args, env):
        counts = [t // s for t, s in zip(op.attrs["tile"], op.attrs["shape"])]
        carried = list(args)
        for j in itertools.product(*(range(c) for c in counts)):
            carried = self.region(op.regions[0], env, [np.asarray(x, np.int32) for x in j] + carried)
        return carried

    # --- scalars and geometry ---------------------------------------------------------------
    def op_const(self, op, args, env):
        return np.asarray(op.attrs["value"], op.result.dtype.np)

    def op_block_id(self, op, args, env):
        return np.asarray(self.block_id[op.attrs["axis"]] if op.attrs["axis"] < len(self.block_id) else 0, np.int32)

    def op_num_blocks(self, op, args, env):
        return np.asarray(self.grid[op.attrs["axis"]] if op.attrs["axis"] < len(self.grid) else 1, np.int32)

    def op_extent(self, op, args, env):
        return np.asarray(args[0].shape[op.attrs["axis"]], op.result.dtype.np)

    def op_num_tiles(self, op, args, env):
        return np.asarray(-(-args[0].shape[op.attrs["axis"]] // op.attrs["tile"]), np.int32)

    # --- elementwise ------------------------------------------------------------------------
    def op_binary(self, op, args, env):
        return nx.binary(op.attrs["op"], args[0], args[1], op.result.dtype)

    def op_compare(self, op, args, env):
        return nx.compare(op.attrs["op"], args[0], args[1], op.args[0].dtype)

    def op_unary(self, op, args, env):
        return nx.unary(op.attrs["op"], args[0], op.result.dtype)

    def op_where(self, op, args, env):
        return np.where(args[0], args[1], args[2]).astype(op.result.dtype.np)

    def op_fma(self, op, args, env):
        d = op.result.dtype
        return nx.down(nx.up(args[0], d) * nx.up(args[1], d) + nx.up(args[2], d), d)

    def op_cast(self, op, args, env):
        return nx.cast(args[0], op.args[0].dtype, op.attrs["dtype"])

    def op_full(self, op, args, env):
        return nx.cast(np.full(op.attrs["shape"], op.attrs["value"], np.float64 if isinstance(op.attrs["value"], float)
                               else np.int64), dt.f64 if isinstance(op.attrs["value"], float) else dt.i64,
                       op.attrs["dtype"])

    def op_arange(self, op, args, env):
        return np.arange(op.attrs["start"], op.attrs["stop"], dtype=np.int32)

    def op_reduce(self, op, args, env):
        return nx.reduce(op.attrs["op"], args[0], op.attrs["axis"], op.attrs["keepdims"], op.args[0].dtype)

    def op_cumsum(self, op, args, env):
        d = op.result.dtype
        return nx.down(np.cumsum(nx.up(args[0], d), axis=op.attrs["axis"]), d)

    def op_mma(self, op, args, env):
        return nx.mma(args[0], args[1], args[2], op.args[0].dtype, op.result.dtype, op.attrs["precision"])

    def op_reshape(self, op, args, env):
        return np.reshape(args[0], op.attrs["shape"])

    def op_permute(self, op, args, env):
        return np.ascontiguousarray(np.transpose(args[0], op.attrs["dims"]))

    def op_broadcast_to(self, op, args, env):
        return np.array(np.broadcast_to(args[0], op.attrs["shape"]))

    def op_join(self, op, args, env):
        return np.stack([args[0], args[1]], axis=-1)

    def op_rand(self, op, args, env):
        return philox.uniform(args[0], args[1])

    def op_print(self, op, args, env):
        print(f"[block {self.block_id}] {op.attrs['fmt']}", *[np.asarray(a) for a in args])

    # --- memory -------------------------------------------------------------------------------
    def _param_type(self, name: str) -> TensorType:
        return self.fn.param(name).value.type

    def origin(self, op: Op, index) -> tuple[int, ...]:
        """The element coordinates of a tile access's first element."""
        mode = op.attrs["mode"]
        if mode == "block":
            tile = self._param_type(op.attrs["owner"]).tile if "owner" in op.attrs else op.args[0].type.tile
            return tuple(b * t for b, t in zip(self.block_id, tile))
        if mode == "subtile":
            tile = self._param_type(op.attrs["owner"]).tile if "owner" in op.attrs else op.args[0].type.tile
            return tuple(b * t + int(j) * s for b, t, j, s in zip(self.block_id, tile, index, op.attrs["sub"]))
        if mode == "member":   # member index[0] of this block's group: its block id on axis 0
            bid = (int(index[0]),) + self.block_id[1:]
            return tuple(b * t for b, t in zip(bid, op.args[0].type.tile))
        if mode == "group":    # a MutLast tile: the group's grid indices (axes 1..)
            bid = self.block_id[1:] + (0,) * len(op.args[0].type.tile)
            return tuple(b * t for b, t in zip(bid, op.args[0].type.tile))
        shape = op.attrs.get("shape") or op.args[0].type.tile
        return tuple(int(i) * s for i, s in zip(index, shape))

    @staticmethod
    def window(origin, shape, extent):
        """(source slices, tile slices) of the in-bounds part of a tile."""
        src, dst = [], []
        for o, s, e in zip(origin, shape, extent):
            lo, hi = max(o, 0), min(o + s, e)
            if hi <= lo:
                return None
            src.append(slice(lo, hi))
            dst.append(slice(lo - o, hi - o))
        return tuple(src), tuple(dst)

    def op_load(self, op, args, env):
        x, index = args[0], args[1:]
        shape, d = op.attrs["shape"], op.result.dtype
        out = nx.cast(np.full(shape, op.attrs["padding"], np.float64 if d.is_float else np.int64),
                      dt.f64 if d.is_float else dt.i64, d)
        origin = self.origin(op, index)
        w = self.window(origin, shape, x.shape)
        if w is not None:
            out[w[1]] = x[w[0]]
        if self.san is not None:
            self.san.tile_access(self, op, origin, shape, x.shape, write=False)
        return out

    def op_prefetch(self, op, args, env):
        """A hint with no observable effect (lang/prefetch.py): nothing to do here."""

    def op_valid(self, op, args, env):
        shape = op.attrs["shape"]
        out = np.zeros(shape, bool)
        w = self.window(self.origin(op, args[1:]), shape, args[0].shape)
        if w is not None:
            out[w[1]] = True
        return out

    def op_store(self, op, args, env):
        z, tile, index = args[0], args[1], args[2:]
        shape = tile.shape
        origin = self.origin(op, index) if op.attrs["mode"] != "block" else \
            tuple(b * t for b, t in zip(self.block_id, op.args[0].type.tile))
        w = self.window(origin, shape, z.shape)
        if w is not None:
            z[w[0]] = tile[w[1]]
        if self.san is not None:
            self.san.tile_access(self, op, origin, shape, z.shape, write=True)

    def op_gather(self, op, args, env):
        x, pos, index = args[0], np.asarray(args[1]).astype(np.int64), args[2:]
        axis, shape, d = op.attrs["axis"], op.attrs["shape"], op.result.dtype
        out = nx.cast(np.full(shape, op.attrs["padding"], np.float64 if d.is_float else np.int64),
                      dt.f64 if d.is_float else dt.i64, d)
        origin = [int(i) * s for i, s in zip(index, shape)]
        for k, p in enumerate(pos):
            if not 0 <= p < x.shape[axis]:
                continue
            o = list(origin)
            o[axis] = int(p)
            sh = list(shape)
            sh[axis] = 1
            w = self.window(o, sh, x.shape)
            if w is None:
                continue
            dst = list(w[1])
            dst[axis] = slice(k, k + 1)
            out[tuple(dst)] = x[w[0]]
        return out

    def op_scatter(self, op, args, env):
        """Row i of the tile goes to row rows[start + i] where that entry is in range and no
        other entry of `rows` names the same row (lang/scatter.py); the rest is dropped."""
        z, tile, rows, index = args[0], args[1], np.asarray(args[2]).astype(np.int64), args[3:]
        shape = tile.shape
        start = int(index[0]) * shape[0]
        keep = scatter_keep(rows, start, shape[0], z.shape[0])               # (R,)
        if self.san is not None:   # the whole index tensor is read
            self.san.tile_access(self, op, (0,), rows.shape, rows.shape, write=False)
        cols = [int(i) * s for i, s in zip(index[1:], shape[1:])]
        for r in np.flatnonzero(keep):
            origin = (int(rows[start + r]), *cols)
            w = self.window(origin, (1, *shape[1:]), z.shape)
            if w is None:
                continue
            z[w[0]] = tile[r:r + 1][w[1]]
            if self.san is not None:
                self.san.tile_access(self, op, origin, (1, *shape[1:]), z.shape, write=True)

    # --- unsafe pointers ------------------------------------------------------------------------
    def _flat(self, op, arr, offsets, mask, write):
        offs = np.asarray(offsets).astype(np.int64)
        m = np.ones(offs.shape, bool) if mask is None else np.asarray(mask, bool)
        inb = (offs >= 0) & (offs < arr.size)
        if self.san is not None:
            self.san.pointer_access(self, op, arr, offs, m, write)
        return offs, m & inb

    def op_load_ptr(self, op, args, env):
        p, offs = args[0], args[1]
        mask = args[2] if op.attrs["masked"] else None
        offs, ok = self._flat(op, p, offs, mask, False)
        d = op.result.dtype
        out = nx.cast(np.full(offs.shape, op.attrs["other"], np.float64 if d.is_float else np.int64),
                      dt.f64 if d.is_float else dt.i64, d)
        out[ok] = p.reshape(-1)[offs[ok]]
        return out

    def op_store_ptr(self, op, args, env):
        p, offs, vals = args[0], args[1], args[2]
        mask = args[3] if op.attrs["masked"] else None
        offs, ok = self._flat(op, p, offs, mask, True)
        flat = p.reshape(-1)
        flat[offs[ok]] = np.broadcast_to(vals, offs.shape)[ok]

    def op_atomic(self, op, args, env):
        p, offs, vals = args[0], args[1], args[2]
        mask = args[3] if op.attrs["masked"] else None
        offs, ok = self._flat(op, p, offs, mask, "atomic")
        vals = np.broadcast_to(vals, offs.shape)      # a scalar value stays unbroadcast in the IR
        flat = p.reshape(-1)
        d = op.result.dtype
        old = np.zeros(offs.shape, d.np)
        for k in zip(*np.nonzero(ok)):
            o = offs[k]
            old[k] = flat[o]
            fn = {"add": lambda a, b: a + b, "max": max, "min": min}[op.attrs["op"]]
            flat[o] = nx.down(fn(nx.up(flat[o], d), nx.up(vals[k], d)), d)
        return old

    def op_atomic_cas(self, op, args, env):
        p, offs, cmp, vals = args
        offs, ok = self._flat(op, p, offs, None, "atomic")
        cmp, vals = np.broadcast_to(cmp, offs.shape), np.broadcast_to(vals, offs.shape)
        flat = p.reshape(-1)
        old = np.zeros(offs.shape, op.result.dtype.np)
        for k in zip(*np.nonzero(ok)):
            o = offs[k]
            old[k] = flat[o]
            if flat[o] == cmp[k]:
                flat[o] = vals[k]
        return old


_MULTI = ("for", "while", "if", "tiles", "subtiles")


def scatter_keep(rows: np.ndarray, start: int, count: int, extent: int) -> np.ndarray:
    """(count,) bool: source rows start.. that a scatter writes — inside `rows`, in [0, extent),
    and not equal to any other entry of `rows`."""
    src = np.arange(start, start + count)
    inside = src < rows.size
    pos = np.where(inside, rows[np.minimum(src, max(rows.size - 1, 0))] if rows.size else -1, -1)
    values, counts = np.unique(rows, return_counts=True)
    shared = np.isin(pos, values[counts > 1])
    return inside & (pos >= 0) & (pos < extent) & ~shared


def run(fn: Function, tensors: dict, scalars: dict, grid, sanitizer=None) -> None:
    Interpreter(fn, tensors, scalars, grid, sanitizer).run()

