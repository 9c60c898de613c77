"""A run's results as one JSON document, and the text summary printed at the end.

The document (schema `tilesafe-bench/1`): `machine`, `versions`, `git`, `settings`, then
`results` (one record per workload: shapes, bytes, FLOPs, rotation, the tilesafe launch's
tiling, each implementation's check and timing, and its `ratios`) and `targets`.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from . import targets as T

SCHEMA = "tilesafe-bench/1"
ROLES = ("tilesafe", "torch", "twin", "baseline")


def document(results, machine: dict, versions: dict, git: dict, settings: dict, elapsed_s: float,
             families=None) -> dict:
    peak = T.HBM_PEAK_TBPS.get(machine.get("gpu_slug", ""))
    for rec in results:
        rec["ratios"] = T.ratios(rec, peak)
    return {"schema": SCHEMA, "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": dict(machine, hbm_peak_tbps=peak), "versions": versions, "git": git, "settings": settings,
            "elapsed_s": round(elapsed_s, 1), "results": results,
            "targets": [] if settings.get("dry_run") else T.evaluate(results, families)}


def broken(results) -> bool:
    """Whether a tilesafe or twin implementation gave a wrong result or failed (the run exits 1)."""
    return any(r.get("status") == "error" or any(i["role"] in ("tilesafe", "twin") and i["status"] != "ok"
                                                  for i in r.get("impls", {}).values()) for r in results)


def file_name(doc: dict) -> str:
    stamp = doc["created"].replace(":", "").replace("-", "").replace("+0000", "Z")[:15]
    kind = "dry-run" if doc["settings"].get("dry_run") else "quick" if doc["settings"].get("quick") else "full"
    return f"bench-{stamp}-{kind}.json"


def write(doc: dict, out_dir: Path, name: str | None = None) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / (name or file_name(doc))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(path)
    return path


def load(path) -> dict:
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a tilesafe benchmark result (schema {doc.get('schema')!r})")
    return doc


# --- the text summary -------------------------------------------------------------------------


def table(doc: dict) -> str:
    dry = doc["settings"].get("dry_run")
    lines = []
    for family in families(doc["results"]):
        recs = [r for r in doc["results"] if r["family"] == family]
        lines.append("")
        lines += _check_rows(family, recs) if dry else _timing_rows(family, recs)
    if not dry:
        lines += ["", *target_rows(doc["targets"])]
    return "\n".join(lines)


def families(results) -> list[str]:
    """Kernel families in the order they first appear."""
    seen = []
    for r in results:
        if r["family"] not in seen:
            seen.append(r["family"])
    return seen


def _timing_rows(family: str, recs) -> list[str]:
    unit = "TFLOP/s" if recs[0]["metric"] == "flops" else "TB/s"
    width = max(len(r["name"]) for r in recs)
    cols = (f"{'time':>9} {'tilesafe':>8}  {'torch (best)':>22}  {'twin':>7}  {'baseline':>13}  "
            f"{'ts/torch':>8} {'ts/twin':>7} {'ts/base':>7} {'HBM':>5}")
    rows = [f"{family + ' (' + unit + ')':<{width}}  {cols}", "-" * (width + 2 + len(cols))]
    for r in recs:
        if r.get("status") != "ok":
            rows.append(f"{r['name']:<{width}}  {r.get('status')}: {r.get('error', '')[:100]}")
            continue
        ratio = r.get("ratios", {})
        ts = _by_role(r, "tilesafe")
        timed = ts is not None and "median_us" in ts
        ts_cells = f"{_time(ts):>9} {_rate(ts):>8}" if timed else f"{'':>9} {_status(ts):>8}"
        best = ratio.get("torch_best")
        torch_cell = f"{best} {_rate(r['impls'][best])}" if best else _status(_by_role(r, "torch"))
        base = ratio.get("baseline")
        base_cell = f"{base} {_rate(r['impls'][base], bandwidth=True)}" if base else _status(_by_role(r, "baseline"))
        peak = ratio.get("peak_fraction")
        rows.append(f"{r['name']:<{width}}  {ts_cells}  {torch_cell:>22}  {_rate_or_status(_by_role(r, 'twin')):>7}  "
                    f"{base_cell:>13}  {_ratio(ratio.get('vs_torch')):>8} {_ratio(ratio.get('vs_twin')):>7} "
                    f"{_ratio(ratio.get('vs_baseline')):>7} {'-' if peak is None else f'{peak:.0%}':>5}")
    return rows


def _check_rows(family: str, recs) -> list[str]:
    rows = [f"{family}: correctness (relative L2 error against the fp32 oracle)"]
    for r in recs:
        if r.get("status") != "ok":
            rows.append(f"  {r['name']}: {r.get('status')}: {r.get('error', '')[:100]}")
            continue
        cells = [f"{n} {_check(x)}" for n, x in r["impls"].items()]
        rows.append(f"  {r['name']}: " + ", ".join(cells))
    return rows


def target_rows(rows) -> list[str]:
    if not rows:
        return []
    width = max(len(t["text"]) for t in rows)
    out = [f"{'target':<{width}}  {'value':>6}  {'need':>6}  result", "-" * (width + 30)]
    for t in rows:
        value = "-" if t["value"] is None else f"{t['value']:.3f}"
        need = (">" if t.get("strict") else "") + f"{t['threshold']:.2f}"
        verdict = "pass" if t["passed"] else "MISS"
        note = f" (worst: {t['worst']})" if t.get("worst") and not t.get("met") else ""
        if t["missing"]:
            note += f" (no data: {len(t['missing'])} of {t['workloads']})"
        out.append(f"{t['text']:<{width}}  {value:>6}  {need:>6}  {verdict}{note}")
    return out


def _by_role(rec, role):
    return next((r for r in rec["impls"].values() if r["role"] == role), None)


def _time(r) -> str:
    us = r["median_us"]
    return f"{us / 1000:.2f}ms" if us >= 1000 else f"{us:.1f}us"


def _rate(r, bandwidth: bool = False) -> str:
    v = r["tflops"] if not bandwidth and "tflops" in r else r["tbps"]
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _rate_or_status(r) -> str:
    if r is None:
        return "-"
    return _rate(r) if r.get("status") == "ok" and "median_us" in r else r.get("status", "-")


def _status(r) -> str:
    return "-" if r is None else r.get("status", "-")


def _ratio(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _check(r) -> str:
    if r["status"] == "ok":
        return f"ok ({r['rel_error']:.1e})"
    if r["status"] == "wrong":
        return f"WRONG ({r['rel_error']:.1e})"
    return f"{r['status'].upper()} ({r.get('error', '')[:60]})"


# --- the README summary -----------------------------------------------------------------------


def markdown(doc: dict) -> str:
    """Per family: tilesafe's rate range and the geometric mean (and worst) of each ratio;
    then the targets. The README's benchmark table is this output."""
    lines = ["| kernel | workloads | tilesafe | vs best torch | vs raw Triton twin | vs copy/read |",
             "|---|---:|---|---|---|---|"]
    for family in families(doc["results"]):
        recs = [r for r in doc["results"] if r["family"] == family and r.get("status") == "ok"]
        rates = [t[k] for r in recs if (t := _by_role(r, "tilesafe")) and (k := _rate_key(t))]
        unit = "TFLOP/s" if recs and recs[0]["metric"] == "flops" else "TB/s"
        span = f"{min(rates):.3g}–{max(rates):.3g} {unit}" if rates else "-"
        cells = [_summary([r.get("ratios", {}).get(k) for r in recs]) for k in ("vs_torch", "vs_twin", "vs_baseline")]
        lines.append(f"| {family} | {len(recs)} | {span} | {' | '.join(cells)} |")
    lines += ["", "| target | value | need | result |", "|---|---:|---:|---|"]
    for t in doc["targets"]:
        value = "-" if t["value"] is None else f"{t['value']:.3f}"
        worst = f" (worst: {t['worst']})" if t.get("worst") and not t.get("met") else ""
        lines.append(f"| {t['text']} | {value} | {'>' if t.get('strict') else ''}{t['threshold']:.2f} | "
                     f"{'pass' if t['passed'] else 'miss'}{worst} |")
    return "\n".join(lines)


def _rate_key(impl) -> str | None:
    return next((k for k in ("tflops", "tbps") if impl.get(k) is not None), None)


def _summary(values) -> str:
    """`0.98 (worst 0.91)`: the geometric mean of the ratios there are, and the lowest."""
    have = [v for v in values if v]
    if not have:
        return "-"
    geo = T.math.exp(sum(T.math.log(v) for v in have) / len(have))
    return f"{geo:.2f} (worst {min(have):.2f})"
