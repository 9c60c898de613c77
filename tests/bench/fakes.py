"""Fake clocks and results for the benchmark harness tests (no GPU, no timing)."""
from tilesafe.bench import report


class FakeTimer:
    """Runs every launch for real (on the CPU) and reports `us` per launch; records calls."""

    def __init__(self, us=100.0, by_launch=None, graph_fails=False):
        self.us, self.by_launch, self.graph_fails = us, by_launch, graph_fails
        self.calls = []            # ("eager", reps) / ("graph", per_graph, reps, capture)
        self.indices = []          # the set index of every launch, in order

    def _time(self, launch) -> float:
        return self.by_launch(launch) if self.by_launch else self.us

    def eager(self, launch, reps):
        self.calls.append(("eager", reps))
        for i in range(reps):
            self.indices.append(i)
            launch(i)
        return [self.us] * reps

    def graph(self, launch, per_graph, reps, capture):
        self.calls.append(("graph", per_graph, reps, capture))
        if self.graph_fails:
            raise RuntimeError("operation not permitted when stream is capturing")
        for i in range(per_graph):
            self.indices.append(i)
            launch(i)
        return [self.us] * reps


def impl(role, median_us, status="ok", **extra):
    out = {"role": role, "status": status, "median_us": median_us, "rel_error": 1e-3}
    out.update(extra)
    return out


def record(family, name, metric="bandwidth", nbytes=3_000_000_000, flops=0.0, **impls):
    rec = {"family": family, "name": name, "params": {}, "dtype": "bf16", "metric": metric, "bytes": nbytes,
           "flops": flops, "tolerance": 2e-2, "status": "ok", "impls": impls}
    for r in impls.values():
        if "median_us" in r and "tbps" not in r:
            r["tbps"] = r.get("bytes", nbytes) / (r["median_us"] * 1e-6) / 1e12
            if metric == "flops" and r["role"] != "baseline":
                r["tflops"] = flops / (r["median_us"] * 1e-6) / 1e12
    return rec


def results():
    """A small run: one add, two GEMMs, one flash (a missing twin), one GEMV."""
    return [
        record("add", "add bf16 512MiB", tilesafe=impl("tilesafe", 400.0), twin=impl("twin", 398.0),
               **{"torch.add": impl("torch", 396.0), "copy": impl("baseline", 380.0)}),
        record("gemm", "gemm bf16 4096", "flops", 100_000_000, 1.37e11, tilesafe=impl("tilesafe", 200.0),
               twin=impl("twin", 200.0), **{"torch.matmul": impl("torch", 190.0)}),
        record("gemm", "gemm bf16 8192", "flops", 400_000_000, 1.1e12, tilesafe=impl("tilesafe", 1500.0),
               twin=impl("twin", 1500.0), **{"torch.matmul": impl("torch", 1600.0)}),
        record("flash", "flash bf16 causal s=4096", "flops", 1e8, 1e12, tilesafe=impl("tilesafe", 3000.0),
               twin={"role": "twin", "status": "error", "error": "RuntimeError: boom"},
               **{"sdpa-flash": impl("torch", 3300.0), "sdpa-cudnn": impl("torch", 2000.0)}),
        record("gemv", "gemv bf16 4B o", nbytes=21_000_000, tilesafe=impl("tilesafe", 6.0), twin=impl("twin", 6.0),
               **{"F.linear": impl("torch", 9.0), "read": impl("baseline", 5.5, bytes=20_971_520)}),
    ]


def document(results_=None, slug="h200"):
    machine = {"gpu": "NVIDIA H200", "gpu_slug": slug}
    settings = {"kernels": ["add", "gemm", "flash", "gemv"], "quick": True, "dry_run": False}
    return report.document(results_ or results(), machine, {"torch": "2.11"}, {"commit": "abc123"}, settings, 12.0)

