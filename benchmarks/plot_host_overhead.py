"""Render host_overhead.json (benchmarks/host_overhead.py) as a PNG beside it (any machine with matplotlib).

`python benchmarks/plot_host_overhead.py benchmarks/results/h200/host_overhead.json`
"""
import json
import sys
from pathlib import Path

SERIES = (("tilesafe", "tilesafe call", "#d62728"), ("tilesafe_out", "tilesafe call, out=", "#ff9896"),
          ("raw_triton", "raw Triton launches of its kernels", "#7f7f7f"), ("torch", "torch op", "#1f77b4"))


def main(path: str) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = json.loads(Path(path).read_text())
    rows = r["calls"]
    fig, (ax, side) = plt.subplots(1, 2, figsize=(11, 0.45 * len(rows) + 2.2), width_ratios=(3, 1))
    height = 0.8 / len(SERIES)
    for i, (key, label, color) in enumerate(SERIES):
        ys = [j + i * height for j in range(len(rows))]
        ax.barh(ys, [row["host_us"].get(key, 0.0) for row in rows], height, label=label, color=color)
    ax.set_yticks([j + 0.4 - height / 2 for j in range(len(rows))],
                  [f"{row['name']} ({row['kernels']}k)" for row in rows])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(25.0, color="black", linewidth=0.8, linestyle=":", label="25 µs")
    ax.set_xlabel("host µs per call (log scale)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"Host time per call on {r['device']} ({r['backend']})")
    d = r.get("decode_step")
    if d is not None:
        ms = d["ms_per_step"]
        names, values, colors = ["tilesafe\n.kernels"], [ms["tilesafe"]], ["#d62728"]
        if "tilesafe_fused" in ms:               # the step with the library's fused calls (later JSONs)
            names, values, colors = names + ["fused\ncalls"], values + [ms["tilesafe_fused"]], colors + ["#ff9896"]
        names, values, colors = names + ["eager\nPyTorch"], values + [ms["torch"]], colors + ["#1f77b4"]
        bars = side.bar(names, values, color=colors)
        side.bar_label(bars, labels=[f"{v:.1f} ms" for v in values])
        side.set_ylabel("ms per decode step")
        side.set_title(f"{d['dims']['layers']}-layer decode step, batch 1")
    else:
        side.axis("off")
    fig.tight_layout()
    out = Path(path).with_suffix(".png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(main(sys.argv[1]))
