"""The ratios each workload is judged by, and the targets of the benchmark issue.

Every ratio is a speed ratio measured in one run, >= 1.0 meaning tilesafe is at least as
fast: `vs_torch` = best PyTorch time / tilesafe time (the fastest SDPA backend, cuBLAS, the
eager op), `vs_twin` = raw Triton twin time / tilesafe time (the cost of safety),
`vs_baseline` = tilesafe TB/s / the copy's (or the read's) TB/s over the same bytes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .workload import BASELINE, TILESAFE, TORCH, TWIN

EACH, GEOMEAN = "each", "geomean"
BANDWIDTH_KERNELS = ("softmax", "rms_norm", "rope", "silu_mul")
# Datasheet HBM bandwidth by GPU slug (TB/s), for the "fraction of peak" column.
HBM_PEAK_TBPS = {"h200": 4.8, "h100": 3.35}


@dataclass(frozen=True, slots=True)
class Target:
    id: str
    text: str
    families: tuple[str, ...] | None  # None: every family
    ratio: str                    # "vs_torch" | "vs_twin" | "vs_baseline"
    threshold: float
    aggregate: str = EACH         # EACH: the worst workload; GEOMEAN: over the workloads
    strict: bool = False          # value > threshold instead of >=


TARGETS = (
    Target("add", "add >= 99% of torch.add", ("add",), "vs_torch", 0.99),
    Target("gemm-geomean", "GEMM geomean >= 100% of cuBLAS", ("gemm",), "vs_torch", 1.00, GEOMEAN),
    Target("gemm-min", "GEMM: none < 90% of cuBLAS", ("gemm",), "vs_torch", 0.90),
    Target("twin", "tilesafe within 1% of its raw Triton twin", None, "vs_twin", 0.99),
    Target("bandwidth", "softmax/RMSNorm/RoPE/SiLU-mul >= 90% of copy bandwidth", BANDWIDTH_KERNELS,
           "vs_baseline", 0.90),
    Target("gemv-read", "GEMV >= 95% of the weight-read rate", ("gemv",), "vs_baseline", 0.95),
    Target("gemv-linear", "GEMV faster than F.linear", ("gemv",), "vs_torch", 1.00, strict=True),
    Target("flash", "flash >= 90% of the fastest SDPA backend", ("flash",), "vs_torch", 0.90),
    Target("decode", "decode >= 85% of copy bandwidth over the KV bytes", ("decode",), "vs_baseline", 0.85),
)


def ratios(rec: dict, peak_tbps: float | None = None) -> dict:
    """The ratios of one workload's record (missing where an implementation has no time)."""
    impls = {n: r for n, r in rec.get("impls", {}).items() if r.get("status") == "ok" and "median_us" in r}
    ts = next((r for r in impls.values() if r["role"] == TILESAFE), None)
    out: dict = {}
    if ts is None:
        return out
    torch_best = min((r["median_us"], n) for n, r in impls.items() if r["role"] == TORCH) if any(
        r["role"] == TORCH for r in impls.values()) else None
    if torch_best is not None:
        out["vs_torch"], out["torch_best"] = torch_best[0] / ts["median_us"], torch_best[1]
    twin = next((r for r in impls.values() if r["role"] == TWIN), None)
    if twin is not None:
        out["vs_twin"] = twin["median_us"] / ts["median_us"]
    base = next(((n, r) for n, r in impls.items() if r["role"] == BASELINE), None)
    if base is not None:
        out["vs_baseline"], out["baseline"] = ts["tbps"] / base[1]["tbps"], base[0]
    if peak_tbps and rec.get("metric") == "bandwidth":
        out["peak_fraction"] = ts["tbps"] / peak_tbps
    return out


def evaluate(results: list[dict], families=None) -> list[dict]:
    """Each target's value, pass or miss, and the workloads behind it. A target whose
    workloads did not run (families not selected) is left out; one with workloads that
    produced no ratio is a miss."""
    out = []
    for t in TARGETS:
        recs = [r for r in results if (t.families is None or r["family"] in t.families)
                and (families is None or r["family"] in families)]
        if not recs:
            continue
        values = [(r.get("ratios", {}).get(t.ratio), r["name"]) for r in recs]
        have = [(v, n) for v, n in values if v is not None]
        missing = [n for v, n in values if v is None]
        row = {"id": t.id, "text": t.text, "threshold": t.threshold, "strict": t.strict, "aggregate": t.aggregate,
               "workloads": len(recs), "missing": missing}
        if have:
            if t.aggregate == GEOMEAN:
                row["value"] = math.exp(sum(math.log(v) for v, _ in have) / len(have))
            else:
                row["value"], row["worst"] = min(have)
            row["met"] = meets(row["value"], t.threshold, t.strict)
            row["passed"] = row["met"] and not missing
        else:
            row["value"], row["met"], row["passed"] = None, False, False
        out.append(row)
    return out


def meets(value: float, threshold: float, strict: bool = False) -> bool:
    return bool(value > threshold if strict else value >= threshold)
