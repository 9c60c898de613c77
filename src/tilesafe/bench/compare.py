"""Two runs side by side: `python -m tilesafe.bench --compare OLD.json NEW.json`.

Per workload both runs measured: tilesafe's median time in each and its change, then each
ratio (vs best torch, vs the twin, vs copy/read) old -> new; then each target's value old ->
new. Different runs are different conditions (clocks, cuBLAS's own variance): a change of a
percent or two is within what one workload moves between runs, so the ratios measured side
by side inside one run stay the numbers to quote.
"""
from __future__ import annotations

RATIOS = (("vs_torch", "torch"), ("vs_twin", "twin"), ("vs_baseline", "copy"))


def compare(old: dict, new: dict, families=()) -> str:
    """The text of the comparison (only the given kernel families' workloads, when some are
    given; the targets always)."""
    before = {r["name"]: r for r in old["results"]}
    kept = [r for r in new["results"] if not families or r["family"] in families]
    shared = [r for r in kept if r["name"] in before]
    width = max([len(r["name"]) for r in shared] + [8])
    lines = [f"{_label(old)} -> {_label(new)}", "",
             f"{'workload':<{width}}  {'tilesafe us':>21}  {'change':>7}  " +
             "  ".join(f"{label:>13}" for _, label in RATIOS)]
    for rec in shared:
        was, now = _median(before[rec["name"]]), _median(rec)
        change = f"{now / was - 1:+.1%}" if was and now else "-"
        ratios = [_pair(before[rec["name"]].get("ratios", {}).get(k), rec.get("ratios", {}).get(k)) for k, _ in RATIOS]
        lines.append(f"{rec['name']:<{width}}  {_pair(was, now, '.1f'):>21}  {change:>7}  " +
                     "  ".join(f"{r:>13}" for r in ratios))
    new_only = [r["name"] for r in kept if r["name"] not in before]
    if new_only:
        lines += ["", f"only in the new run: {', '.join(new_only)}"]
    targets = {t["id"]: t for t in old.get("targets", [])}
    rows = new.get("targets", [])
    if rows:
        lines += ["", f"{'target':<56}  {'old -> new':>13}  result"]
        for t in rows:
            was = targets.get(t["id"], {}).get("value")
            lines.append(f"{t['text']:<56}  {_pair(was, t['value']):>13}  {'pass' if t['passed'] else 'miss'}")
    return "\n".join(lines)


def _label(doc: dict) -> str:
    commit = (doc.get("git") or {}).get("commit") or "?"
    return f"{doc.get('created', '?')} ({commit[:10]})"


def _median(rec: dict) -> float | None:
    impl = rec.get("impls", {}).get("tilesafe") or {}
    return impl.get("median_us") if impl.get("status") == "ok" else None


def _pair(was, now, fmt: str = ".3f") -> str:
    show = (lambda v: "-" if v is None else format(v, fmt))
    return f"{show(was)} -> {show(now)}"
