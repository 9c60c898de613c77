"""Triton emitters for the value ops: constants, geometry, arithmetic, casts, reductions,
`mma` and shape ops. Each reproduces `backends/reference/numerics.py` exactly:

  * half types compute transcendental math, fma, sums and cumsums in f32 and round once;
  * integer `//` and `%` floor like Python (Triton truncates like C, so a `where` fixes the
    quotient up), and a zero divisor gives 0 (`%`: the dividend), as in the interpreter;
  * `astype` saturates: fp8 clamps to its finite range (NaN kept) before converting, and
    float -> int truncates, clamps and sends NaN to 0;
  * erf, tanh and sigmoid use the closed forms of numerics.py, not Triton's library calls.
"""
from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from ...dtypes import DType
from ...lang.ir import Op, Value
from .emitter import Emitter, fold_value, is_negative_zero, literal, ttype

NARROW = ("f16", "bf16", "f8e4m3fn", "f8e5m2")


def _all_weak(em: Emitter, op: Op) -> bool:
    return all(em.is_weak(a) for a in op.args) and op.result.shape == ()


# --- constants and geometry -------------------------------------------------------------------
def emit_const(em: Emitter, op: Op) -> None:
    v = fold_value(op.attrs["value"], op.result.dtype)
    em.alias(op.result, literal(v, op.result.dtype), weak=not is_negative_zero(v))


def emit_block_id(em: Emitter, op: Op) -> None:
    em.alias(op.result, em.pid(op.attrs["axis"]))


def emit_num_blocks(em: Emitter, op: Op) -> None:
    em.alias(op.result, em.num_blocks(op.attrs["axis"]))


def emit_extent(em: Emitter, op: Op) -> None:
    em.alias(op.result, em.tensor(op.args[0]).extents[op.attrs["axis"]], weak=True)


def emit_num_tiles(em: Emitter, op: Op) -> None:
    n, t = em.tensor(op.args[0]).extents[op.attrs["axis"]], op.attrs["tile"]
    em.bind(op.result, f"({n} + {t - 1}) // {t}", f"{em.tensor_name(op.args[0])}_tiles{op.attrs['axis']}",
            weak=True)


def emit_full(em: Emitter, op: Op) -> None:
    d, shape = op.attrs["dtype"], tuple(op.attrs["shape"])
    v = fold_value(op.attrs["value"], d)
    value = literal(v, d)
    if shape == ():
        em.alias(op.result, value, weak=not is_negative_zero(v))
    elif value in ("0", "0.0", "False"):
        em.bind(op.result, f"tl.zeros({shape}, {ttype(d)})", "zeros")
    else:
        em.bind(op.result, f"tl.full({shape}, {value}, {ttype(d)})", "full")


def emit_arange(em: Emitter, op: Op) -> None:
    em.bind(op.result, f"tl.arange({op.attrs['start']}, {op.attrs['stop']})", "iota")


# --- elementwise ------------------------------------------------------------------------------
def emit_binary(em: Emitter, op: Op) -> None:
    kind, d = op.attrs["op"], op.result.dtype
    a, b = op.args
    if kind in ("//", "%"):
        return _floor_divmod(em, op, kind)
    if kind in ("max", "min"):
        fn = "tl.maximum" if kind == "max" else "tl.minimum"
        em.bind(op.result, f"{fn}({em.strong(a)}, {em.strong(b)})")
        return
    if kind == "pow":
        raise NotImplementedError("pow is lowered to multiplications by the frontend")
    x, y = em.ref(a), em.ref(b)
    if kind == "/" and d.name in NARROW:
        em.bind(op.result, f"({_f32(em, a)} / {_f32(em, b)}).to({ttype(d)})")
        return
    em.bind(op.result, f"{x} {kind} {y}", weak=_all_weak(em, op))


def _floor_divmod(em: Emitter, op: Op, kind: str) -> None:
    """Python's floor `//` and `%` on Triton's truncating division; x // 0 == 0, x % 0 == x."""
    a, b = op.args
    x, y = em.ref(a), em.ref(b)
    const_divisor = em.is_weak(b) and _is_int_literal(y)
    if const_divisor and int(y.strip("()")) == 0:
        em.bind(op.result, "0" if kind == "//" else x, weak=em.is_weak(a))
        return
    if not const_divisor:
        d = em.fresh("den")
        em.line(f"{d} = tl.where({y} == 0, 1, {y})")
        y = d
    q, r = em.fresh("quo"), em.fresh("rem")
    em.line(f"{q} = {x} // {y}")
    em.line(f"{r} = {x} % {y}")
    if op.result.dtype.kind != "uint":
        fix = em.fresh("fix")
        em.line(f"{fix} = ({r} != 0) & (({r} < 0) != ({y} < 0))")
        if kind == "//":
            em.line(f"{q} = tl.where({fix}, {q} - 1, {q})")
        else:
            em.line(f"{r} = tl.where({fix}, {r} + {y}, {r})")
    out = q if kind == "//" else r
    if not const_divisor:
        zero = "0" if kind == "//" else x
        em.bind(op.result, f"tl.where({em.ref(b)} == 0, {zero}, {out})", "quo" if kind == "//" else "rem")
    else:
        em.alias(op.result, out)


def _is_int_literal(text: str) -> bool:
    t = text.strip("()")
    return t.lstrip("-").isdigit()


def emit_compare(em: Emitter, op: Op) -> None:
    a, b = op.args
    em.bind(op.result, f"{em.ref(a)} {op.attrs['op']} {em.ref(b)}", "cond", weak=_all_weak(em, op))


def _f32(em: Emitter, v: Value) -> str:
    """`v` computed in f32 when it is a half type (numerics.up)."""
    if v.dtype.name in NARROW:
        return f"tl.cast({em.ref(v)}, tl.float32)" if em.is_weak(v) else f"{em.ref(v)}.to(tl.float32)"
    return em.strong(v)


def _down(expr: str, d: DType) -> str:
    return f"({expr}).to({ttype(d)})" if d.name in NARROW else expr


_MATH = {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "log2": "tl.log2", "sqrt": "tl.sqrt",
         "rsqrt": "tl.rsqrt", "sin": "tl.sin", "cos": "tl.cos", "floor": "tl.floor", "ceil": "tl.ceil"}


def emit_unary(em: Emitter, op: Op) -> None:
    kind, d, a = op.attrs["op"], op.result.dtype, op.args[0]
    if kind == "neg" and d.is_float:
        # Triton's -x is 0 - x: +0.0 for x = +0.0. A weak x stays weak: a float argument (an fp32
        # scalar at run time, compiled or interpreted) then flips its sign; a literal is folded.
        em.bind(op.result, f"{em.ref(a)} * -1.0", weak=_all_weak(em, op))
    elif kind == "neg":
        em.bind(op.result, f"-{em.ref(a)}", weak=_all_weak(em, op))
    elif kind == "not":
        em.bind(op.result, f"{em.ref(a)} == 0", "cond", weak=_all_weak(em, op))
    elif kind == "invert":
        em.bind(op.result, f"~{em.strong(a)}")
    elif kind == "abs":
        em.bind(op.result, f"tl.abs({em.strong(a)})")
    elif kind in _MATH:
        em.bind(op.result, _down(f"{_MATH[kind]}({_f32(em, a)})", d))
    elif kind == "sigmoid":
        em.bind(op.result, _down(f"1.0 / (1.0 + tl.exp(-{_f32(em, a)}))", d), "sig")
    elif kind in ("tanh", "erf"):
        _closed_form(em, op, kind)
    else:
        raise NotImplementedError(kind)


def _closed_form(em: Emitter, op: Op, kind: str) -> None:
    """tanh and erf exactly as numerics.tanh / numerics.erf (sign(x) * f(|x|))."""
    x = em.fresh("x")
    em.line(f"{x} = {_f32(em, op.args[0])}")
    sign = f"tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, 0.0))"
    if kind == "tanh":
        e = em.fresh("e")
        em.line(f"{e} = tl.exp(-2.0 * tl.abs({x}))")
        body = f"{sign} * (1.0 - {e}) / (1.0 + {e})"
    else:
        ax, t = em.fresh("ax"), em.fresh("t")
        em.line(f"{ax} = tl.abs({x})")
        em.line(f"{t} = 1.0 / (1.0 + 0.3275911 * {ax})")
        poly = (f"{t} * (0.254829592 + {t} * (-0.284496736 + {t} * (1.421413741 + {t} * (-1.453152027 + "
                f"{t} * 1.061405429))))")
        body = f"{sign} * (1.0 - {poly} * tl.exp(-{ax} * {ax}))"
    em.bind(op.result, _down(body, op.result.dtype), kind)


def emit_where(em: Emitter, op: Op) -> None:
    c, a, b = op.args
    both_weak = em.is_weak(a) and em.is_weak(b)
    x, y = (em.strong(a), em.strong(b)) if both_weak else (em.ref(a), em.ref(b))
    em.bind(op.result, f"tl.where({em.ref(c)}, {x}, {y})", "sel")


def emit_fma(em: Emitter, op: Op) -> None:
    a, b, c = op.args
    em.bind(op.result, _down(f"tl.fma({_f32(em, a)}, {_f32(em, b)}, {_f32(em, c)})", op.result.dtype), "fma")


# --- casts ------------------------------------------------------------------------------------
def emit_cast(em: Emitter, op: Op) -> None:
    src, dst, a = op.args[0].dtype, op.attrs["dtype"], op.args[0]
    if src == dst:
        em.alias(op.result, em.ref(a), em.is_weak(a))
    elif dst.is_bool:
        em.bind(op.result, f"{em.ref(a)} != 0", "cond", weak=em.is_weak(a))
    elif dst.is_float and dst.name.startswith("f8"):
        x = em.fresh("x")
        em.line(f"{x} = {_to(em, a, dt.f32 if src.bits <= 32 else dt.f64)}")
        lo, hi = dt.finite_range(dst)
        em.bind(op.result, f"tl.where({x} != {x}, {x}, tl.minimum(tl.maximum({x}, {lo!r}), {hi!r}))"
                           f".to({ttype(dst)}, fp_downcast_rounding=\"rtne\")", "cvt")
    elif src.is_float and dst.is_int:
        _float_to_int(em, op, src, dst)
    else:
        em.bind(op.result, _to(em, a, dst), "cvt")


def _to(em: Emitter, v: Value, d: DType) -> str:
    # tl.cast, not `.to`: under Triton's interpreter a scalar (a loop variable) may be a
    # Python int, which has no `.to`; compiled, `x.to(d)` is an alias of `tl.cast(x, d)`.
    if v.dtype == d:
        return em.strong(v)
    return f"tl.cast({em.ref(v)}, {ttype(d)})"


def _float_to_int(em: Emitter, op: Op, src: DType, dst: DType) -> None:
    """Truncate toward zero, saturate to dst's range, NaN -> 0 (numerics.cast)."""
    wide = src.bits > 32
    fdt = np.float64 if wide else np.float32
    info = np.iinfo(dst.np)   # exact bounds (finite_range's floats round 2**63 - 1 up)
    lo, hi = int(info.min), int(info.max)
    hi_f = fdt(hi)
    if int(hi_f) > hi:                       # the largest float <= hi
        hi_f = np.nextafter(hi_f, fdt(0))
    x = em.fresh("x")
    em.line(f"{x} = {_to(em, op.args[0], dt.f64 if wide else dt.f32)}")
    em.line(f"{x} = tl.where({x} != {x}, 0.0, {x})")
    body = f"tl.minimum(tl.maximum({x}, {float(lo)!r}), {float(hi_f)!r}).to({ttype(dst)})"
    if int(hi_f) < hi:
        body = f"tl.where({x} > {float(hi_f)!r}, {hi}, {body})"
    em.bind(op.result, body, "cvt")


# --- reductions and scans ---------------------------------------------------------------------
def emit_reduce(em: Emitter, op: Op) -> None:
    kind, axis, keep = op.attrs["op"], op.attrs["axis"], op.attrs["keepdims"]
    a, d = op.args[0], op.result.dtype
    kw = f"axis={axis}, keep_dims={keep}"
    if kind == "sum":
        em.bind(op.result, _down(f"tl.sum({_f32(em, a)}, {kw})", d), "total")
    elif kind in ("max", "min"):
        if a.dtype.is_bool:
            em.bind(op.result, f"tl.{kind}({em.ref(a)}.to(tl.int32), {kw}) != 0", kind + "_")
        else:
            em.bind(op.result, f"tl.{kind}({em.ref(a)}, {kw})", kind + "_")
    else:   # argmax / argmin: first index of the extremum, like NumPy
        em.bind(op.result, f"tl.{kind}({em.ref(a)}, {kw}, tie_break_left=True)", "index")


def emit_cumsum(em: Emitter, op: Op) -> None:
    a = op.args[0]
    em.bind(op.result, _down(f"tl.cumsum({_f32(em, a)}, axis={op.attrs['axis']})", op.result.dtype), "csum")


def emit_mma(em: Emitter, op: Op) -> None:
    a, b, acc = op.args
    ab, out = a.dtype, acc.dtype
    if ab == dt.f32:
        extra = f', input_precision="{op.attrs["precision"]}"'
    elif out in (dt.f16, dt.i32):
        extra = f", out_dtype={ttype(out)}"
    else:
        extra = ""
    em.bind(op.result, f"tl.dot({em.ref(a)}, {em.ref(b)}, {em.ref(acc)}{extra})", "acc")


# --- shapes -----------------------------------------------------------------------------------
def emit_reshape(em: Emitter, op: Op) -> None:
    a, shape = op.args[0], tuple(op.attrs["shape"])
    src = a.shape
    if src == shape:
        em.alias(op.result, em.ref(a), em.is_weak(a))
    elif src == ():
        em.bind(op.result, f"tl.full({shape}, {em.strong(a)}, {ttype(a.dtype)})", "t")
    elif _inserts_unit_axes(src, shape) and (len(src) < 2 or id(op.result) not in em.stored):
        # Unit axes by subscript: the slice layout broadcasts against the bigger tile as it
        # is. A tile of rank >= 2 reshaped only to be stored takes tl.reshape, which keeps its
        # layout (an MMA result goes to its TMA store from registers); the subscript
        # converted it through shared memory first (bmm on the H200: 3% slower than its twin).
        items = []
        it = iter(src)
        pending = next(it, None)
        for n in shape:
            if pending is not None and n == pending:
                items.append(":")
                pending = next(it, None)
            else:
                items.append("None")
        em.bind(op.result, f"{em.ref(a)}[{', '.join(items)}]", "t")
    else:
        em.bind(op.result, f"tl.reshape({em.ref(a)}, {shape})", "t")


def _inserts_unit_axes(src: tuple, dst: tuple) -> bool:
    """dst is src with size-1 axes inserted (a subscript with None does it without a reshape)."""
    it = iter(src)
    pending = next(it, None)
    for n in dst:
        if pending is not None and n == pending:
            pending = next(it, None)
        elif n != 1:
            return False
    return pending is None


def emit_permute(em: Emitter, op: Op) -> None:
    em.bind(op.result, f"tl.permute({em.ref(op.args[0])}, {tuple(op.attrs['dims'])})", "t")


def emit_broadcast_to(em: Emitter, op: Op) -> None:
    a, shape = op.args[0], tuple(op.attrs["shape"])
    if a.shape == ():
        em.bind(op.result, f"tl.full({shape}, {em.strong(a)}, {ttype(a.dtype)})", "t")
    else:
        em.bind(op.result, f"tl.broadcast_to({em.ref(a)}, {shape})", "t")


def emit_expand_dims(em: Emitter, op: Op) -> None:
    em.bind(op.result, f"tl.expand_dims({em.ref(op.args[0])}, {op.attrs['axis']})", "t")


def emit_join(em: Emitter, op: Op) -> None:
    em.bind(op.result, f"tl.join({em.ref(op.args[0])}, {em.ref(op.args[1])})", "pair")


def emit_rand(em: Emitter, op: Op) -> None:
    """tl.rand is Philox 4x32-10 with the key and counters of reference/philox.py: the same bits."""
    seed, offsets = op.args
    em.bind(op.result, f"tl.rand({em.strong(seed)}, {em.strong(offsets)})", "rnd")


def emit_print(em: Emitter, op: Op) -> None:
    values = ", ".join(em.strong(v) for v in op.args)
    fmt = op.attrs["fmt"] or "value"
    em.line(f"tl.device_print({fmt!r}{', ' + values if values else ''})")


EMITTERS = {
    "const": emit_const, "block_id": emit_block_id, "num_blocks": emit_num_blocks, "extent": emit_extent,
    "num_tiles": emit_num_tiles, "binary": emit_binary, "compare": emit_compare, "unary": emit_unary,
    "where": emit_where, "fma": emit_fma, "cast": emit_cast, "full": emit_full, "arange": emit_arange,
    "reduce": emit_reduce, "cumsum": emit_cumsum, "mma": emit_mma, "reshape": emit_reshape,
    "permute": emit_permute, "broadcast_to": emit_broadcast_to, "expand_dims": emit_expand_dims,
    "join": emit_join, "rand": emit_rand, "print": emit_print,
}
