"""Render benchmarks/results/<gpu>/launch_overhead.json as a PNG beside it (any machine).

`python benchmarks/plot_launch_overhead.py benchmarks/results/h200/launch_overhead.json`
"""
import json
import sys
from pathlib import Path


def main(path: str) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = json.loads(Path(path).read_text())
    labels = ["raw Triton\nkernel[grid]", "tilesafe\nsafe launch", "tilesafe\nin ts.graph replay"]
    values = [r["raw_triton_launch_us"], r["safe_launch_us"], r["graph_replay_us_per_kernel"]]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    bars = ax.bar(labels, values, color=["#7f7f7f", "#d62728", "#ff9896"])
    ax.bar_label(bars, labels=[f"{v:.1f} µs" for v in values])
    ax.set_ylabel("host µs per launch")
    ax.set_title(f"Launch overhead on {r['gpu']} (safe / raw = {r['ratio_safe_over_raw']:.2f}x)")
    ax.set_ylim(0, max(values) * 1.25)
    fig.tight_layout()
    out = Path(path).with_suffix(".png")
    fig.savefig(out, dpi=120)
    return out


if __name__ == "__main__":
    print(main(sys.argv[1]))
