"""What every probe does once its buffers exist: check each implementation on set 0, time
the ones that passed side by side with the bench's timer (rotated sets, CUDA graphs for
short kernels, median), and print the ratios against a baseline, best first."""
import functools


@functools.lru_cache(maxsize=1)
def _timer():
    from tilesafe.bench.cuda_timer import CudaTimer
    return CudaTimer()                  # calibrates the GPU clock once per process


def measure(impls: dict, sets: int, check, base: str, ratio: str, policy=None) -> dict:
    """impls: {name: (launch(i), capture)}; check(name, launch) runs it on set 0 and raises
    when its result is wrong. Returns {name: {"us": median, ratio: base's time / its time}},
    or {name: {"error": ...}} for one that failed its check or its timing. `policy`: the
    bench's timing policy unless given."""
    from tilesafe.bench.timing import Policy, measure_side_by_side
    launches, out = {}, {}
    for name, (launch, capture) in impls.items():
        try:
            check(name, launch)
            launches[name] = (launch, sets, capture)
        except Exception as e:                       # noqa: BLE001 - reported in the table
            out[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
    times = measure_side_by_side(_timer(), launches, policy or Policy())
    ref = times[base].median_us
    for name, t in times.items():
        out[name] = {"error": repr(t)[:200]} if isinstance(t, Exception) else {"us": t.median_us,
                                                                               ratio: ref / t.median_us}
    return out


def result_check(out, ref, tol: float = 2e-2, error: str = "norm", runs: int = 1, unchecked=()):
    """A `check` for `measure`: poison `out` (set 0's output), run the launch on set 0 `runs`
    times (twice: counters the launch resets must be back at zero), and raise unless the
    relative error against `ref`, in norm (`error="norm"`) or in the largest element
    (`"max"`), is below `tol`. Implementations named with an `unchecked` prefix (copies,
    torch ops that write elsewhere) only run."""
    def check(name, launch):
        out.fill_(float("nan"))
        for _ in range(runs):
            launch(0)
        if name.startswith(tuple(unchecked)):
            return
        diff = out.float() - ref
        err = (diff.norm() / ref.norm() if error == "norm" else diff.abs().max() / ref.abs().max()).item()
        if not err < tol:
            raise AssertionError(f"rel error {err}")
    return check


def show(title: str, entry: dict, ratio: str, width: int = 34) -> None:
    print(f"\n{title}")
    for name, v in sorted(entry.items(), key=lambda kv: -kv[1].get(ratio, 0)):
        print(f"   {name:{width}} " + (f"{v['us']:8.2f} us {v[ratio]:.3f}" if "us" in v else v["error"][:150]))


def vs_fastest_sdpa(entry: dict, prefix: str = "unchecked sdpa"):
    """Each timed implementation's `vs_fastest_sdpa` (the fastest SDPA backend's µs over its µs);
    returns that fastest µs, or None where no SDPA backend ran."""
    fastest = min((v["us"] for key, v in entry.items() if key.startswith(prefix) and "us" in v), default=None)
    if fastest:
        for v in entry.values():
            if "us" in v:
                v["vs_fastest_sdpa"] = fastest / v["us"]
    return fastest


def predicted_us(cm, shape, cfg, gpu):
    """The config model's time for `cfg` on `shape`, or None where it has none (a probe records what it can)."""
    try:
        return round(cm.predict_us(shape, cfg, gpu), 3)
    except Exception:                                # noqa: BLE001
        return None
