"""Host µs per call of every library function on the Qwen3 path, beside raw Triton and torch.

    PYTHONPATH=src python benchmarks/host_overhead.py benchmarks/results/h200/host_overhead.json
    PYTHONPATH=src python benchmarks/host_overhead.py /tmp/h.json --device cpu --smoke   # CI: runs, not timed

For each call, measured side by side in one run (alternating rounds, benchmarks/host_timing.py):
the library call with torch tensors in (new tensor objects every call, as a user has them:
fresh views made before the clock starts over preallocated memory), the same with `out=`, the
raw Triton launches of the kernels that call runs (recorded once, replayed as `kernel[grid]`,
benchmarks/launch_recorder.py), those launches after allocating the result as a raw Triton
user would, and the torch op (or the composite a PyTorch user writes) eagerly and with `out=`.
Shapes are small, so the GPU keeps up and the clock measures the host; the GPU time of one
call (CUDA events, tilesafe.bench.cuda_timer) is reported beside it. Then a user kernel
launched with new tilesafe tensors every call beside the raw Triton launch of its compiled
kernel, and a Qwen3-4B-shaped batch-1 decode step (benchmarks/decode_step.py) in
tilesafe.kernels calls (one per operation: the issue's target row; beside it, the step with
the library's fused calls) against eager PyTorch. The JSON carries pass/fail fields for the
targets of issue 16; a PNG (plot_host_overhead.py) and a short table come last.
"""
import argparse
import dataclasses
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import tilesafe as ts
import tilesafe.kernels as tk
from decode_step import QWEN3_4B, SMOKE, FusedStep, TilesafeStep, TorchStep, caches, relative_error, weights
from host_timing import host_us_side_by_side
from launch_recorder import Recorder

RAW_RATIO_TARGET, ONE_KERNEL_US_TARGET, USER_RATIO_TARGET = 1.3, 25.0, 1.2


@ts.kernel
def scale_add(z: ts.Mut["T", ("B",)], x: ts.Ref["T", ("N",)], y: ts.Ref["T", ("N",)], s: float,
              T: ts.Const[ts.DType], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * s + ts.load_tile_like(y, z))


@dataclass
class Case:
    """One library function: `library(t)` etc. take a dict of fresh views of `tensors`."""
    name: str
    tensors: dict
    library: object
    library_out: object
    torch_op: object
    torch_out: object = None          # None: torch has no out= form of it


class Fresh:
    """New tensor objects for every call, made before the clock starts: `next()` returns the
    next dict of views (`t.view(t.shape)`: same memory, new object)."""

    def __init__(self, tensors: dict, count: int):
        self.pool = [{k: v.view(v.shape) for k, v in tensors.items()} for _ in range(count)]
        self.i = -1

    def next(self) -> dict:
        self.i += 1
        return self.pool[self.i]


def cases(s: dict, device, dtype) -> list[Case]:
    """The Qwen3 path. `s`: sizes (GPU: Qwen3-4B's, batch 1 decode; smoke: tiny)."""
    g = torch.Generator(device).manual_seed(0)
    r = lambda *shape, dt=dtype: torch.randn(shape, generator=g, device=device).to(dt)   # noqa: E731
    e = lambda *shape, dt=dtype: torch.empty(shape, device=device, dtype=dt)             # noqa: E731
    H, N, I, V = s["hidden"], s["qkv"], s["inter"], s["vocab"]
    heads, kvh, D, S, L = s["heads"], s["kv_heads"], s["head_dim"], s["max_seq"], s["context"]
    inv_freq = 1e6 ** (-torch.arange(0, D, 2, device=device, dtype=torch.float32) / D)

    def torch_rope(x, pos):             # the composite a PyTorch user writes (HF's rotate_half form)
        angle = pos[:, None].float() * inv_freq
        cos, sin = (torch.cat([f(angle), f(angle)], -1).to(x.dtype)[:, None] for f in (torch.cos, torch.sin))
        return x * cos + torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1) * sin

    def torch_rms_res(t):
        h = t["x"] + t["r"]
        return F.rms_norm(h, (H,), t["w"], 1e-6), h

    return [
        Case("linear M=1", dict(x=r(1, H), w=r(N, H), out=e(1, N)), lambda t: tk.linear(t["x"], t["w"]),
             lambda t: tk.linear(t["x"], t["w"], out=t["out"]), lambda t: F.linear(t["x"], t["w"]),
             lambda t: torch.mm(t["x"], t["w"].t(), out=t["out"])),
        Case(f"linear M={s['m']}", dict(x=r(s["m"], H), w=r(N, H), out=e(s["m"], N)),
             lambda t: tk.linear(t["x"], t["w"]), lambda t: tk.linear(t["x"], t["w"], out=t["out"]),
             lambda t: F.linear(t["x"], t["w"]), lambda t: torch.mm(t["x"], t["w"].t(), out=t["out"])),
        Case("matmul", dict(a=r(s["m"], H), b=r(H, H), out=e(s["m"], H)), lambda t: tk.matmul(t["a"], t["b"]),
             lambda t: tk.matmul(t["a"], t["b"], out=t["out"]), lambda t: t["a"] @ t["b"],
             lambda t: torch.matmul(t["a"], t["b"], out=t["out"])),
        Case("bmm", dict(a=r(heads, s["m"], D), b=r(heads, D, s["m"]), out=e(heads, s["m"], s["m"])),
             lambda t: tk.bmm(t["a"], t["b"]), lambda t: tk.bmm(t["a"], t["b"], out=t["out"]),
             lambda t: torch.bmm(t["a"], t["b"]), lambda t: torch.bmm(t["a"], t["b"], out=t["out"])),
        Case("rms_norm", dict(x=r(1, H), w=r(H), out=e(1, H)), lambda t: tk.rms_norm(t["x"], t["w"]),
             lambda t: tk.rms_norm(t["x"], t["w"], out=t["out"]), lambda t: F.rms_norm(t["x"], (H,), t["w"], 1e-6)),
        Case("rms_norm + residual", dict(x=r(1, H), r=r(1, H), w=r(H), out=e(1, H), h=e(1, H)),
             lambda t: tk.rms_norm(t["x"], t["w"], residual=t["r"]),
             lambda t: tk.rms_norm(t["x"], t["w"], residual=t["r"], out=t["out"], residual_out=t["h"]),
             torch_rms_res),
        Case("add", dict(x=r(1, H), y=r(1, H), out=e(1, H)), lambda t: tk.add(t["x"], t["y"]),
             lambda t: tk.add(t["x"], t["y"], out=t["out"]), lambda t: t["x"] + t["y"],
             lambda t: torch.add(t["x"], t["y"], out=t["out"])),
        Case("residual_add", dict(x=r(1, H), r=r(1, H), out=e(1, H)), lambda t: tk.residual_add(t["x"], t["r"]),
             lambda t: tk.residual_add(t["x"], t["r"], out=t["out"]), lambda t: t["x"] + t["r"],
             lambda t: torch.add(t["x"], t["r"], out=t["out"])),
        Case("silu_mul", dict(g=r(1, I), u=r(1, I), out=e(1, I)), lambda t: tk.silu_mul(t["g"], t["u"]),
             lambda t: tk.silu_mul(t["g"], t["u"], out=t["out"]), lambda t: F.silu(t["g"]) * t["u"],
             lambda t: torch.mul(F.silu(t["g"]), t["u"], out=t["out"])),
        Case("rope", dict(x=r(1, heads, D), pos=torch.tensor([L], device=device, dtype=torch.int32),
                          out=e(1, heads, D)),
             lambda t: tk.rope(t["x"], t["pos"]), lambda t: tk.rope(t["x"], t["pos"], out=t["out"]),
             lambda t: torch_rope(t["x"], t["pos"])),
        Case("embedding", dict(ids=torch.tensor([7], device=device, dtype=torch.int32), table=r(V, H), out=e(1, H)),
             lambda t: tk.embedding(t["ids"], t["table"]), lambda t: tk.embedding(t["ids"], t["table"], out=t["out"]),
             lambda t: F.embedding(t["ids"], t["table"]),
             lambda t: torch.index_select(t["table"], 0, t["ids"], out=t["out"])),
        Case("argmax", dict(x=r(1, V), out=e(1, dt=torch.int32), out64=e(1, dt=torch.int64)),
             lambda t: tk.argmax(t["x"]), lambda t: tk.argmax(t["x"], out=t["out"]), lambda t: t["x"].argmax(-1),
             lambda t: torch.argmax(t["x"], -1, out=t["out64"])),
        Case("softmax", dict(x=r(1, V), out=e(1, V)), lambda t: tk.softmax(t["x"]),
             lambda t: tk.softmax(t["x"], out=t["out"]), lambda t: torch.softmax(t["x"], -1)),
        Case("decode_attention", dict(q=r(heads, D), k=r(kvh, S, D), v=r(kvh, S, D), out=e(heads, D),
                                      n=torch.tensor([L], device=device, dtype=torch.int32)),
             lambda t: tk.decode_attention(t["q"], t["k"], t["v"], t["n"]),
             lambda t: tk.decode_attention(t["q"], t["k"], t["v"], t["n"], out=t["out"]),
             lambda t: F.scaled_dot_product_attention(t["q"][None, :, None], t["k"][None, :, :L],
                                                      t["v"][None, :, :L], enable_gqa=True)),
        Case("flash_attention", dict(q=r(1, heads, s["m"], D), k=r(1, kvh, s["m"], D), v=r(1, kvh, s["m"], D),
                                     out=e(1, heads, s["m"], D)),
             lambda t: tk.flash_attention(t["q"], t["k"], t["v"], causal=True),
             lambda t: tk.flash_attention(t["q"], t["k"], t["v"], causal=True, out=t["out"]),
             lambda t: F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True, enable_gqa=True)),
    ]


def sizes(smoke: bool) -> dict:
    d = SMOKE if smoke else QWEN3_4B
    qkv = (d.heads + 2 * d.kv_heads) * d.head_dim
    return dict(hidden=d.hidden, qkv=qkv, inter=d.inter, vocab=d.vocab, heads=d.heads, kv_heads=d.kv_heads,
                head_dim=d.head_dim, max_seq=d.max_seq, context=d.context, m=8 if smoke else 128)


class Clock:
    """Host time side by side (with fresh views per call) and, on a GPU, the GPU time."""

    def __init__(self, device: str, warmup: int, calls: int, repeats: int, gpu_reps: int):
        self.device, self.warmup, self.calls, self.repeats, self.gpu_reps = device, warmup, calls, repeats, gpu_reps
        self.sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        self.timer = None
        if device == "cuda":
            from tilesafe.bench.cuda_timer import CudaTimer
            self.timer = CudaTimer()

    def host(self, fns: dict, tensors: dict) -> dict:
        """fns: name -> f(views) (fresh views each call), or a zero-argument function."""
        count = self.warmup + self.calls * self.repeats
        bound = {}
        for name, f in fns.items():
            if getattr(f, "takes_views", True):
                fresh = Fresh(tensors, count)
                bound[name] = (lambda f=f, fresh=fresh: f(fresh.next()))
            else:
                bound[name] = f
        return host_us_side_by_side(bound, self.calls, self.repeats, self.warmup, self.sync)

    def gpu(self, f, tensors: dict) -> float | None:
        if self.timer is None:
            return None
        return statistics.median(self.timer.eager(lambda i: f(tensors), self.gpu_reps))


def no_views(f):
    f.takes_views = False
    return f


def measure_case(c: Case, clock: Clock, rec: Recorder) -> dict:
    t, started = c.tensors, time.perf_counter()
    for f in (c.library, c.library_out, c.torch_op, c.torch_out):
        if f is not None:
            f(t)                                      # compile, fill the caches
    clock.sync()
    with rec.recording() as launches:
        result = c.library(t)
    clock.sync()
    results = result if isinstance(result, tuple) else (result,)
    replay = rec.replayer(launches)
    shapes = [(x.shape, x.dtype) for x in results]

    def replay_allocating():                          # a raw Triton user allocates the result too
        for shape, dtype in shapes:
            torch.empty(shape, dtype=dtype, device=clock.device)
        replay()
    fns = {"tilesafe": c.library, "tilesafe_out": c.library_out, "torch": c.torch_op}
    if c.torch_out is not None:
        fns["torch_out"] = c.torch_out
    if launches:
        fns["raw_triton"], fns["raw_triton_alloc"] = no_views(replay), no_views(replay_allocating)
    host = clock.host(fns, t)
    row = dict(name=c.name, shapes={k: list(v.shape) for k, v in t.items()}, kernels=len(launches),
               kernel_names=[getattr(r.fn, "__name__", str(r.fn)) for r in launches],
               host_us={k: round(v, 2) for k, v in host.items()},
               gpu_us={"tilesafe": clock.gpu(c.library_out, t), "torch": clock.gpu(c.torch_op, t)})
    row["targets"] = call_targets(row)
    row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def call_targets(row: dict) -> dict:
    """<= 1.3x the raw launches of the same kernels (out=: against the launches; eager:
    against the launches after allocating the result), <= 25 µs for one-kernel calls."""
    h = row["host_us"]
    if "raw_triton" not in h:
        return dict(recorded=False)
    out_ratio, eager_ratio = h["tilesafe_out"] / h["raw_triton"], h["tilesafe"] / h["raw_triton_alloc"]
    t = dict(recorded=True, out_over_raw=round(out_ratio, 3), eager_over_raw_alloc=round(eager_ratio, 3),
             le_1_3x_raw=out_ratio <= RAW_RATIO_TARGET and eager_ratio <= RAW_RATIO_TARGET)
    if row["kernels"] == 1:
        t["le_25us"] = max(h["tilesafe"], h["tilesafe_out"]) <= ONE_KERNEL_US_TARGET
    return t


def measure_user_kernel(device, clock: Clock, rec: Recorder, n: int) -> dict:
    """A user kernel launched with new tilesafe tensors each call (from torch tensors, as a
    user's code has them) beside the raw Triton launch of the same compiled kernel."""
    # f32: `* s` with a Python float is f32 arithmetic, which the language will not mix with bf16
    # implicitly; host time does not depend on the element type.
    x, y, z = (torch.randn(n, device=device, dtype=torch.float32) for _ in range(3))
    tile = (min(1024, n),)

    def fresh_call(t):
        p = ts.from_torch(t["z"]).partition(tile)
        scale_add(p, ts.from_torch(t["x"]), ts.from_torch(t["y"]), 0.5)
        p.unpartition()
    z2 = torch.empty_like(z)                          # the reused call's own output (z is lent per call)
    tx, ty, tp = ts.from_torch(x), ts.from_torch(y), ts.from_torch(z2).partition(tile)
    reused = no_views(lambda: scale_add(tp, tx, ty, 0.5))
    # The cheaper form beside the row: the output partitioned once, the caller's torch
    # tensors (new objects every call) passed straight in.
    tq = ts.from_torch(torch.empty_like(z)).partition(tile)

    def torch_in(t):
        scale_add(tq, t["x"], t["y"], 0.5)
    fresh_call(dict(x=x, y=y, z=z))
    reused()
    clock.sync()
    with rec.recording() as launches:
        reused()
    clock.sync()
    fns = {"tilesafe_fresh": fresh_call, "tilesafe_reused": reused, "tilesafe_torch_in": torch_in}
    if launches:
        fns["raw_triton"] = no_views(rec.replayer(launches))
    host = clock.host(fns, dict(x=x, y=y, z=z))
    tp.unpartition()
    tq.unpartition()
    out = dict(n=n, kernels=len(launches), host_us={k: round(v, 2) for k, v in host.items()})
    if launches:
        out["fresh_over_raw"] = round(host["tilesafe_fresh"] / host["raw_triton"], 3)
        out["le_1_2x_raw"] = out["fresh_over_raw"] <= USER_RATIO_TARGET
        out["torch_in_over_raw"] = round(host["tilesafe_torch_in"] / host["raw_triton"], 3)
    return out


def measure_decode(device, dtype, smoke: bool, steps: int, rounds: int) -> dict:
    """The issue's step (TilesafeStep: one library call per operation; its row is the target's)
    and beside it the step with the library's fused calls (FusedStep), against eager PyTorch;
    each with its own KV caches (the steps write them), all from the same weights."""
    d = SMOKE if smoke else QWEN3_4B
    w = weights(d, device, dtype)
    ours, fused, theirs = (cls(d, w, caches(d, device, dtype), device, dtype)
                           for cls in (TilesafeStep, FusedStep, TorchStep))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    expected = theirs()
    err = relative_error(ours(), expected)            # the first step compiles every kernel
    token = fused()
    fused_err = relative_error(fused.logits(), expected)
    token_ok = int(token.item()) == int(expected.float().argmax(-1).item())
    sync()
    ms = {"tilesafe": [], "tilesafe_fused": [], "torch": []}
    for _ in range(rounds):
        for name, step in (("tilesafe", ours), ("tilesafe_fused", fused), ("torch", theirs)):
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            sync()                                     # once a round: the step's host and GPU time
            ms[name].append((time.perf_counter() - t0) / steps * 1e3)
    best = {k: statistics.median(v) for k, v in ms.items()}
    return dict(dims=dataclasses.asdict(d),
                ms_per_step={k: round(v, 3) for k, v in best.items()},
                tokens_per_s={k: round(1e3 / v, 1) for k, v in best.items()},
                logits_relative_error=err, le_torch=best["tilesafe"] <= best["torch"],
                fused=dict(calls_per_layer=7, logits_relative_error=fused_err, next_token_matches_torch=token_ok,
                           le_torch=best["tilesafe_fused"] <= best["torch"]))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the JSON to write (a PNG is written beside it)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--backend", help="default: triton on cuda, reference on cpu (no Triton launches to replay; "
                                      "triton-interpreter records them)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes and a few calls: checks the script runs")
    ap.add_argument("--cases", help="comma-separated call names to run (default: all)")
    ap.add_argument("--skip-decode", action="store_true", help="leave out the decode step")
    a = ap.parse_args(argv)
    started = time.perf_counter()
    device = a.device
    backend = a.backend or ("triton" if device == "cuda" else "reference")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32   # the interpreter computes bf16 wrongly
    if a.smoke:
        clock = Clock(device, warmup=1, calls=2, repeats=1, gpu_reps=3)
        steps, rounds = 1, 1
    else:
        clock = Clock(device, warmup=20, calls=100, repeats=5, gpu_reps=20)
        steps, rounds = 5, 3
    with Recorder().installed() as rec, ts.backend(backend), torch.no_grad():
        chosen = [c for c in cases(sizes(a.smoke), device, dtype) if a.cases is None or c.name in a.cases.split(",")]
        rows = [measure_case(c, clock, rec) for c in chosen]
        user = measure_user_kernel(device, clock, rec, 64 if a.smoke else 4096)
        decode = None if a.skip_decode else measure_decode(device, dtype, a.smoke, steps, rounds)
    result = dict(device=torch.cuda.get_device_name() if device == "cuda" else "cpu", backend=backend,
                  dtype=str(dtype), torch=torch.__version__, smoke=a.smoke,
                  timing=dict(warmup=clock.warmup, calls=clock.calls, repeats=clock.repeats),
                  calls=rows, user_kernel=user, decode_step=decode)
    result["targets"] = summary_targets(rows, user, decode)
    result["seconds"] = round(time.perf_counter() - started, 1)
    path = Path(a.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str))
    try:
        import plot_host_overhead
        print(plot_host_overhead.main(str(path)))
    except ImportError as e:                          # matplotlib missing: the JSON is the result
        print(f"no plot: {e}")
    print(table(result))
    return result


def summary_targets(rows, user, decode) -> dict:
    recorded = [r["targets"] for r in rows if r["targets"]["recorded"]]
    one = [t["le_25us"] for t in recorded if "le_25us" in t]
    t = dict(calls_recorded=f"{len(recorded)}/{len(rows)}",
             library_calls_le_1_3x_raw=bool(recorded) and all(x["le_1_3x_raw"] for x in recorded),
             one_kernel_calls_le_25us=bool(one) and all(one),
             user_kernel_le_1_2x_raw=user.get("le_1_2x_raw", False),
             decode_step_le_torch=decode is not None and decode["le_torch"])
    t["all"] = all(v for k, v in t.items() if k != "calls_recorded")
    return t


def table(r: dict) -> str:
    fmt = lambda v: "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))   # noqa: E731
    lines = [f"host µs per call on {r['device']} ({r['backend']}, {r['dtype']}); GPU µs of the out= call",
             f"{'call':22}{'k':>3}{'tilesafe':>10}{'out=':>9}{'raw':>9}{'raw+alloc':>10}{'torch':>9}{'torch out':>10}"
             f"{'gpu':>8}  ok"]
    for row in r["calls"]:
        h = row["host_us"]
        ok = row["targets"].get("le_1_3x_raw")
        lines.append(f"{row['name']:22}{row['kernels']:>3}{fmt(h.get('tilesafe')):>10}{fmt(h.get('tilesafe_out')):>9}"
                     f"{fmt(h.get('raw_triton')):>9}{fmt(h.get('raw_triton_alloc')):>10}{fmt(h.get('torch')):>9}"
                     f"{fmt(h.get('torch_out')):>10}{fmt(row['gpu_us']['tilesafe']):>8}  {fmt(ok)}")
    u, d = r["user_kernel"], r["decode_step"]
    uh = u["host_us"]
    lines.append(f"user kernel: fresh tensors {fmt(uh.get('tilesafe_fresh'))} µs, reused "
                 f"{fmt(uh.get('tilesafe_reused'))} µs, torch tensors in {fmt(uh.get('tilesafe_torch_in'))} µs, "
                 f"raw Triton {fmt(uh.get('raw_triton'))} µs")
    if d is not None:
        lines.append(f"decode step: tilesafe {d['ms_per_step']['tilesafe']:.2f} ms, fused calls "
                     f"{d['ms_per_step']['tilesafe_fused']:.2f} ms, eager torch {d['ms_per_step']['torch']:.2f} ms "
                     f"(logits rel. error {d['logits_relative_error']:.1e}, fused "
                     f"{d['fused']['logits_relative_error']:.1e})")
    lines.append("targets: " + ", ".join(f"{k}={v}" for k, v in r["targets"].items()) + f"; {r['seconds']} s")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
