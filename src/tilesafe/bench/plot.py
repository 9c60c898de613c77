"""PNGs from a results JSON, on any machine: one grouped bar chart per kernel family, the
rate of every implementation per workload (TFLOP/s or TB/s), with the HBM datasheet peak
drawn on bandwidth charts. matplotlib is imported only here, and only when plotting."""
from __future__ import annotations

from pathlib import Path

from .report import families

COLORS = {"tilesafe": "#d62728", "twin": "#ff9896", "torch": "#1f77b4", "baseline": "#7f7f7f"}


class MatplotlibMissing(RuntimeError):
    pass


def render(doc: dict, out_dir: Path, stem: str) -> list[Path]:
    """Write `<stem>-<family>.png` into `out_dir` for each family with timed results."""
    plt = pyplot()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for family in families(doc["results"]):
        recs = [r for r in doc["results"] if r["family"] == family and r.get("status") == "ok"]
        names = _impl_names(recs)
        if not names:
            continue
        flops = recs[0]["metric"] == "flops"
        fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(recs) * max(1, len(names)) / 3 + 3), 4.8))
        width = 0.8 / len(names)
        for j, (name, role) in enumerate(names):
            heights = [_rate(r["impls"].get(name), flops) for r in recs]
            xs = [i + (j - (len(names) - 1) / 2) * width for i in range(len(recs))]
            ax.bar(xs, heights, width, label=name, color=_color(role, j))
        peak = doc["machine"].get("hbm_peak_tbps")
        if peak and not flops:
            ax.axhline(peak, color="black", linestyle="--", linewidth=0.8, label=f"HBM peak {peak} TB/s")
        ax.set_xticks(range(len(recs)))
        ax.set_xticklabels([_label(r) for r in recs], rotation=35, ha="right", fontsize=7)
        ax.set_ylabel("TFLOP/s" if flops else "TB/s")
        gpu = doc["machine"].get("gpu") or "cpu"
        ax.set_title(f"{family} on {gpu} (torch {doc['versions'].get('torch')}, commit "
                     f"{(doc['git'].get('commit') or '?')[:8]})", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"{stem}-{family}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def pyplot():
    """matplotlib.pyplot drawing off-screen (Agg), or MatplotlibMissing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MatplotlibMissing("plotting needs matplotlib, which is not installed here: pip install matplotlib "
                                "(the results JSON is complete without it)") from None
    return plt


def _impl_names(recs) -> list[tuple[str, str]]:
    """(name, role) of every timed implementation, tilesafe first, then twin, torch, baselines."""
    order = {"tilesafe": 0, "twin": 1, "torch": 2, "baseline": 3}
    found = {}
    for r in recs:
        for name, impl in r["impls"].items():
            if "median_us" in impl:
                found.setdefault(name, impl["role"])
    return sorted(found.items(), key=lambda item: order.get(item[1], 9))


def _rate(impl, flops: bool) -> float:
    if impl is None or "median_us" not in impl:
        return 0.0
    return impl["tflops"] if flops and "tflops" in impl else impl["tbps"]


def _color(role: str, j: int) -> str:
    if role == "torch":
        return ["#1f77b4", "#2ca02c", "#9467bd", "#17becf"][j % 4]
    return COLORS.get(role, "#bcbd22")


def _label(rec) -> str:
    name = rec["name"]
    return name[len(rec["family"]):].strip() if name.startswith(rec["family"]) else name
