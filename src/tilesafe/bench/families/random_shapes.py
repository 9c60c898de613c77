"""Random shapes: GEMM, GEMV, flash and decode workloads drawn from real models' sizes that
no tuned config was made for (issue 22), reproducible from one seed.

The draws come from *held-out* models (GPT-2 XL, Falcon-7B, Llama-2/3, Qwen2.5, TinyLlama, Yi, Phi-3:
hidden sizes with and without multiples of 128, GQA ratios 1:1 to 71:1, head dims 64 and
128), with M from 2 to 16384 (odd values as often as even) for the GEMMs and M = 1 for GEMVs, and lengths
that are never powers of two. The tuner's *training* set (`benchmarks/tune_h200.py`: the
Qwen3 projections and the square products) is kept apart by construction:
  * a weight (N, K), a (heads, KV heads, head dim) or a length of the training set is never
    drawn (`HELD_OUT_WEIGHTS` leaves the training weights out, attention lengths are never
    powers of two, the training models' head layouts are left out);
  * a draw that a committed tuned entry was made for is drawn again (`served_by_table`);
  * the tuner refuses to tune any held-out shape (`refuse_held_out`, called by its plan).
So the benchmark measures the config model (and the first-use autotune), never the table.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import tilesafe as ts

from ...kernels import config_model as cm
from ...kernels import configs
from .qwen3 import HEAD_DIM, MODELS

GENERATOR = "held-out/1"             # recorded with the seed: a new draw scheme gets a new name
SQUARES = (1024, 2048, 4096, 8192, 16384)


@dataclass(frozen=True, slots=True)
class HeldOut:
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int

    def weights(self) -> dict[str, tuple[int, int]]:
        """name -> (N, K) of the layer's fused projections, as an inference engine runs them."""
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
        return {"qkv": (qkv, self.hidden), "o": (self.hidden, self.heads * self.head_dim),
                "gate_up": (2 * self.intermediate, self.hidden), "down": (self.hidden, self.intermediate)}


HELD_OUT_MODELS = (
    HeldOut("GPT-2-XL", 1600, 6400, 25, 25, 64),          # 1600: not a multiple of 128
    HeldOut("Falcon-7B", 4544, 18176, 71, 1, 64),         # 4544, 71 query heads per KV head
    HeldOut("Llama-2-7B", 4096, 11008, 32, 32, 128),
    HeldOut("Llama-3-8B", 4096, 14336, 32, 8, 128),
    HeldOut("Qwen2.5-7B", 3584, 18944, 28, 4, 128),
    HeldOut("Qwen2.5-0.5B", 896, 4864, 14, 2, 64),
    HeldOut("TinyLlama-1.1B", 2048, 5632, 32, 4, 64),
    HeldOut("Yi-6B", 4096, 11008, 32, 4, 128),
    HeldOut("Phi-3-medium", 5120, 17920, 40, 10, 128),
)


def training_weights() -> set[tuple[int, int]]:
    """The (N, K) weights `tune_h200.py` tunes: the Qwen3 projections and the squares."""
    out = {(n, n) for n in SQUARES}
    for model in MODELS.values():
        out.update(model.projections().values())
    return out


def training_heads() -> set[tuple[int, int, int]]:
    """(heads, KV heads, head dim) of the tuner's attention workloads (Qwen3's, and 32:32)."""
    return {(m.heads, m.kv_heads, HEAD_DIM) for m in MODELS.values()} | {(32, 32, HEAD_DIM)}


HELD_OUT_WEIGHTS = tuple(sorted({w for m in HELD_OUT_MODELS for w in m.weights().values()} - training_weights()))
HELD_OUT_HEADS = tuple(sorted({(m.heads, m.kv_heads, m.head_dim) for m in HELD_OUT_MODELS} - training_heads()))


def refuse_held_out(weights=(), heads=(), lengths=()) -> None:
    """Raise if a training workload is in the held-out space: the tuner calls this on its plan."""
    bad = [f"weight {w}" for w in weights if tuple(w) in HELD_OUT_WEIGHTS]
    bad += [f"heads {h}" for h in heads if tuple(h) in HELD_OUT_HEADS]
    bad += [f"length {s}" for s in lengths if not _pow2(s)]
    if bad:
        raise ValueError(f"refusing to tune held-out shapes ({', '.join(bad)}): the random-shape benchmark "
                         "measures them, so tuning must never see them")


# --- draws ---------------------------------------------------------------------------------------

def draw(seed: int, gemm: int, gemv: int, flash: int, decode: int, tiny: bool = False) -> dict[str, list]:
    """{"gemm": [cm.Gemm], "gemv": [...], "flash": [cm.Attention], "decode": [cm.Decode]}: the
    same lists for the same arguments on every machine (`random.Random`, seeded per family)."""
    dtype = "f32" if tiny else "bf16"
    makers = {"gemm": (gemm, _gemm), "gemv": (gemv, _gemv), "flash": (flash, _flash), "decode": (decode, _decode)}
    out = {}
    for family, (count, make) in makers.items():
        rng = random.Random(f"{GENERATOR}/{family}/{seed}")
        shapes: list = []
        while len(shapes) < count:
            shape = make(rng, dtype, tiny)
            if shape not in shapes and (tiny or not served_by_table(shape)):
                shapes.append(shape)
        out[family] = shapes
    return out


def served_by_table(shape) -> bool:
    """Whether a committed tuned entry was made for this shape (the lookup would use it)."""
    mm = _matmul()
    dt = getattr(ts, shape.dtype)
    if isinstance(shape, cm.Gemm):
        keys = mm.linear_keys(dt, shape.m, shape.n, shape.k) if shape.m <= 16 else \
            mm.matmul_keys(dt, shape.m, shape.n, shape.k)
    else:
        keys = (configs.shape_class(dt, *shape.class_sizes()),)
    return cm.refinement(keys, shape, configs.tuned_table("nvidia-h200").get(shape.family, {})) is not None


def _gemm(rng: random.Random, dtype: str, tiny: bool) -> cm.Gemm:
    if tiny:
        return cm.Gemm(rng.randint(17, 80), rng.randint(20, 150), rng.randint(20, 150), dtype)
    while True:
        n, k = rng.choice(HELD_OUT_WEIGHTS)
        skinny = rng.random() < 0.15                # 2..16 rows: a decode batch (the linear path)
        m = rng.randint(2, 16) if skinny else min(16384, _odd_or_even(rng, _log_uniform(rng, 17, 16384)))
        if 2.0 * m * n * k <= 1.5e12:              # <= ~2 ms on the H200: the run stays short
            return cm.Gemm(m, n, k, dtype)


def _gemv(rng: random.Random, dtype: str, tiny: bool) -> cm.Gemm:
    if tiny:
        return cm.Gemm(1, rng.randint(20, 200), rng.randint(20, 200), dtype)
    n, k = rng.choice(HELD_OUT_WEIGHTS)
    return cm.Gemm(1, n, k, dtype)


def _flash(rng: random.Random, dtype: str, tiny: bool) -> cm.Attention:
    if tiny:
        s = rng.randint(5, 70)
        return cm.Attention(1, 4, rng.choice((1, 2, 4)), s, s, rng.choice((16, 32)), rng.random() < 0.5, dtype)
    while True:
        heads, kv, d = rng.choice(HELD_OUT_HEADS)
        batch = rng.choice((1, 1, 2, 4))
        s = _log_uniform(rng, 200, 8192)
        if not _pow2(s) and 4.0 * batch * heads * s * s * d <= 1.5e12:
            return cm.Attention(batch, heads, kv, s, s, d, rng.random() < 0.5, dtype)


def _decode(rng: random.Random, dtype: str, tiny: bool) -> cm.Decode:
    if tiny:
        return cm.Decode(4, rng.choice((1, 2, 4)), rng.randint(5, 100), 32, dtype)
    heads, kv, d = rng.choice(HELD_OUT_HEADS)
    while True:
        ctx = _log_uniform(rng, 300, 32768)
        if not _pow2(ctx):
            return cm.Decode(heads, kv, ctx, d, dtype)


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _odd_or_even(rng: random.Random, m: int) -> int:
    """Half the draws odd (a prefill of any length), half even."""
    return m | 1 if rng.random() < 0.5 else m + (m & 1)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _matmul():
    import importlib
    return importlib.import_module("tilesafe.kernels.matmul")
