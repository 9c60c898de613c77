"""GPU probe: host µs per eager SIMT launch with fresh torch tensors (issue 18's <= 20 µs target).

Side by side in one run (benchmarks/host_timing.py: rows of calls with the clock around the row,
the device synchronised after it): safe SIMT vector add of 1M f32 with the same, fresh and
rotating torch tensors and with tilesafe tensors; a 3-argument kernel (out, x, a float) with a
fresh output; torch.add; the bare driver launch through tilesafe's gpu_launch (cuda.bindings) and
through a ctypes call of libcuda's cuLaunchKernel; torch's current-stream lookups. Outputs are checked
against torch after the timing, and cProfile counts the Python calls of one eager launch.

    PYTHONPATH=src python benchmarks/probes/eager_simt_host.py [OUT_DIR]
"""
import cProfile
import ctypes
import json
import os
import pstats
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))   # benchmarks/

N = 1 << 20


def main(out_dir: str) -> None:
    import torch

    import tilesafe as ts
    from host_timing import host_us_side_by_side
    from tilesafe import simt
    from tilesafe.simt import gpu_launch
    from tilesafe.simt.examples.vector_add import vector_add

    @simt.kernel(contract=simt.Contract(block=(256,)))
    def scale(out: simt.Disjoint[ts.f32, ("N",)], x: simt.Ref[ts.f32, ("N",)], a: float, N: int):
        for p in out.permits(simt.per_thread()):
            out[p] = a * x[p]

    x, y, out = torch.randn(N, device="cuda"), torch.randn(N, device="cuda"), torch.empty(N, device="cuda")
    tx, ty, tout = ts.from_torch(x), ts.from_torch(y), ts.from_torch(torch.empty(N, device="cuda"))
    sets = [(torch.empty(N, device="cuda"), torch.randn(N, device="cuda"), torch.randn(N, device="cuda"))
            for _ in range(80)]     # more layouts-by-address than a data_ptr-keyed cache holds (64)
    turn = [0]

    def rotating():
        o, a, b = sets[turn[0] % 80]
        turn[0] += 1
        return vector_add(o, a, b)

    vector_add(out, x, y).sync()
    vector_add(out, x, y).sync()
    scale(torch.empty_like(x), x, 2.0).sync()
    plan = next(p for p in vector_add.plans.values() if getattr(p, "compiled", None) is not None)
    vector_add(out, x, y).sync()
    # the bare launches' own parameters: out, x, y's addresses (the plan's array is rewritten by every launch)
    params = gpu_launch.Params([type(v)(v.value) for v in plan.args.values])
    handle = torch.cuda.current_stream().cuda_stream
    libcuda = ctypes.CDLL("libcuda.so.1")
    raw_launch = libcuda.cuLaunchKernel
    raw_launch.restype = ctypes.c_int
    raw_launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    fn = int(plan.compiled.kernel.handle)
    gx, gy, gz, bx, by, bz, shared = plan.config

    def ctypes_launch():
        raw_launch(fn, gx, gy, gz, bx, by, bz, shared, handle, params.address, None)

    fns = {
        "torch_add_out": lambda: torch.add(x, y, out=out),
        "torch_add_fresh_output": lambda: torch.add(x, y),
        "torch_empty_like": lambda: torch.empty_like(x),
        "torch_current_stream": lambda: torch.cuda.current_stream(),
        "torch_raw_stream": lambda: torch._C._cuda_getCurrentRawStream(0),
        "driver_launch_gpu_launch": lambda: gpu_launch.launch(plan.compiled, plan.config, handle, params),
        "driver_launch_ctypes": ctypes_launch,
        "safe_same_torch_tensors": lambda: vector_add(out, x, y),
        "safe_fresh_output": lambda: vector_add(torch.empty_like(x), x, y),
        "safe_rotating_80_tensor_sets": rotating,
        "safe_ts_tensors": lambda: vector_add(tout, tx, ty),
        "safe_3arg_fresh_output": lambda: scale(torch.empty_like(x), x, 2.0),
    }
    host = {}
    for name, f in fns.items():          # one failing case must not take the others down
        try:
            f()
            torch.cuda.synchronize()
        except Exception:
            traceback.print_exc()
            host[name] = None
    good = {k: v for k, v in fns.items() if k not in host}
    host.update(host_us_side_by_side(good, calls=1000, repeats=5, warmup=100))
    checks = {}
    for name, run in (("safe_fresh_output", lambda o: vector_add(o, x, y).sync()),
                      ("safe_rotating", lambda o: vector_add(o, x, y).sync()),
                      ("driver_launch_ctypes", None)):
        try:
            o = torch.full((N,), float("nan"), device="cuda")
            if run is None:                 # the bare launch's parameters hold out, x and y
                out.fill_(float("nan"))
                ctypes_launch()
                torch.cuda.synchronize()
                o = out
            else:
                run(o)
            checks[name] = bool(torch.equal(o, x + y))
        except Exception as e:
            checks[name] = f"error: {e!r}"[:200]
    try:
        o = torch.full((N,), float("nan"), device="cuda")
        scale(o, x, 2.0).sync()
        checks["safe_3arg"] = bool(torch.equal(o, 2.0 * x))
        for o, a, b in sets[:3]:
            o.fill_(float("nan"))
            vector_add(o, a, b).sync()
            checks.setdefault("rotating_sets", True)
            checks["rotating_sets"] = checks["rotating_sets"] and bool(torch.equal(o, a + b))
    except Exception as e:
        checks["safe_3arg"] = f"error: {e!r}"[:200]

    calls = {}
    for name in ("safe_fresh_output", "safe_same_torch_tensors"):
        try:
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(200):
                fns[name]()
            pr.disable()
            torch.cuda.synchronize()
            st = pstats.Stats(pr)
            calls[name] = st.total_calls / 200
            if name == "safe_fresh_output":
                st.sort_stats("tottime").print_stats(12)
        except Exception as e:
            calls[name] = f"error: {e!r}"[:200]

    doc = {"device": torch.cuda.get_device_name(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "n": N, "host_us": host, "checks": checks, "python_calls_per_launch": calls,
           "plans": len(vector_add.plans)}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "eager_simt_host.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(f"{'case':34s} {'host µs/call':>12s}")
    for k, v in host.items():
        print(f"{k:34s} {'error' if v is None else f'{v:12.2f}'}")
    print("checks:", json.dumps(checks))
    print("python calls per launch:", json.dumps(calls), "plans:", len(vector_add.plans))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.environ.get("OUT", "/tmp"), "simth"))
