"""What a random-shape run says: the config model's prediction beside each measured time,
the limit a slow shape hit, and per family the geometric mean and the worst ratio against
PyTorch (GPU time in CUDA graphs, the eager time beside it), checked against issue 22."""
from __future__ import annotations

import importlib
import math

import tilesafe as ts

from ..kernels import config_model as cm
from ..kernels import configs, first_use

# family -> (the ratio judged, what each shape must reach, what the geometric mean must reach)
GOALS = {"random-gemm": ("vs_torch", 0.85, 0.97), "random-gemv": ("vs_torch", 0.95, 0.95),
         "random-flash": ("vs_torch", 0.85, 0.85), "random-decode": ("vs_baseline", 0.85, 0.85)}
# A second bar every shape of a family must clear, beside the judged ratio: issue 22's GEMV goal
# is >= 0.95 of cuBLAS *and* >= 0.9 of the weight-read rate (the read baseline's time over ours).
ALSO_EACH = {"random-gemv": ("vs_baseline", 0.90)}
# Issue 22 sets no number for decode attention: its goal above is the fixed benchmark's (85% of
# the copy rate over the KV bytes), which a few heads over a short context cannot reach (too few
# blocks to keep the HBM busy). The summary says so, and gives the ratio to SDPA beside it.
NOT_ISSUE_GOALS = {"random-decode": "the fixed benchmark's decode target; issue 22 sets none"}


def shape_of(params: dict):
    """The config-model shape a record's params describe."""
    kind = {"Gemm": cm.Gemm, "Attention": cm.Attention, "Decode": cm.Decode}[params["shape_kind"]]
    return kind(**{k: params[k] for k in kind._fields})


def keys_of(shape) -> tuple[str, ...]:
    """The shape classes the library looks this shape up under, most specific first."""
    mm = importlib.import_module("tilesafe.kernels.matmul")
    dt = getattr(ts, shape.dtype)
    if isinstance(shape, cm.Gemm):
        return mm.linear_keys(dt, shape.m, shape.n, shape.k) if shape.m <= 16 else \
            mm.matmul_keys(dt, shape.m, shape.n, shape.k)
    return (configs.shape_class(dt, *shape.class_sizes()),)


def model_record(params: dict, on_gpu: bool) -> dict:
    """The config the library chose for a record's shape and the model's view of it: the
    model's own choice, the first-use autotune's (if it ran), the predicted time and limit."""
    shape = shape_of(params)
    gpu = cm.gpu_of(None)
    chosen = configs.lookup(shape.family, keys_of(shape), dtype=getattr(ts, shape.dtype),
                            shape=shape) if on_gpu else cm.choose(shape, gpu)
    tuned = first_use.remembered(configs.gpu_name(), shape.family, keys_of(shape)[0]) if on_gpu else None
    used = tuned or chosen
    why = cm.explain(shape, used, gpu)
    out = {"family": shape.family, "config": used, "source": "first-use autotune" if tuned else "model",
           "predicted_us": round(why["predicted_us"], 3), "limit": why["limit"]}
    if tuned and tuned != chosen:
        out["model_config"] = chosen
        out["model_predicted_us"] = round(cm.predict_us(shape, chosen, gpu), 3)
    return out


def summarize(results: list[dict]) -> dict:
    """Per family: shapes timed, geomean and worst of the judged ratio (graph times), the
    eager ratio's geomean, predicted / measured, the misses with their limits, and whether
    the issue's goals are met. Adds `eager_vs_torch` and `miss` to the records."""
    out = {}
    for family, (ratio, each, mean) in GOALS.items():
        recs = [r for r in results if r["family"] == family]
        if not recs:
            continue
        have = [(r["ratios"][ratio], r["name"]) for r in recs if r.get("ratios", {}).get(ratio) is not None]
        row = {"ratio": ratio, "shapes": len(recs), "timed": len(have), "need_each": each, "need_geomean": mean}
        also = ALSO_EACH.get(family)
        for r in recs:
            _annotate(r, ratio, each, also)
        if have:
            row["geomean"] = _geomean(v for v, _ in have)
            row["worst"], row["worst_shape"] = min(have)
            row["met"] = row["geomean"] >= mean and row["worst"] >= each and len(have) == len(recs)
        if also is not None:
            got = [(r["ratios"][also[0]], r["name"]) for r in recs if r.get("ratios", {}).get(also[0]) is not None]
            row["also"] = {"ratio": also[0], "need_each": also[1], "timed": len(got)}
            if got:
                row["also"]["worst"], row["also"]["worst_shape"] = min(got)
            row["met"] = row.get("met", False) and bool(got) and min(got)[0] >= also[1] and len(got) == len(recs)
        if ratio != "vs_torch":
            beside = [r["ratios"]["vs_torch"] for r in recs if r.get("ratios", {}).get("vs_torch") is not None]
            if beside:
                row["vs_torch_geomean"], row["vs_torch_worst"] = _geomean(beside), min(beside)
        if family in NOT_ISSUE_GOALS:
            row["goal_source"] = NOT_ISSUE_GOALS[family]
        eager = [r["eager_vs_torch"] for r in recs if r.get("eager_vs_torch")]
        if eager:
            row["eager_geomean_vs_torch"] = _geomean(eager)
        pm = [r["model"]["predicted_us"] / r["impls"]["tilesafe"]["median_us"] for r in recs
              if "model" in r and r["impls"].get("tilesafe", {}).get("median_us")]
        if pm:
            row["predicted_over_measured_geomean"] = _geomean(pm)
        row["misses"] = [{"shape": r["name"], "value": r["ratios"].get(ratio), **r["miss"],
                          **({also[0]: r["ratios"].get(also[0])} if also else {})} for r in recs if "miss" in r]
        out[family] = row
    return out


def _annotate(rec: dict, ratio: str, each: float, also=None) -> None:
    impls = rec.get("impls", {})
    ts = impls.get("tilesafe", {}).get("eager", {}).get("median_us")
    torch_eager = [i["eager"]["median_us"] for i in impls.values()
                   if i.get("role") == "torch" and i.get("eager", {}).get("median_us")]
    if ts and torch_eager:
        rec["eager_vs_torch"] = min(torch_eager) / ts
    value = rec.get("ratios", {}).get(ratio)
    second = rec.get("ratios", {}).get(also[0]) if also else None
    below = value is not None and value < each or second is not None and second < also[1]
    if below and "model" in rec:
        rec["miss"] = {"limit": rec["model"]["limit"], "predicted_us": rec["model"]["predicted_us"],
                       "measured_us": impls["tilesafe"]["median_us"]}


def _geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def text(summary: dict) -> str:
    """The summary as lines of text (printed after the run's table)."""
    lines = ["", "random shapes (GPU time in CUDA graphs; eager beside it; issue 22's goals)"]
    for family, row in summary.items():
        if "geomean" not in row:
            lines.append(f"  {family}: nothing timed")
            continue
        verdict = "pass" if row["met"] else "MISS"
        if "goal_source" in row:
            verdict += f" ({row['goal_source']})"
        beside = f"; vs_torch geomean {row['vs_torch_geomean']:.3f}, worst {row['vs_torch_worst']:.3f}" \
            if "vs_torch_geomean" in row else ""
        lines.append(f"  {family:<14} {row['ratio']} geomean {row['geomean']:.3f} (need {row['need_geomean']:.2f}), "
                     f"worst {row['worst']:.3f} (need {row['need_each']:.2f}) {verdict}{beside}; eager geomean "
                     f"{row.get('eager_geomean_vs_torch', float('nan')):.3f}; predicted/measured "
                     f"{row.get('predicted_over_measured_geomean', float('nan')):.2f}")
        if "also" in row:
            a = row["also"]
            lines.append(f"  {'':<14} and {a['ratio']} worst " +
                         (f"{a['worst']:.3f} ({a['worst_shape']})" if "worst" in a else "untimed") +
                         f" (need {a['need_each']:.2f} on every shape: the weight-read rate)")
        for m in row["misses"]:
            second = row.get("also", {}).get("ratio")            # the family's second bar, beside the first
            beside = f", {second} {m[second]:.3f}" if second and m.get(second) is not None else ""
            value = f"{m['value']:.3f}" if m["value"] is not None else "untimed"
            lines.append(f"      miss {m['shape']}: {value}{beside}, limit {m['limit']}, predicted "
                         f"{m['predicted_us']:.1f} us, measured {m['measured_us']:.1f} us")
    return "\n".join(lines)


def plot(doc: dict, out_dir, stem: str) -> list:
    """`<stem>-random-predicted.png`: predicted against measured time, every timed shape
    (log-log, the diagonal drawn), colored by family; empty without matplotlib."""
    from pathlib import Path

    from .plot import MatplotlibMissing, pyplot
    try:
        plt = pyplot()
    except MatplotlibMissing:
        return []
    fig, ax = plt.subplots(figsize=(6, 6))
    lo, hi = math.inf, 0.0
    for family in GOALS:
        pts = [(r["model"]["predicted_us"], r["impls"]["tilesafe"]["median_us"]) for r in doc["results"]
               if r["family"] == family and "model" in r and r["impls"].get("tilesafe", {}).get("median_us")]
        if pts:
            ax.scatter(*zip(*pts), label=family, s=18)
            lo, hi = min(lo, *(min(p) for p in pts)), max(hi, *(max(p) for p in pts))
    if hi == 0.0:
        plt.close(fig)
        return []
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, linestyle="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted (us)")
    ax.set_ylabel("measured tilesafe (us)")
    ax.set_title(f"config model on {doc['machine'].get('gpu') or 'cpu'}, seed {doc['settings']['random']['seed']}",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(out_dir) / f"{stem}-random-predicted.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
