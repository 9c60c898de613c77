"""A config for every shape: the model that sizes the library's GEMM, GEMV and attention
configs from the shape and the GPU, where the tuned table has no entry for that shape.

    from tilesafe.kernels import config_model as cm
    shape = cm.Gemm(777, 3072, 1536)          # m, n, k (m <= 16: the weight-streaming path)
    cfg = cm.choose(shape)                    # the model's best config for the current GPU
    cm.predict_us(shape, cfg)                 # its predicted time, microseconds
    cm.explain(shape, cfg)["limit"]           # "wave quantisation", "occupancy", "bandwidth", ...

Where a config comes from (`configs.lookup`, on a GPU): a tuned entry made for *this* shape
(the weight's exact N x K at the M it was timed at, or a bucketed class whose sizes are exactly
the shape's) refines it; any other shape gets the model's choice (`choose`) instead of the bucketed defaults,
which lost a third of the speed on shapes nobody tuned (issue 22). The candidates the model
ranks are each checked against what the kernels accept (power-of-two tiles of >= 16 where
the tensor cores need it, split counts within the K tiles, the pipeline within shared
memory: `valid`), so a chosen config always launches. The model's constants are rough; the
first-use autotune (`first_use.py`) times its best few on the GPU where asked.
"""
from __future__ import annotations

import functools

from ..errors import LaunchError, caller_loc
from . import attention_model as am
from . import gemm_model as gm
from .machine_model import H200, Attention, Decode, Gemm, Gpu, gpu_of

__all__ = ["Attention", "Decode", "Gemm", "Gpu", "H200", "gpu_of", "candidates", "choose", "ranked", "predict_us",
           "explain", "valid", "refinement"]

# family -> (candidates, validity, predicted (us, limit))
_MODELS = {
    "matmul": (gm.matmul_candidates, gm.valid_matmul, gm.matmul_us),
    "linear": (gm.linear_candidates, gm.valid_linear, gm.linear_us),
    "attention": (am.flash_candidates, am.valid_flash, am.flash_us),
    "decode": (am.decode_candidates, am.valid_decode, am.decode_us),
}


def candidates(shape, gpu: Gpu | None = None) -> list[dict]:
    """Every valid config the model considers for `shape`, fastest predicted first."""
    return [dict(c) for c in _ranked_all(shape, gpu or gpu_of(None))]


@functools.lru_cache(maxsize=1024)
def _ranked_all(shape, gpu: Gpu) -> tuple:
    """Ranking ~70 candidates takes milliseconds: once per shape (a call's plan, call_plans.py,
    skips the lookup on later calls of one layout; a new layout of one shape lands here)."""
    _check_sizes(shape)
    make, _, predict = _MODELS[shape.family]
    scored = [(predict(shape, c, gpu)[0], i, c) for i, c in enumerate(make(shape, gpu))]
    ranked = tuple(c for _, _, c in sorted(scored, key=lambda t: t[:2]))
    rule = gm.streaming_choice(shape, gpu)      # 16 < m <= 128: a measured rule before the ranking
    return ranked if rule is None else (rule, *(c for c in ranked if not _same(c, rule)))


# The sizes the models divide by (tile counts, waves): 0 has no config. An empty batch of rows
# (m = 0) or cache (max_seq = 0) does: decode_workspace sizes an empty cache's workspace by it.
_NONEMPTY = {"Gemm": ("n", "k"), "Attention": ("batch", "sq", "sk"), "Decode": ()}


def _check_sizes(shape) -> None:
    """A shape of an empty `_NONEMPTY` size (K = 0 divided by zero in the tile counts) is a
    LaunchError; the kernels return before they look a config up (tests/kernels/test_empty_sizes.py)."""
    empty = [f"{name}={getattr(shape, name)}" for name in _NONEMPTY.get(type(shape).__name__, ())
             if getattr(shape, name) < 1]
    if empty:
        raise LaunchError(f"the config model has no config for an empty {type(shape).__name__} "
                          f"({', '.join(empty)})", loc=caller_loc(),
                          help="sizes that set the tiles must be >= 1; an empty product or attention needs no config")


def choose(shape, gpu: Gpu | None = None) -> dict:
    """The model's config for `shape`: the candidate with the smallest predicted time."""
    return dict(choice(shape, gpu or gpu_of(None)))


@functools.lru_cache(maxsize=4096)
def choice(shape, gpu: Gpu) -> dict:
    """`choose`, shared and not to be changed: what every lookup of `shape` reads (~1 us)."""
    return _ranked_all(shape, gpu)[0]


def ranked(shape, n: int = 4, gpu: Gpu | None = None) -> list[dict]:
    """The model's best `n` configs of distinct kinds (tile shape, split or not, tail split, a
    decode's one kernel or two), for a short autotune: near-ties of one kind (a stage more or
    less) would teach it little. Where a rule picks the config (16 < m <= 128), its pick comes
    first, beside the ranking's `n` of other kinds (an autotune then never loses a candidate it
    used to time); last, where those do not hold them already, a product of few output tiles
    gets the balanced split (`gemm_model.balanced_split`) and one row by a short K the short-K
    GEMV forms (`gemm_model.short_k_gemvs`)."""
    _check_sizes(shape)
    gpu = gpu or gpu_of(None)
    rule = gm.streaming_choice(shape, gpu) if shape.family == "matmul" else None
    extras = [gm.balanced_split(shape, gpu)] if shape.family == "matmul" else gm.short_k_gemvs(shape, gpu)
    everything = _ranked_all(shape, gpu)
    out, kinds = ([dict(rule)], {_kind(rule)}) if rule is not None else ([], set())
    n += len(out)
    for c in everything[len(out):]:
        if _kind(c) not in kinds:
            kinds.add(_kind(c))
            out.append(dict(c))
        if len(out) == n:
            break
    for extra in extras:
        if extra is not None and not any(_same(extra, c) for c in out):
            out.append(dict(extra))
    return out


def _kind(c: dict) -> tuple:
    """What sets a config apart for the autotune: its output tile, whether it splits K, tail
    split, a decode's block count, one kernel or two, and a weight-major product (another
    kernel of the same tiles: the rule's weight-major pick leaves the row-major tile its place)
    (a stage more or less is a near-tie)."""
    return (c.get("block_m"), c.get("block_n"), (c.get("split_k") or 1) > 1, c.get("tail_split"),
            c.get("target_blocks"), bool(c.get("one_kernel")), bool(c.get("weight_major")))


def _same(a: dict, b: dict) -> bool:
    """One config, whichever keys either leaves at their defaults."""
    return all(a.get(k) == b.get(k) for k in set(a) | set(b) if k not in ("one_kernel",)) and \
        bool(a.get("one_kernel")) == bool(b.get("one_kernel"))


def predict_us(shape, config: dict, gpu: Gpu | None = None) -> float:
    """Predicted GPU time of one call of `shape` with `config` (a whole config, as
    `configs.lookup` gives it), in microseconds."""
    return _MODELS[shape.family][2](shape, config, gpu or gpu_of(None))[0]


def explain(shape, config: dict, gpu: Gpu | None = None) -> dict:
    """The prediction and the limit that sets it: "compute", "wave quantisation",
    "occupancy", "bandwidth" (HBM) or "l2"."""
    gpu = gpu or gpu_of(None)
    us, limit = _MODELS[shape.family][2](shape, config, gpu)
    return {"predicted_us": us, "limit": limit}


def valid(shape, config: dict, gpu: Gpu | None = None) -> bool:
    """Whether the kernels of `shape`'s family accept `config` and it fits `gpu`."""
    return _MODELS[shape.family][1](config, shape, gpu or gpu_of(None))


def refinement(keys, shape, entries: dict) -> dict | None:
    """The tuned entry (of one family's `entries`) made for this very shape, if any: the first
    of `keys` (most specific first) that is in the table and exact for `shape` — a weight's
    own class (its N x K exact, at the M the tuner timed: its bucket's size), or a bucketed
    class whose sizes are the shape's own (sizes up to 16 all count as 16, the bucket floor).
    A bucket that merely contains the shape is not used: the model sizes that shape instead."""
    for key in keys:
        if key in entries and _exact(key, shape):
            return entries[key]
    return None


def _exact(key: str, shape) -> bool:
    """A class whose sizes are the shape's own: a weight's own class (N x K exact) at the M
    the tuner timed (its bucket's size: an entry timed at M = 128 ran M = 72 at 0.6 of the
    model's choice on the H200), or a bucketed class of the shape's own sizes; sizes up to 16
    are one class (the bucket floor: a decode group of 4 and of 8 share the tuned entry)."""
    parts = [p for p in key.split("/")[1:] if p != "gemv"]
    sizes = tuple(max(16, s) if s <= 16 else s for s in shape.class_sizes())
    if any("x" in p for p in parts):
        rows = [int(p) for p in parts if "x" not in p]     # the bucketed sizes beside the weight (M)
        return tuple(rows) == sizes[:len(rows)]
    return tuple(int(p) for p in parts) == sizes
