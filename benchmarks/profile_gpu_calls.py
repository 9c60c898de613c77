"""cProfile of library calls as a user makes them on the GPU (fresh torch views each call, no stubs):
where the host time of an eager call goes on the real `triton` backend, CUDA events included.

    cd benchmarks && PYTHONPATH=../src python profile_gpu_calls.py OUT.txt [--cases add,softmax] [--calls 300]
"""
import argparse
import cProfile
import io
import pstats

import torch

import tilesafe as ts
from host_overhead import Fresh, cases, sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--cases", default="add,linear M=1,softmax,rms_norm + residual,decode_attention")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--top", type=int, default=35)
    a = ap.parse_args()
    report = io.StringIO()
    with ts.backend("triton"), torch.no_grad():
        for c in cases(sizes(False), "cuda", torch.bfloat16):
            if c.name not in a.cases.split(","):
                continue
            fresh = Fresh(c.tensors, 20 + a.calls)
            for _ in range(20):
                c.library(fresh.next())
            torch.cuda.synchronize()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(a.calls):
                c.library(fresh.next())
            prof.disable()
            torch.cuda.synchronize()
            for key in ("tottime", "cumulative"):
                print(f"==== {c.name}: {a.calls} eager calls, by {key}", file=report)
                pstats.Stats(prof, stream=report).sort_stats(key).print_stats(a.top)
    open(a.out, "w").write(report.getvalue())
    print(report.getvalue()[:3000])


if __name__ == "__main__":
    main()
