"""How well the config model ranks configs the H200 tuner timed (the training shapes).

    PYTHONPATH=src python3 benchmarks/config_model_fit.py [-v]     # any machine, no GPU

For each GEMM class (m > 16, `matmul`) and weight-streaming class (m <= 16, `linear`) in
benchmarks/results/h200/tune-candidates*.json with one workload, the timed candidates are
ranked by `config_model.predict_us`; printed per family: the measured best over the time of
the model's first pick, and over the best of its first four kinds (what the first-use
autotune times), as geomean and worst. 1.0 is a perfect pick. The constants of
`tilesafe/kernels/gemm_model.py` were fitted to these scores; the random-shape benchmark
(`python -m tilesafe.bench --random-shapes`) measures shapes outside them.
"""
from __future__ import annotations

import glob
import json
import math
import re
import sys
from pathlib import Path

from tilesafe.kernels import config_model as cm
from tilesafe.kernels import configs
from tilesafe.kernels import gemm_model as gm

RESULTS = Path(__file__).resolve().parent / "results" / "h200"


def runs(doc: dict):
    """The tuning runs of one candidates file (a run, or {path: run} for merged files)."""
    if "groups" in doc:
        yield doc
    for v in doc.values():
        if isinstance(v, dict) and "groups" in v:
            yield v


def shape_of(work: str):
    """The product a workload's name describes: "... M=128 (2560x4096)" or "gemm 1024^3"."""
    if m := re.search(r"M=(\d+) \((\d+)x(\d+)\)", work):
        return cm.Gemm(*map(int, m.groups()))
    if m := re.search(r"gemm (\d+)\^3", work):
        return cm.Gemm(*(int(m.group(1)),) * 3)
    return None


def classes() -> list[tuple[str, cm.Gemm, list]]:
    """(family, shape, [(measured us, whole config)]) of every one-workload GEMM class."""
    out, seen = [], set()
    for path in sorted(glob.glob(str(RESULTS / "tune-candidates*.json"))):
        for run in runs(json.loads(Path(path).read_text())):
            for g in run["groups"]:
                shape = shape_of(g["works"][0]) if len(g["works"]) == 1 else None
                if g["family"] not in ("matmul", "linear") or shape is None or (g["family"], shape) in seen:
                    continue
                seen.add((g["family"], shape))
                timed = [(c["score_us"], dict(configs.GPU_DEFAULTS[g["family"]], **c["config"]))
                         for c in g["candidates"] if "error" not in c and "score_us" in c]
                if len(timed) >= 3:
                    out.append((g["family"], shape, timed))
    return out


def kind(c: dict) -> tuple:
    return c.get("block_m"), c.get("block_n"), (c.get("split_k") or 1) > 1, c.get("tail_split")


def picks(shape, timed) -> tuple[float | None, float]:
    """(best / first pick, best / best of the first four kinds) for one class; the first is
    None where a rule picks a config the tuner never timed (the library runs that pick, so
    the model's ranking of the timed ones would score a choice it does not make)."""
    best = min(t for t, _ in timed)
    ranked = sorted(timed, key=lambda tc: cm.predict_us(shape, tc[1], cm.H200))
    rule = cm.choice(shape, cm.H200)          # a rule's pick (16 < m <= 128) comes first, as in the library
    ranked.sort(key=lambda tc: not all(tc[1].get(k) == v for k, v in rule.items()))
    ruled = gm.streaming_choice(shape, cm.H200) is not None
    timed_rule = all(ranked[0][1].get(k) == v for k, v in rule.items())
    kinds, four = set(), []
    for t, c in ranked:
        if kind(c) not in kinds and len(four) < 4:
            kinds.add(kind(c))
            four.append(t)
    return (best / ranked[0][0] if timed_rule or not ruled else None), best / min(four)


def geomean(xs) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> int:
    rows: dict[str, list] = {}
    for family, shape, timed in classes():
        rows.setdefault(family, []).append((shape, *picks(shape, timed)))
    for family, rs in rows.items():
        geo = [geomean([r[i] for r in rs if r[i] is not None]) for i in (1, 2)]
        print(f"{family}: {len(rs)} classes; best / first pick: geomean {geo[0]:.3f}, worst "
              f"{min(r[1] for r in rs if r[1] is not None):.3f} (rule picks never timed: "
              f"{sum(r[1] is None for r in rs)}); best / best of four kinds: geomean {geo[1]:.3f}, worst "
              f"{min(r[2] for r in rs):.3f}")
        if "-v" in sys.argv:
            for shape, one, four in rs:
                print(f"    {shape.m:>6} x {shape.n:>6} x {shape.k:>6}  {one or 0:.3f}  {four:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
