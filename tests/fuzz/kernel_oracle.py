"""An independent NumPy evaluation of a kernel_gen `Program`, block by block.

Written from DESIGN §2 and the language docs, not from the interpreter:
- runtime int scalars are i32 when their value fits, else i64; `ts.block_id`, `ts.num_tiles`
  and static loop variables are i32; Python int literals are weak (they take the other
  operand's dtype); a dynamic loop's variable has its bound's dtype. Integer arithmetic
  wraps to its dtype; `//` and `%` floor (Python semantics).
- `ts.load(x, index, shape=T)` reads x[index*T : (index+1)*T] per axis with the index's
  wrapped value multiplied exactly; every element outside x reads the padding.
- a store writes this block's tile and drops the elements past the output's edge; `z.load()`
  reads the block's own tile as stored so far (S15), 0 past the edge.
The f32 accumulation is done in the program's order in float32, as the kernel does it.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from kernel_gen import MAX_DYNAMIC_TRIPS, Program

WEAK = None   # dtype of a Python int literal


def wrap(value: int, bits) -> int:
    """`value` as a two's complement integer of `bits` bits (no change for a weak literal)."""
    if bits is WEAK:
        return value
    m = 1 << bits
    value &= m - 1
    return value - m if value >= m >> 1 else value


def scalar_bits(value: int) -> int:
    return 32 if -2**31 <= value < 2**31 else 64


@dataclass
class Result:
    out: np.ndarray        # the output view after every block ran (float32)
    stored: np.ndarray     # per output element: did any store write it


def run(p: Program, out: np.ndarray, inputs: list[np.ndarray], scalars: list[int]) -> Result:
    """Evaluate `p` on copies of the arrays; `out` holds the output view's values before the launch."""
    out = np.array(out, dtype=np.float32)
    stored = np.zeros(out.shape, bool)
    grid = [-(-n // t) for n, t in zip(out.shape, p.tile)]
    for bid in itertools.product(*(range(g) for g in grid)):
        block = _Block(p, bid, out, stored, inputs, scalars)
        block.exec(p.body, {})
    return Result(out, stored)


class _Block:
    def __init__(self, p, bid, out, stored, inputs, scalars):
        self.p, self.bid, self.out, self.stored = p, bid, out, stored
        self.inputs, self.scalars = inputs, scalars
        self.acc = np.zeros(p.tile, np.float32)

    # -- statements ---------------------------------------------------------------------------
    def exec(self, stmts, env):
        for s in stmts:
            kind = s[0]
            if kind == "acc":
                term = self.term(s[1], env)
                self.acc = self.acc + (term if s[2] == 1.0 else term * np.float32(s[2]))
            elif kind == "store":
                self.store(self.acc if s[1] == 1.0 else self.acc * np.float32(s[1]))
            elif kind == "loop":
                self.loop(s[1], s[2], env)
            elif kind == "if":
                (cmp, a, b), then, other = s[1], s[2], s[3]
                self.exec(then if self.compare(cmp, a, b, env) else other, env)
            else:
                raise ValueError(kind)

    def loop(self, bound, body, env):
        if bound[0] == "static":
            trips, bits = bound[1], 32
        else:
            hi, bits = self.int(("min", bound[1], ("c", MAX_DYNAMIC_TRIPS)), env)
            trips, bits = hi, (32 if bits is WEAK else bits)
        for k in range(max(trips, 0)):
            self.exec(body, {**env, "k": (k, bits)})

    def compare(self, cmp, a, b, env) -> bool:
        (x, bx), (y, by) = self.int(a, env), self.int(b, env)
        bits = _common(bx, by)
        x, y = wrap(x, bits), wrap(y, bits)
        return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y}[cmp]

    def store(self, tile: np.ndarray):
        window = _window([b * t for b, t in zip(self.bid, self.p.tile)], self.p.tile, self.out.shape)
        if window is not None:
            dst, src = window
            self.out[dst] = tile[src]
            self.stored[dst] = True

    # -- tiles ------------------------------------------------------------------------------
    def term(self, t, env) -> np.ndarray:
        kind = t[0]
        if kind == "own":
            return self.own_tile()
        if kind in ("load", "view"):
            _, i, index, padding = t
            origin = [self.int(e, env)[0] * s for e, s in zip(index, self.p.tile)]
        elif kind == "like":
            _, i, padding = t
            origin = [b * s for b, s in zip(self.bid, self.p.tile)]
        else:
            raise ValueError(kind)
        x = self.inputs[i]
        tile = np.full(self.p.tile, padding, np.float32)
        window = _window(origin, self.p.tile, x.shape)
        if window is not None:
            src, dst = window
            tile[dst] = x[src]
        return tile

    def own_tile(self) -> np.ndarray:
        tile = np.zeros(self.p.tile, np.float32)
        window = _window([b * t for b, t in zip(self.bid, self.p.tile)], self.p.tile, self.out.shape)
        if window is not None:
            src, dst = window
            tile[dst] = self.out[src]
        return tile

    # -- integers: (value, bits) with bits 32, 64 or WEAK ------------------------------------------
    def int(self, e, env):
        kind = e[0]
        if kind == "bid":
            return (self.bid[e[1]] if e[1] < len(self.bid) else 0), 32
        if kind == "s":
            v = self.scalars[e[1]]
            return v, scalar_bits(v)
        if kind == "c":
            return e[1], WEAK
        if kind == "k":
            return env["k"]
        if kind == "nt":
            return -(-self.inputs[e[1]].shape[e[2]] // self.p.tile[e[2]]), 32
        (x, bx), (y, by) = self.int(e[2] if kind == "op" else e[1], env), self.int(e[3] if kind == "op" else e[2], env)
        bits = _common(bx, by)
        x, y = wrap(x, bits), wrap(y, bits)
        op = e[1] if kind == "op" else kind
        r = {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "//": lambda: x // y,
             "%": lambda: x % y, "min": lambda: min(x, y), "max": lambda: max(x, y)}[op]()
        return wrap(r, bits), bits


def _common(a, b):
    """The dtype of a binary op: the wider strong operand; literal with literal stays a literal."""
    strong = [x for x in (a, b) if x is not WEAK]
    return max(strong) if strong else WEAK


def _window(origin, shape, extent):
    """(slices into the tensor, slices into the tile) of a tile's in-bounds part, or None."""
    outer, inner = [], []
    for o, s, n in zip(origin, shape, extent):
        lo, hi = max(o, 0), min(o + s, n)
        if hi <= lo:
            return None
        outer.append(slice(lo, hi))
        inner.append(slice(lo - o, hi - o))
    return tuple(outer), tuple(inner)
