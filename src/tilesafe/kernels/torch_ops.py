"""The library's tensor-only calls as PyTorch custom operators: `torch.ops.tilesafe.*`.

`import tilesafe.kernels` registers them (as `import torchvision` registers
`torch.ops.torchvision.nms`), so `torch.compile(fullgraph=True)` traces a model that calls
them without a graph break: each op has a fake (meta) function that gives the result's
shape and dtype without running anything. Every op has a functional form that allocates its
result and an `_out` form that takes its output tensors first (a custom op's schema allows no
keyword-only tensor, nor a required argument after a defaulted one) and returns nothing; the
`_out` forms declare what they mutate, so torch.compile functionalizes them, and the version
counters of the tensors written move as after torch's own in-place ops.

    y = torch.ops.tilesafe.rms_norm(x, w, 1e-6)
    torch.ops.tilesafe.silu_mul_out(buf, gate, up)

The forms that take `config=` or `workspace=` objects stay Python-only (`tilesafe.kernels.*`).
Ordering is torch's: an op runs the library call on the calling thread, so inside a CUDA graph
that torch captures the launches follow torch's current stream like any other op.
"""
from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from typing import Callable

import torch

from . import elementwise, norms, reduce
from .attention import decode_attention, flash_attention
from .linear_fusions import linear
from .matmul import bmm, matmul
from .rope import argmax, embedding, rope
from ..errors import Loc, TileSafeError

NAMESPACE = "tilesafe"
TORCH_DIR = os.path.dirname(torch.__file__)


@dataclass(frozen=True, slots=True)
class Op:
    """One library call as a pair of torch ops: `name` (allocating) and `name_out`."""
    name: str
    params: str                     # the inputs' schema, e.g. "Tensor x, Tensor w, float eps=1e-06"
    call: Callable                  # (*inputs, **outs) -> the library call's result
    result: Callable                # fake: (*inputs) -> an empty tensor of the result's shape and dtype
    outs: tuple[str, ...] = ("out",)
    mutated_inputs: tuple[int, ...] = ()   # positions of inputs the call also writes (an in-place form)


def _like(x, shape, dtype=None):
    """A contiguous result, as the library allocates it (never x's strides)."""
    return x.new_empty(tuple(shape), dtype=dtype or x.dtype)


def _binary(fn):
    return Op(fn.__name__, "Tensor x, Tensor y", fn,
              lambda x, y: _like(x, torch.broadcast_shapes(x.shape, y.shape)))


def _unary(fn):
    return Op(fn.__name__, "Tensor x", fn, lambda x: _like(x, x.shape))


def _reduced(x, dim=-1, dtype=None):
    d = dim % x.ndim
    return _like(x, x.shape[:d] + x.shape[d + 1:], dtype)


def _reduction(fn):
    return Op(fn.__name__, "Tensor x, int dim=-1", lambda x, dim=-1, **o: fn(x, dim=dim, **o), _reduced)


def _softmax(fn):
    return Op(fn.__name__, "Tensor x, int dim=-1", lambda x, dim=-1, **o: fn(x, dim=dim, **o),
              lambda x, *_: _like(x, x.shape))


def _matmul_result(a, b, out_dtype=None, bias=None, activation=None, precision=None):
    return _like(a, (*a.shape[:-1], b.shape[-1]), out_dtype)


OPS = (
    *(_binary(f) for f in (elementwise.add, elementwise.sub, elementwise.mul, elementwise.div)),
    Op("residual_add", "Tensor x, Tensor r", elementwise.residual_add,
       lambda x, r: _like(x, torch.broadcast_shapes(x.shape, r.shape))),
    Op("silu_mul", "Tensor gate, Tensor up", elementwise.silu_mul,
       lambda gate, up: _like(gate, torch.broadcast_shapes(gate.shape, up.shape))),
    *(_unary(f) for f in (elementwise.neg, elementwise.exp, elementwise.silu, elementwise.gelu, elementwise.relu)),
    *(_reduction(f) for f in (reduce.sum, reduce.max, reduce.mean)),
    *(_softmax(f) for f in (reduce.softmax, reduce.log_softmax)),
    Op("rms_norm", "Tensor x, Tensor w, float eps=1e-06", norms.rms_norm, lambda x, w, *_: _like(x, x.shape)),
    # y = rms_norm(h) with h = x + residual: returns (y, h)
    Op("add_rms_norm", "Tensor x, Tensor residual, Tensor w, float eps=1e-06",
       lambda x, r, w, eps=1e-6, out=None, residual_out=None: norms.rms_norm(x, w, eps, r, out, residual_out),
       lambda x, r, w, *_: (_like(x, x.shape), _like(x, x.shape)), ("out", "residual_out")),
    Op("layer_norm", "Tensor x, Tensor w, Tensor? b=None, float eps=1e-05", norms.layer_norm,
       lambda x, w, *_: _like(x, x.shape)),
    Op("matmul", "Tensor a, Tensor b, ScalarType? out_dtype=None, Tensor? bias=None, str? activation=None, "
       "str? precision=None", matmul, _matmul_result),
    Op("linear", "Tensor x, Tensor w, Tensor? bias=None, str? activation=None, str? precision=None", linear,
       lambda x, w, *_: _like(x, (*x.shape[:-1], w.shape[0]))),
    Op("bmm", "Tensor a, Tensor b, ScalarType? out_dtype=None, str? precision=None", bmm,
       lambda a, b, out_dtype=None, precision=None: _like(a, (a.shape[0], a.shape[1], b.shape[-1]), out_dtype)),
    Op("flash_attention", "Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None",
       flash_attention, lambda q, *_: _like(q, q.shape)),
    # seq_len is a one-element integer tensor: a Python int would be baked into a compiled graph
    Op("decode_attention", "Tensor q, Tensor k_cache, Tensor v_cache, Tensor seq_len, float? scale=None",
       decode_attention, lambda q, *_: _like(q, q.shape)),
    Op("rope", "Tensor x, Tensor positions, float theta=1000000.0", rope,
       lambda x, *_: _like(x, x.shape)),
    Op("embedding", "Tensor ids, Tensor table", embedding,
       lambda ids, table: _like(table, (*ids.shape, table.shape[1]))),
    Op("argmax", "Tensor x, int dim=-1", lambda x, dim=-1, **o: argmax(x, dim=dim, **o),
       lambda x, dim=-1: _reduced(x, dim, torch.int32)),
)

# the fused add + norm that updates the residual stream in place (residual_out=residual)
ADD_RMS_NORM_INPLACE = Op(
    "add_rms_norm_inplace", "Tensor x, Tensor(a!) residual, Tensor w, float eps=1e-06",
    lambda x, r, w, eps=1e-6, out=None: norms.rms_norm(x, w, eps, r, out, r), None, ("out",), (1,))


@functools.cache
def register_torch_ops() -> torch.library.Library:
    """Register `torch.ops.tilesafe.*` (done by `import tilesafe.kernels`; idempotent). The
    registrations live as long as the returned library object, which this cache keeps."""
    lib = torch.library.Library(NAMESPACE, "DEF")
    for op in OPS:
        _define(lib, op.name, f"({op.params}) -> {_returns(op)}", op.call, op.result)
    for op in (*OPS, ADD_RMS_NORM_INPLACE):
        # outputs first: a schema has no keyword-only tensors in a custom op, and no argument
        # without a default may follow one with a default
        outs = ", ".join(f"Tensor({chr(98 + i)}!) {name}" for i, name in enumerate(op.outs))
        name = op.name if op is ADD_RMS_NORM_INPLACE else f"{op.name}_out"
        _define(lib, name, f"({outs}, {op.params}) -> ()", functools.partial(_into, op), _nothing)
    return lib


def _into(op: Op, *args, **kwargs) -> None:
    """An `_out` form: `args` are the outputs, then the inputs. What it wrote gets a new
    version, as torch's own in-place ops do (a saved tensor then fails autograd's check)."""
    outs = args[:len(op.outs)]
    op.call(*args[len(op.outs):], **kwargs, **dict(zip(op.outs, outs)))
    written = [t for t in (*outs, *(args[len(op.outs) + i] for i in op.mutated_inputs)) if not t.is_inference()]
    torch.autograd.graph.increment_version(written)


def _returns(op: Op) -> str:
    return "Tensor" if len(op.outs) == 1 else f"({', '.join('Tensor' for _ in op.outs)})"


def _nothing(*args, **kwargs) -> None:
    return None


def _define(lib, name: str, schema: str, call: Callable, fake: Callable) -> None:
    """One op through the plain `torch.library` calls: about a tenth of what
    `torch.library.custom_op` costs to register (import time)."""
    def run(*args, **kwargs):
        try:
            return call(*args, **kwargs)
        except TileSafeError as e:      # located at our caller's frame: point at the user's line instead
            raise type(e)(e.message, loc=_user_loc(), help=e.help) from None

    lib.define(name + schema)
    lib.impl(name, run, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=lib)


def _user_loc() -> Loc | None:
    """The first frame outside tilesafe and torch: the user's call of the op (of the compiled
    function, when the op ran inside a graph torch.compile generated)."""
    frame = sys._getframe(2)
    while frame is not None:
        name, file = frame.f_globals.get("__name__") or "", frame.f_code.co_filename
        generated = file.startswith("<") or file.startswith(TORCH_DIR)   # code torch.compile wrote
        if name.split(".")[0] not in ("tilesafe", "torch") and not generated:
            return Loc(frame.f_code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return None
