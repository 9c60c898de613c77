"""The two-launch library calls that pass results through the device's scratch (kernels/scratch.py),
on the CPU stand-in of the GPU path: host µs, function calls and Python bytecodes per call
(host_path_hits.us_and_calls) with the written-out hit taking the scratch
(kernels/call_hits_unrolled.py) and without it (CallHit's loops, `_walk`, every call: the path
before session 20), beside decode_attention's two-launch hit.

The calls are the GPU's forms at CPU sizes: `softmax` of a row past the CPU defaults' row_max
(statistics per chunk, then the pass), `matmul` with its CPU default made a three-way split-K
(partials, then their sum), eagerly and with `out=`.

    cd benchmarks && PYTHONPATH=../src python probes/scratch_hit_probe.py
"""
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import tilesafe as ts                                                      # noqa: E402
import tilesafe.kernels as tk                                              # noqa: E402
from host_path_hits import forget_plans, gpu_stand_in, us_and_calls       # noqa: E402
from profile_host_path import stub_device_work                             # noqa: E402
from tilesafe.kernels import call_hits, call_recording, configs           # noqa: E402


def cases() -> dict:
    r = torch.randn
    return {
        "softmax 1x4096": (lambda t: tk.softmax(t["x"]), dict(x=r(1, 4096))),
        "softmax 1x4096 (out=)": (lambda t: tk.softmax(t["x"], out=t["o"]), dict(x=r(1, 4096), o=r(1, 4096))),
        "matmul split-K 64x4096@4096x32": (lambda t: tk.matmul(t["a"], t["b"]), dict(a=r(64, 4096), b=r(4096, 32))),
        "matmul split-K (out=)": (lambda t: tk.matmul(t["a"], t["b"], out=t["o"]),
                                  dict(a=r(64, 4096), b=r(4096, 32), o=r(64, 32))),
        "decode_attention": (lambda t: tk.decode_attention(t["q"], t["k"], t["v"], t["n"]),
                             dict(q=r(4, 16), k=r(2, 16, 16), v=r(2, 16, 16), n=torch.tensor([8], dtype=torch.int32))),
    }


def main() -> None:
    stub_device_work()
    gpu_stand_in()
    configs.CPU_DEFAULTS["matmul"] = dict(configs.CPU_DEFAULTS["matmul"], split_k=3)
    written_out = call_hits.written_out

    def without_scratch(hit, places):      # the written-out form as it was: none for a scratch root
        if any(kind == call_recording.SCRATCH for kind, _ in hit.plan.roots):
            return None
        return written_out(hit, places)
    rows = []
    with ts.backend("reference"), torch.no_grad():
        for name, (fn, tensors) in cases().items():
            measured = []
            for form in (without_scratch, written_out):
                call_hits.written_out = form
                forget_plans()
                try:
                    measured.append(us_and_calls(fn, tensors, 100, 5))
                except Exception as e:             # a probe prints its failures and goes on
                    print(f"{name}: {type(e).__name__}: {e}", flush=True)
                    measured.append((float("nan"),) * 4)
            rows.append((name, *measured))
        call_hits.written_out = written_out
    print(f"{'call':32s} {'before us':>10s} {'calls':>6s} {'ops':>6s} {'after us':>9s} {'calls':>6s} {'ops':>6s}")
    for name, (b_us, b_n, _, b_ops), (a_us, a_n, _, a_ops) in rows:
        print(f"{name:32s} {b_us:10.1f} {b_n:6.0f} {b_ops:6.0f} {a_us:9.1f} {a_n:6.0f} {a_ops:6.0f}")


if __name__ == "__main__":
    main()
