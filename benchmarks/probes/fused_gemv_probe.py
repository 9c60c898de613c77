"""Probe (issue 17): the engine's batch-1 decode GEMVs, fused forms included, against the
weight-read rate, and the configs that might stream them faster.

The H200 ran the Qwen3-32B step's down projection (silu_mul_linear with the residual, 5120 x
25600) at 2.85 TB/s where its plain GEMV (the same weight, the same tuned config) reaches ~4.1
and the gate/up GEMV 4.48. Per Qwen3 shape (0.6B, 4B, 8B, 14B, 32B, bf16, M = 1) and role —
  qkv      rms_norm_linear where the engine folds the norm (engine/model.py DECODE_FORMS), else
           linear after its own rms_norm (only the GEMV timed);
  o        linear(attn, w, residual=res, out=res);
  gate_up  as qkv;
  down     silu_mul_linear(gu, w, residual=res, out=res) where SiLU-mul is the prologue, else
           silu_mul, then linear(act, w, residual=res, out=res) (both kernels timed) —
it times
  engine   the call as the engine makes it (the tuned table / config model's pick);
  before   the engine's call with the config it ran before session 20's table entries: a fused
           call with `linear`'s config for the weight (linear_fusions.fused_config had no entries
           of its own), 14B's qkv and gate/up GEMVs with the config model's choice (the loop is
           today's: before d07b8e6 the fused PREFETCH loop was slower still, the 32B down 92 us);
  plain    linear(x, w) with that pick: the GEMV without prologue or epilogue (the rate to reach);
  alt      the other form (norm or SiLU-mul folded against apart), picks as they are;
  cand.    the role's fused call with each candidate config below (column tile, K tile, stages,
           the PREFETCH loop, K splits through fused_split/fused_sum, warps).
The weights are frozen, as the engine's are (the fused GEMVs then peel weight tile 0), and each
has copies enough to pass 256 MB, so no call finds its weight in L2; every case is checked against
an fp32 reference of the unfused sequence on copy 0 first, then a ts.graph (no PDL) over all the
copies is replayed 10 times queued behind a GPU sleep; us per call and TB/s of the weight read.
Cases run most valuable first (32B's down first) until FUSED_GEMV_BUDGET_S (default 70 s) is
spent; each catches its own errors; a table at the end, JSON to argv[1].
    PYTHONPATH=src timeout 90 python3 benchmarks/probes/fused_gemv_probe.py "$OUT/gemvcfg.json"
FUSED_GEMV_SIZES (e.g. "32b,4b") picks the models, FUSED_GEMV_CANDIDATES=0 times the engine's
picks (before, now, plain, the other form) without the candidates.
Without a GPU it runs every call once at shapes cut 64-fold on the CPU backend and checks it
(no timing): a smoke test of the probe itself.
"""
import json
import math
import os
import sys
import time

import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.engine.model import DECODE_FORMS, DEFAULT_FORM
from tilesafe.kernels import config_model
from tilesafe.kernels.matmul import skinny_config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))      # queued_ms, beside this file
from queued_ms import queued_ms  # noqa: E402

T0 = time.perf_counter()
BUDGET_S = float(os.environ.get("FUSED_GEMV_BUDGET_S", "70"))
MAX_CANDIDATES = int(os.environ.get("FUSED_GEMV_CANDIDATES", "99"))   # 0: the engine's picks, before and after, only
GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
CUT = 1 if GPU else 64                  # the CPU smoke run's shapes: 64x smaller
DT = torch.bfloat16
EPS = 1e-6
PASS_L2 = 256 << 20
SLEEP = 10_000_000                      # ~5 ms: the host queues a case's 12 replays well within it
# hidden, q width (heads x 128), kv width, intermediate
SIZES = {"32b": (5120, 8192, 1024, 25600), "14b": (5120, 5120, 1024, 17408), "8b": (4096, 4096, 1024, 12288),
         "4b": (2560, 4096, 1024, 9728), "0.6b": (1024, 2048, 1024, 3072)}
LAYERS = {"32b": 64, "14b": 40, "8b": 36, "4b": 36, "0.6b": 28}
ORDER = ["32b", "4b", "14b", "8b", "0.6b"]          # most valuable first: the final run measures 32B and 4B
ROLES = ["down", "o", "qkv", "gate_up"]

BASE = {"block_m": 16, "min_blocks": 1, "num_warps": 4, "prefetch": False, "split_k": 1}


def cand(bn, bk, stages, split=1, prefetch=False, warps=4):
    return dict(BASE, block_n=bn, block_k=bk, num_stages=stages, split_k=split, prefetch=prefetch, num_warps=warps)


# name -> config; a role times the names in its list, in order (the same configs across models
# share their compiled kernels).
CANDIDATES = {
    "n4k1024s4": cand(4, 1024, 4), "n4k2048s3": cand(4, 2048, 3),
    "n8k512s3p": cand(8, 512, 3, prefetch=True), "n4k1024s3p": cand(4, 1024, 3, prefetch=True),
    "n16k256s3p": cand(16, 256, 3, prefetch=True), "n8k512s4": cand(8, 512, 4), "n8k1024s4": cand(8, 1024, 4),
    "n8k1024s4w8": cand(8, 1024, 4, warps=8),
    "n16k256s4": cand(16, 256, 4), "n16k512s3": cand(16, 512, 3), "n32k256s4": cand(32, 256, 4),
    "n16k512s3x2": cand(16, 512, 3, split=2), "n32k256s4x2": cand(32, 256, 4, split=2),
    "n32k256s4x4": cand(32, 256, 4, split=4), "n64k128s4x4": cand(64, 128, 4, split=4),
    "n64k128s4x8": cand(64, 128, 4, split=8),
}
PER_ROLE = {
    "down": ["n8k512s3p", "n8k512s4", "n4k1024s3p", "n16k256s3p", "n16k256s4", "n16k512s3", "n32k256s4", "n4k1024s4",
             "n8k1024s4w8",
             "n16k512s3x2", "n32k256s4x2", "n32k256s4x4", "n64k128s4x4", "n64k128s4x8"],
    "o": ["n4k2048s3", "n4k1024s4", "n8k512s3p", "n8k512s4", "n16k256s4", "n8k1024s4w8", "n16k512s3x2"],
    "qkv": ["n4k1024s4", "n8k512s3p", "n8k512s4", "n16k256s4", "n8k1024s4w8"],
    "gate_up": ["n4k1024s4", "n8k512s3p", "n8k512s4", "n16k256s4", "n8k1024s4w8"],
}


def left() -> float:
    return BUDGET_S - (time.perf_counter() - T0)


def form(size: str):
    e, q, kv, i = SIZES[size]
    return DECODE_FORMS.get((e, i), DEFAULT_FORM)


class Role:
    """One projection of one model: its weight's copies, inputs and outputs, its calls."""

    def __init__(self, size: str, role: str):
        e, q, kv, i = (s // CUT for s in SIZES[size])
        self.size, self.role = size, role
        self.n, self.k = {"qkv": (q + 2 * kv, e), "o": (e, q), "gate_up": (2 * i, e), "down": (e, i)}[role]
        self.bytes = self.n * self.k * 2
        count = max(2, math.ceil(PASS_L2 / self.bytes)) if GPU else 1
        g = torch.Generator(device=DEVICE).manual_seed(ORDER.index(size) * 10 + ROLES.index(role))

        def rnd(*shape, scale=1.0):
            return (torch.randn(shape, generator=g, device=DEVICE) * scale).to(DT)
        self.ws = [rnd(self.n, self.k, scale=0.02) for _ in range(count)]
        for w in self.ws:
            ts.freeze(w)                              # as the engine's: the fused GEMVs peel tile 0
        folded, silu = form(size)
        self.fused = role == "down" and silu or role in ("qkv", "gate_up") and role in folded
        kin = 2 * self.k if role == "down" else self.k
        self.xs = [rnd(1, kin) for _ in self.ws]      # x, attn, or gate_up (gate | up)
        self.g = (1.0 + 0.1 * torch.randn(self.k, generator=g, device=DEVICE)).to(DT)
        self.outs = [torch.empty(1, self.n, device=DEVICE, dtype=DT) for _ in self.ws]   # residual or output
        self.act = torch.empty(1, self.k, device=DEVICE, dtype=DT)

    # --- the calls ---------------------------------------------------------------------------
    def call(self, j: int, how: str, config) -> None:
        """One call on copy j: how = "fused" (norm / SiLU-mul folded), "apart" or "plain"."""
        x, w, o = self.xs[j], self.ws[j], self.outs[j]
        if how == "plain":
            tk.linear(x[:, :self.k], w, out=o, config=config)
        elif self.role == "o":
            tk.linear(x, w, residual=o, out=o, config=config)
        elif self.role == "down" and how == "fused":
            tk.silu_mul_linear(x, w, residual=o, out=o, config=config)
        elif self.role == "down":
            tk.silu_mul(x[:, :self.k], x[:, self.k:], out=self.act)
            tk.linear(self.act, w, residual=o, out=o, config=config)
        elif how == "fused":
            tk.rms_norm_linear(x, self.g, w, EPS, out=o, config=config)
        else:
            tk.linear(x, w, out=o, config=config)      # after its own rms_norm: the GEMV timed

    def reference(self, how: str, res0):
        """fp32 result of the unfused sequence on copy 0 (x rounded where the kernels store)."""
        x, w = self.xs[0].float(), self.ws[0].float()
        if how == "plain":
            return x[:, :self.k] @ w.T
        if self.role == "down":
            a = (torch.nn.functional.silu(x[:, :self.k]) * x[:, self.k:]).to(DT).float()
            return (a @ w.T).to(DT).float() + res0
        if self.role == "o":
            return (x @ w.T).to(DT).float() + res0
        if how == "fused":
            r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
            x = (x * r * self.g.float()).to(DT).float()
        return x @ w.T

    def check(self, how: str, config) -> float:
        res0 = torch.randn(1, self.n, device=DEVICE).to(DT)
        self.outs[0].copy_(res0)
        ref = self.reference(how, res0.float())
        if self.role not in ("o", "down") or how == "plain":
            self.outs[0].fill_(float("nan"))          # poison: a result must be written
        self.call(0, how, config)
        if GPU:
            torch.cuda.synchronize()
        got = self.outs[0].float()
        err = ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
        if not err < 2e-2:
            raise AssertionError(f"max error {err:.4g} of the largest |ref|")
        return err

    def time_us(self, how: str, config) -> float:
        for j in range(len(self.ws)):                 # compile and warm outside the capture
            self.call(j, how, config)
        torch.cuda.synchronize()
        with ts.graph(pdl=False) as g:
            for j in range(len(self.ws)):
                self.call(j, how, config)
        return queued_ms(g.replay, 10, warm=2, sleep_cycles=SLEEP) * 1e3 / len(self.ws)


def case(rows: list, r: Role, impl: str, how: str, config) -> None:
    row = {"model": r.size, "role": r.role, "n": r.n, "k": r.k, "impl": impl, "how": how, "config": config}
    try:
        if left() < 0:
            row["error"] = "skipped: budget spent"
            rows.append(row)
            return
        row["err"] = round(r.check(how, config), 5)
        if GPU:
            us = r.time_us(how, config)
            row.update(us=round(us, 2), TB_s=round(r.bytes / us / 1e6, 3))
    except Exception as e:                            # noqa: BLE001 - reported in the table
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    rows.append(row)
    print(json.dumps(row), flush=True)


# Plain GEMVs whose table entry session 20 added (before it: the config model's choice).
NEW_GEMV_ENTRIES = {("14b", "qkv"), ("14b", "gate_up")}


def before_config(r: Role, how: str) -> dict | None:
    """The config the engine's call ran before session 20's entries: `linear`'s for a fused
    GEMV (linear_fusions.fused_config had no entries of its own), the config model's choice
    for a plain GEMV whose entry is new; None where nothing changed."""
    if how == "fused":
        return dict(skinny_config(ts.bf16, 1, r.n, r.k, None))
    if (r.size, r.role) in NEW_GEMV_ENTRIES:
        return config_model.choose(config_model.Gemm(1, r.n, r.k, "bf16"), config_model.H200)
    return None


def probe_role(rows: list, r: Role, full: bool) -> None:
    engine = "fused" if r.fused or r.role == "o" else "apart"
    case(rows, r, "engine", engine, None)
    before = before_config(r, engine)
    if before is not None:
        case(rows, r, "before", engine, before)
    case(rows, r, "plain", "plain", None)
    if r.role != "o":
        case(rows, r, "alt", "apart" if r.fused else "fused", None)
    names = (PER_ROLE[r.role] if full else PER_ROLE[r.role][:3])[:MAX_CANDIDATES]
    how = "fused" if r.role in ("down", "o") else engine      # down's candidates: the fused form
    for name in names:
        case(rows, r, name, how, CANDIDATES[name])


def table(rows: list) -> None:
    print(f"\n{'model':5} {'role':8} {'N x K':>12} {'before':>13} {'engine':>13} {'plain':>13} {'alt':>13} "
          f"{'best candidate':>26}  engine/best")
    for size in ORDER:
        for role in ROLES:
            mine = [x for x in rows if x["model"] == size and x["role"] == role]
            if not mine:
                continue
            got = {x["impl"]: x for x in mine}

            def cell(x):
                if not x:
                    return "-"
                return f"{x['us']:6.2f}/{x['TB_s']:5.2f}" if "us" in x else "err" if "error" in x else "ok"
            cands = [x for x in mine if x["impl"] in CANDIDATES and "us" in x]
            best = min(cands, key=lambda x: x["us"]) if cands else None
            bcell = f"{best['impl']} {cell(best)}" if best else "-"
            ratio = f"{got['engine']['us'] / best['us']:.3f}" if best and "us" in got.get("engine", {}) else "-"
            nk = f"{mine[0]['n']}x{mine[0]['k']}"
            before = got.get("before") or got.get("engine")
            print(f"{size:5} {role:8} {nk:>12} {cell(before):>13} {cell(got.get('engine')):>13} "
                  f"{cell(got.get('plain')):>13} "
                  f"{cell(got.get('alt')):>13} {bcell:>26}  {ratio}")
    print("\n(us / TB/s of the weight read; engine: the call the engine makes now, fused or apart by"
          " DECODE_FORMS; before: its config before session 20's table entries (see the docstring);"
          " alt: the other form; candidates: down and o fused, qkv/gate_up in the engine's form)")
    print("\nper layer, the four GEMVs (us): before -> engine now; x layers = the step's GEMVs (ms)")
    for size in ORDER:
        mine = {x["role"]: x for x in rows if x["model"] == size and x["impl"] == "engine" and "us" in x}
        was = {x["role"]: x for x in rows if x["model"] == size and x["impl"] == "before" and "us" in x}
        if len(mine) == len(ROLES):
            now = sum(x["us"] for x in mine.values())
            then = sum((was.get(role) or x)["us"] for role, x in mine.items())
            n = LAYERS[size]
            print(f"{size:5} {then:8.2f} -> {now:8.2f}   x {n} = {then * n / 1e3:.3f} -> {now * n / 1e3:.3f} ms"
                  f" (saves {(then - now) * n / 1e3:.3f} ms a step)")
    errs = [x for x in rows if "error" in x]
    print(f"{len(errs)} cases with errors" + "".join(f"\n  {x['model']} {x['role']} {x['impl']}: {x['error'][:160]}"
                                                     for x in errs[:12]))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "gemvcfg.json"
    rows = []
    print(torch.cuda.get_device_name() if GPU else "cpu", "torch", torch.__version__, flush=True)
    sizes = [s for s in os.environ.get("FUSED_GEMV_SIZES", ",".join(ORDER)).split(",") if s]
    for size in sizes:
        for role in ROLES:
            if left() < 0:
                break
            try:
                r = Role(size, role)
            except Exception as e:                    # noqa: BLE001
                print(f"{size} {role}: {type(e).__name__}: {e}", flush=True)
                continue
            probe_role(rows, r, full=size in ("32b", "4b") or role == "down")
            del r
            with open(out, "w") as f:                 # a run cut short keeps what it measured
                json.dump({"rows": rows, "wall_s": round(time.perf_counter() - T0, 1)}, f, indent=1)
    table(rows)
    print(f"\nwall {time.perf_counter() - T0:.1f} s")


if __name__ == "__main__":
    main()
