"""Every example's kernels on Triton, in f32, f16 and bf16, against PyTorch (run with `pytest -m gpu`).

The kernels are imported from the example files (each guards its demo under
`if __name__ == "__main__"`), so what runs is exactly what the examples define. Every float
example is generic over its element dtype (`T: ts.Const[ts.DType]`, bound from the
arguments): it computes in fp32 where the math needs it (`ts.mma` accumulators, reductions,
exp, rsqrt, anything with a runtime float scalar) and rounds to T when it stores.
`mixed_precision_matmul` takes T inputs and writes f32, and `masked_fill` also takes a mask
of any dtype (`MD`). So each float kernel runs in f32, f16 and bf16 and is compared with
PyTorch in fp64 on the same rounded inputs, with tolerances from those semantics: the fp32
math's error plus one rounding to the output dtype (matmuls: 2 K eps32 (|A| @ |B|), for fp32
accumulation over K). A launch that mixes the dtypes one T binds is refused, with nothing
written. Outputs are NaN-poisoned views inside larger NaN buffers, so a store past a ragged
edge shows. DEVICE and BACKEND can be set to "cpu" and "reference" (or "triton-interpreter",
which cannot compute bf16) to check this file's logic without a GPU.
"""
import functools
import runpy
from pathlib import Path

import pytest
import torch

import tilesafe as ts

pytestmark = pytest.mark.gpu
DEVICE, BACKEND = "cuda", "triton"
EXAMPLES = Path(__file__).resolve().parents[2] / "src" / "tilesafe" / "examples"
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "bool": torch.bool,
         "u8": torch.uint8, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64}
FLOATS = ("f32", "f16", "bf16")
EPS = {d: torch.finfo(TORCH[d]).eps for d in FLOATS}                  # twice the unit roundoff
SUB = {d: torch.finfo(TORCH[d]).tiny * EPS[d] for d in FLOATS}        # the smallest subnormal
NAN = float("nan")


@functools.cache
def example(name: str) -> dict:
    return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name="example")


def randn(*shape, dt="f32", scale=1.0):
    """Random data rounded to `dt`, on DEVICE (the fp64 reference upcasts the rounded values)."""
    return (torch.randn(shape, dtype=torch.float64) * scale).to(TORCH[dt]).to(DEVICE)


def arg(t: torch.Tensor) -> ts.Tensor:
    return ts.from_torch(t)


class Out:
    """An output `view` of `shape` in a larger NaN (ints: -7) buffer (rows 16-element aligned)."""

    def __init__(self, shape, dt, fill=None):
        self.region = tuple(slice(0, n) for n in shape)
        padded = [n + 1 for n in shape[:-1]] + [-(-(shape[-1] + 1) // 16) * 16]
        poison = NAN if TORCH[dt].is_floating_point else -7
        self.buf = torch.full(padded, poison, dtype=TORCH[dt], device=DEVICE)
        self.view = self.buf[self.region]
        if fill is not None:
            self.view.copy_(fill)
        self.before = self.buf.clone()

    def part(self, tile) -> ts.Partition:
        return arg(self.view).partition(tile)

    def unchanged(self) -> torch.Tensor:
        return (self.buf == self.before) | (self.buf.isnan() & self.before.isnan())


def assert_near(got, want, rtol, atol, what=""):
    """|got - want| <= atol + rtol |want| elementwise (atol may be a tensor); NaN fails."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    atol = atol.double().cpu() if isinstance(atol, torch.Tensor) else atol
    err = (got - want).abs()
    bad = ~(err <= atol + rtol * want.abs())
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.numel()} elements off, first at "
                           f"{tuple(bad.nonzero()[0].tolist())}: got {got[bad][0]}, want {want[bad][0]}")


def stored(dt, rtol32=0.0, atol32=0.0):
    """(rtol, atol) of fp32 math with relative error `rtol32` (plus `atol32`), then one rounding
    to `dt`: eps(dt) is twice its unit roundoff, SUB(dt) covers a subnormal result."""
    return EPS[dt] + rtol32, atol32 + SUB[dt]


def mm_tol(a, b, dt):
    """fp32 accumulation over K: |err| <= 2 K eps32 (|a| @ |b|), plus the rounding to `dt`."""
    return stored(dt, 0.0, 2 * a.shape[-1] * EPS["f32"] * (a.double().abs() @ b.double().abs()))


# Each case builds its inputs in `dt` and returns (launch, [(out, fp64 reference, (rtol, atol))]).

def hello_world(n, dt):
    x, o = randn(n, dt=dt), Out((n,), dt)
    return lambda: example("hello_world")["double"](o.part((16,)), arg(x)).sync(), [(o, 2 * x.double(), (0, 0))]


def vector_add(n, dt):
    x, y, o = randn(n, dt=dt), randn(n, dt=dt), Out((n,), dt)
    return (lambda: example("vector_add")["add"](o.part((128,)), arg(x), arg(y)).sync(),
            [(o, x.double() + y.double(), (EPS[dt], 0))])          # one rounding, in T


def saxpy_2d(p, dt):
    (m, n), tile = p
    x, y0 = randn(m, n, dt=dt), randn(m, n, dt=dt)
    o = Out((m, n), dt, fill=y0)                     # in place: the output starts as y
    ax = 1.5 * x.double()
    return (lambda: example("saxpy_2d")["saxpy"](o.part(tile), arg(x), a=1.5).sync(),
            [(o, ax + y0.double(), stored(dt, EPS["f32"], EPS["f32"] * ax.abs()))])   # f32 a * x + y


def square_plus_one(n, dt):
    x, o = randn(n, dt=dt), Out((n,), dt)
    xx = x.double() ** 2
    return (lambda: example("ragged_sizes")["square_plus_one"](o.part((128,)), arg(x)).sync(),
            [(o, xx + 1, (EPS[dt], 2 * EPS[dt] * xx))])              # two roundings, in T


def add_2d(p, dt):
    shape, tile = p
    x, y, o = randn(*shape, dt=dt), randn(*shape, dt=dt), Out(shape, dt)
    return (lambda: example("ragged_sizes")["add_2d"](o.part(tile), arg(x), arg(y)).sync(),
            [(o, x.double() + y.double(), (EPS[dt], 0))])


def matmul(p, dt):
    (m, k, n), tile, bk = p
    a, b, o = randn(m, k, dt=dt), randn(k, n, dt=dt), Out((m, n), dt)
    return (lambda: example("matmul")["matmul"](o.part(tile), arg(a), arg(b), BK=bk).sync(),
            [(o, a.double() @ b.double(), mm_tol(a, b, dt))])


def persistent_matmul(p, dt):
    (m, k, n), tile, bk, grid = p
    a, b, o = randn(m, k, dt=dt), randn(k, n, dt=dt), Out((m, n), dt)
    return (lambda: example("persistent_matmul")["matmul"].launch(o.part(tile), arg(a), arg(b), BK=bk,
                                                                 grid=grid).sync(),
            [(o, a.double() @ b.double(), mm_tol(a, b, dt))])


def batched_matmul(p, dt):
    (z, m, k, n), tile, bk = p
    a, b, o = randn(z, m, k, dt=dt), randn(z, k, n, dt=dt), Out((z, m, n), dt)
    return (lambda: example("batched_matmul")["bmm"](o.part((1, *tile)), arg(a), arg(b), BK=bk).sync(),
            [(o, a.double() @ b.double(), mm_tol(a, b, dt))])


def mixed_precision_matmul(p, dt):                   # dt is the inputs' dtype; the output is f32
    (m, k, n), tile, bk = p
    a, b, o = randn(m, k, dt=dt), randn(k, n, dt=dt), Out((m, n), "f32")
    return (lambda: example("mixed_precision_matmul")["matmul"](o.part(tile), arg(a), arg(b), BK=bk).sync(),
            [(o, a.double() @ b.double(), mm_tol(a, b, "f32"))])


def softmax(p, dt):
    (m, n), bn = p
    x, o = randn(m, n, dt=dt, scale=3.0), Out((m, n), dt)
    return (lambda: example("softmax")["softmax"](o.part((1, bn)), arg(x)).sync(),
            [(o, torch.softmax(x.double(), dim=1), stored(dt, 1e-5))])


def rms_norm(p, dt):
    (m, h), bh, sub = p
    x, w, o = randn(m, h, dt=dt), randn(h, dt=dt), Out((m, h), dt)
    xd = x.double()
    want = xd * torch.rsqrt((xd * xd).mean(dim=1, keepdim=True) + 1e-6) * w.double()
    return (lambda: example("rms_norm")["rms_norm"](o.part((1, bh)), arg(x), arg(w), SUB=sub, eps=1e-6).sync(),
            [(o, want, stored(dt, 1e-5))])


def masked_fill(p, dt):
    shape, tile, md = p
    x, o = randn(*shape, dt=dt), Out(shape, dt)
    mask = torch.rand(shape) < 0.3
    want = torch.where(mask, torch.tensor(-1e4, dtype=TORCH[dt]).double(), x.double().cpu())
    return (lambda: example("masked_fill")["masked_fill"](o.part(tile), arg(x), arg(mask.to(TORCH[md]).to(DEVICE)),
                                                          value=-1e4).sync(),
            [(o, want, (0, 0))])


def flash_attention(p, dt):
    """p is rounded to T for the product with V: up to eps(T) (P @ |V|) on top of the fp32 math."""
    (h, hkv, s, d), bm, bn, causal = p
    q, k, v, o = randn(h, s, d, dt=dt), randn(hkv, s, d, dt=dt), randn(hkv, s, d, dt=dt), Out((h, s, d), dt)
    kk, vv = (t.double().repeat_interleave(h // hkv, dim=0) for t in (k, v))
    scores = q.double() @ kk.transpose(1, 2) / d ** 0.5
    if causal:
        scores = scores.masked_fill(~torch.ones(s, s, dtype=torch.bool, device=DEVICE).tril(), -float("inf"))
    probs = torch.softmax(scores, dim=-1)
    rtol, atol = stored(dt, 1e-4)
    return (lambda: example("flash_attention")["attention"](o.part((1, bm, d)), arg(q), arg(k), arg(v),
                                                            scale=d ** -0.5, causal=causal, GROUP=h // hkv,
                                                            BN=bn).sync(),
            [(o, probs @ vv, (rtol, atol + rtol * (probs @ vv.abs())))])


# (builder, sizes: ragged ones first); each runs in every dtype of FLOATS
CASES = {
    "hello_world": (hello_world, [1000, 37, 64]),
    "vector_add": (vector_add, [1000, 997, 1, 4096]),
    "saxpy_2d": (saxpy_2d, [((33, 47), (16, 16)), ((48, 80), (32, 64))]),
    "ragged_sizes.square_plus_one": (square_plus_one, [1000, 997, 1024, 5]),
    "ragged_sizes.add_2d": (add_2d, [((33, 47), (16, 16)), ((1, 5), (16, 16)), ((64, 64), (16, 16))]),
    "matmul": (matmul, [((70, 50, 40), (32, 32), 16), ((1, 17, 3), (16, 16), 16), ((128, 64, 96), (64, 32), 32)]),
    "persistent_matmul": (persistent_matmul, [((64, 64, 96), (16, 32), 16, (5,)),
                                              ((192, 96, 320), (64, 64), 32, None)]),
    "batched_matmul": (batched_matmul, [((3, 40, 48, 24), (32, 32), 16), ((2, 33, 70, 17), (16, 16), 32)]),
    "mixed_precision_matmul": (mixed_precision_matmul, [((64, 96, 48), (32, 32), 32), ((70, 50, 40), (32, 32), 16),
                                                        ((33, 100, 17), (16, 16), 32)]),
    "softmax": (softmax, [((6, 100), 128), ((5, 1000), 1024), ((3, 37), 64)]),
    "rms_norm": (rms_norm, [((3, 2560), 4096, 512), ((5, 1000), 1024, 256), ((2, 300), 512, 128)]),
    "masked_fill": (masked_fill, [((20, 30), (16, 16), "bool"), ((33, 47), (32, 16), "u8")]),
    "flash_attention": (flash_attention, [((4, 2, 80, 64), 32, 32, False), ((4, 2, 80, 64), 32, 32, True),
                                          ((2, 1, 100, 32), 64, 32, True), ((3, 3, 37, 16), 16, 16, False)]),
}
MASKS = ("bool", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32")


def run_case(build, p, dt):
    with ts.backend(BACKEND):
        launch, outs = build(p, dt)
        launch()
        for out, want, (rtol, atol) in outs:
            assert_near(out.view, want, rtol, atol, f"{build.__name__} {p} {dt}")
            inside = torch.zeros_like(out.buf, dtype=torch.bool)
            inside[out.region] = True
            assert (out.unchanged() | inside).all(), "a store went past the output's edges"


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("name,p", [pytest.param(n, p, id=f"{n}-{p}".replace(" ", "")) for n, (_, sizes)
                                    in CASES.items() for p in sizes])
def test_example_kernel(name, p, dt):
    run_case(CASES[name][0], p, dt)


@pytest.mark.parametrize("md", MASKS)
def test_masked_fill_takes_a_mask_of_any_dtype(md):
    run_case(masked_fill, ((33, 47), (16, 32), md), "f32")


@pytest.mark.parametrize("n", [500, 997, 4096])
def test_unsafe_race(n):
    """atomic_add sums every block's part; the racy store leaves one block's part (the
    sanitizer refuses it on the reference backend only)."""
    m, bsz = example("unsafe_race"), 128
    grid = (-(-n // bsz),)
    x = torch.rand(n, device=DEVICE)
    with ts.backend(BACKEND):
        total = torch.full((1,), 7.0, device=DEVICE)       # atomics add to what is there
        m["atomic_sum"].unsafe_launch(arg(total), arg(x), n=n, B=bsz, grid=grid).sync()
        assert_near(total, 7.0 + x.double().sum().reshape(1), 1e-5, 0, "atomic_sum")
        racy = torch.full((1,), NAN, device=DEVICE)

        def launch():
            m["racy_sum"].unsafe_launch(arg(racy), arg(x), n=n, B=bsz, grid=grid).sync()
        if BACKEND == "reference":
            with pytest.raises(ts.SanitizerError, match=r"block \(1,\) writes it and block \(0,\) also writes it"):
                launch()
            return
        launch()
    parts = torch.stack([c.double().sum() for c in x.split(bsz)]).cpu()
    assert ((parts - racy.double().cpu()).abs() <= 1e-5 * parts).any(), (racy, parts)


REFUSED = {   # refused_kernels.CASES title -> the start of the message
    "store to a ts.Ref": "cannot store to `x`: it is a read-only input (ts.Ref)",
    "forged store index for a ts.MutTiles output": "`c` can only be indexed by an index minted by",
    "an output aliasing an input": "output `z` of `add_one` shares memory with argument `x`",
    "a tensor used while lent to a partition": "cannot use `numpy()`: this tensor is lent to a partition",
    "reading ts.empty memory": "argument `x` of `add_one` is read, but it came from ts.empty",
    "a non-power-of-two tile": "the tile of `z` has 100, which is not a power of two",
}


@pytest.mark.parametrize("title", REFUSED)
def test_refused_kernels_are_refused(title):
    m = example("refused_kernels")
    assert sorted(c[0] for c in m["CASES"]) == sorted(REFUSED)
    case = next(c for c in m["CASES"] if c[0] == title)
    with ts.backend(BACKEND):
        e = m["refusal"](case)                             # raises unless refused with the case's error class
    assert type(e) is case[2] and e.message.startswith(REFUSED[title]), e


MIXED = {   # id -> (example, output dtype, input dtypes, error class, the start of its message)
    "vector_add-f16-bf16": ("vector_add", "f16", ("f16", "bf16"), ts.LaunchError,
                            "`T` is ts.f16 from one argument but ts.bf16 from the dtype of `y`"),
    "matmul-bf16-of-f16": ("matmul", "bf16", ("f16", "f16"), ts.LaunchError,
                           "`T` is ts.bf16 from one argument but ts.f16 from the dtype of `a`"),
    "mixed_precision_matmul-f16-bf16": ("mixed_precision_matmul", "f32", ("f16", "bf16"), ts.LaunchError,
                                        "`T` is ts.f16 from one argument but ts.bf16 from the dtype of `b`"),
    "mixed_precision_matmul-f16-out": ("mixed_precision_matmul", "f16", ("bf16", "bf16"), ts.LaunchError,
                                       "argument `c` of `matmul` has dtype f16, but the kernel declares f32"),
    "matmul-i32": ("matmul", "i32", ("i32", "i32"), ts.KernelError, "ts.mma does not take i32 operands"),
}


@pytest.mark.parametrize("case", MIXED)
def test_a_dtype_mix_is_refused(case):
    """One T binds every tensor annotated with it: mixed float dtypes (or an output dtype the
    kernel fixes) are refused at launch, and a dtype its ops cannot take when specializing."""
    name, out_dt, (da, db), error, message = MIXED[case]
    if name == "vector_add":
        o, kernel, kw, shapes = Out((64,), out_dt), example(name)["add"], {}, [(64,), (64,)]
        part = o.part((16,))
    else:
        o, kernel, kw, shapes = Out((32, 32), out_dt), example(name)["matmul"], {"BK": 16}, [(32, 32), (32, 32)]
        part = o.part((16, 16))
    x, y = randn(*shapes[0], dt=da), randn(*shapes[1], dt=db)
    with ts.backend(BACKEND):
        with pytest.raises(error) as e:
            kernel(part, arg(x), arg(y), **kw).sync()
    assert e.value.message.startswith(message), e.value
    assert o.unchanged().all(), "a refused launch wrote its output"


@pytest.mark.parametrize("dt", FLOATS)
def test_persistent_matmul_refuses_sizes_that_need_masks(dt):
    o = Out((70, 96), dt)
    with ts.backend(BACKEND):
        with pytest.raises(ts.KernelError, match="denies in-kernel bounds checks"):
            example("persistent_matmul")["matmul"](o.part((16, 32)), arg(randn(70, 64, dt=dt)),
                                                   arg(randn(64, 96, dt=dt)), BK=16)
    assert o.unchanged().all()


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_unsafe_kernels_refuse_plain_calls_and_other_dtypes(dt):
    m = example("unsafe_race")
    total, x = torch.zeros(1, device=DEVICE), torch.rand(500, device=DEVICE)
    with ts.backend(BACKEND):
        with pytest.raises(ts.LaunchError, match="is an unsafe kernel and cannot be launched by a plain call"):
            m["racy_sum"](arg(total), arg(x), n=500, B=128)
        with pytest.raises(ts.LaunchError, match=f"`total` of `atomic_sum` has dtype {dt}, but the kernel declares"):
            m["atomic_sum"].unsafe_launch(arg(total.to(TORCH[dt])), arg(x.to(TORCH[dt])), n=500, B=128, grid=(4,))
    assert (total == 0).all()
