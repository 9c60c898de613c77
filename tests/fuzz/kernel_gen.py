"""Random small kernels for the differential safety fuzzer: a tiny grammar, its source text.

A `Program` is a tree of plain tuples (so hypothesis can shrink it and a failure prints as a
readable value); `render` turns it into kernel source and `define` writes that source to a
real file and imports it, because a kernel needs a source file for its error locations.
The NumPy oracle that evaluates the same tree lives in kernel_oracle.py.

Grammar (every kernel has one f32 output `z` with tile TILE and one accumulator `acc`):
    int  := ("bid", axis) | ("s", i) | ("c", value) | ("k",) | ("nt", input, axis)
          | ("op", "+" | "-" | "*", int, int) | ("op", "//" | "%", int, ("c", positive))
          | ("min", int, int) | ("max", int, int)
    term := ("load", input, (int, ...), padding) | ("view", input, (int, ...), padding)
          | ("like", input, padding) | ("own",)                  # z.load(): S14, S15
    stmt := ("acc", term, coef) | ("store", coef)
          | ("loop", ("static", n) | ("dyn", int), (stmt, ...))          # loop variable `k`
          | ("if", (cmp, int, int), (stmt, ...), (stmt, ...))
"""
from __future__ import annotations

import functools
import importlib.util
import itertools
import tempfile
from dataclasses import dataclass
from pathlib import Path

COMPARES = ("<", "<=", ">", ">=", "==", "!=")
MAX_DYNAMIC_TRIPS = 3          # a dynamic loop runs range(min(expr, 3)) times


@dataclass(frozen=True)
class Program:
    tile: tuple[int, ...]                   # the output's tile; its rank is every tensor's rank
    n_inputs: int                           # Ref inputs x0, x1, ... (1 or 2)
    n_scalars: int                          # runtime int scalars s0, s1, ... (1 or 2)
    body: tuple                             # stmt, ...

    @property
    def rank(self) -> int:
        return len(self.tile)


_counter = itertools.count()


def render(p: Program, name: str = "fuzzed") -> str:
    """The kernel's source text (a module defining `name`)."""
    r = p.rank
    tile = _tuple(p.tile)
    params = [f"z: ts.Mut[ts.f32, {tile}]"]
    for i in range(p.n_inputs):
        dims = ", ".join(f'"X{i}_{a}"' for a in range(r))
        params.append(f"x{i}: ts.Ref[ts.f32, ({dims},)]")
    params += [f"X{i}_{a}: int" for i in range(p.n_inputs) for a in range(r)]
    params += [f"s{i}: int" for i in range(p.n_scalars)]
    lines = ["import tilesafe as ts", "", "", "@ts.kernel(sanitize=True)",
             f"def {name}({', '.join(params)}):"]
    lines += [f"    p{i} = x{i}.partition({tile})" for i in range(p.n_inputs)]
    lines.append(f"    acc = ts.zeros({tile}, ts.f32)")
    for stmt in p.body:
        lines += _stmt(stmt, 1, tile)
    return "\n".join(lines) + "\n"


@functools.cache
def _kernel_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="tilesafe-fuzz-"))


def define(p: Program, folder: Path | None = None):
    """Write the kernel to a fresh file (under `folder`, by default a temporary folder of this
    process), import it and return the kernel. Raises the KernelError of a refused definition."""
    n = next(_counter)
    path = Path(folder or _kernel_folder()) / f"fuzzed_kernel_{n}.py"
    path.write_text(render(p))
    spec = importlib.util.spec_from_file_location(f"fuzzed_kernel_{n}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fuzzed


def _stmt(s, depth: int, tile: str) -> list[str]:
    pad = "    " * depth
    kind = s[0]
    if kind == "acc":
        _, term, coef = s
        return [f"{pad}acc = acc + {_term(term, tile)}{_scaled(coef)}"]
    if kind == "store":
        return [f"{pad}z.store(acc{_scaled(s[1])})"]
    if kind == "loop":
        _, bound, body = s
        trips = str(bound[1]) if bound[0] == "static" else f"min({int_expr(bound[1])}, {MAX_DYNAMIC_TRIPS})"
        return [f"{pad}for k in range({trips}):"] + _block(body, depth + 1, tile)
    if kind == "if":
        _, (cmp, a, b), then, other = s
        out = [f"{pad}if {int_expr(a)} {cmp} {int_expr(b)}:"] + _block(then, depth + 1, tile)
        if other:
            out += [f"{pad}else:"] + _block(other, depth + 1, tile)
        return out
    raise ValueError(kind)


def _block(stmts, depth: int, tile: str) -> list[str]:
    lines = [line for s in stmts for line in _stmt(s, depth, tile)]
    return lines or ["    " * depth + "pass"]


def _term(t, tile: str) -> str:
    kind = t[0]
    if kind == "load":
        _, i, index, padding = t
        return f"ts.load(x{i}, {_index(index)}, shape={tile}{_padding(padding)})"
    if kind == "view":
        _, i, index, padding = t
        return f"p{i}.load({_index(index)}{_padding(padding)})"
    if kind == "like":
        _, i, padding = t
        return f"ts.load_tile_like(x{i}, z{_padding(padding)})"
    if kind == "own":
        return "z.load()"
    raise ValueError(kind)


def int_expr(e) -> str:
    kind = e[0]
    if kind == "bid":
        return f"ts.block_id({e[1]})"
    if kind == "s":
        return f"s{e[1]}"
    if kind == "c":
        return str(e[1]) if e[1] >= 0 else f"({e[1]})"
    if kind == "k":
        return "k"
    if kind == "nt":
        return f"ts.num_tiles(p{e[1]}, {e[2]})"
    if kind == "op":
        return f"({int_expr(e[2])} {e[1]} {int_expr(e[3])})"
    if kind in ("min", "max"):
        return f"{kind}({int_expr(e[1])}, {int_expr(e[2])})"
    raise ValueError(kind)


def _index(index) -> str:
    return "(" + ", ".join(int_expr(e) for e in index) + (",)" if len(index) == 1 else ")")


def _padding(padding: float) -> str:
    return "" if padding == 0 else f", padding={padding!r}"


def _scaled(coef: float) -> str:
    return "" if coef == 1.0 else f" * {coef!r}"


def _tuple(values) -> str:
    return "(" + ", ".join(str(v) for v in values) + (",)" if len(values) == 1 else ")")
