"""The per-kernel profile of one replayed decode step (issue 17's "per-kernel profile of one
decode step: time against bytes moved, gaps between kernels"), at batch 1 or any batch B.

`profile_step(llm, context, batch=B)` traces the engine's greedy batch-B graph twice with CUPTI
(torch.profiler), each replay queued behind a GPU sleep so that the host's enqueueing is
hidden:
- `pdl`: the graph as the engine replays it (programmatic dependent launch: a kernel starts
  while the one before it drains and waits for it inside, so its time includes that wait);
- `plain`: the same step captured without PDL — each kernel's own time, and the idle gaps
  between kernels (the kernels that always launch with PDL — a split-K pair's sum, the
  attention's combine, the LM head's second pass — still start early there).
A kernel's `own_us` runs from the later of its start and the previous kernel's end: its time
not spent waiting for the one before, so the own times and the gaps add up to the span.
Per kernel of the step, in launch order: its median time over the replays, the bytes it moves
(`step_bytes`: the weight a GEMV streams, the keys and values the attention reads, the small
kernels' rows), GB/s and % of the nominal HBM bandwidth, and the gap to the next kernel.
`summary` adds it up into the GEMVs at their achieved rate, the LM head, the attention, the
small kernels, the gaps, and the distance to the target (85% of the roofline) in numbers.
"""
from __future__ import annotations

import statistics

import torch

HBM = 4.8e12
TARGET = 0.85
SLEEP_US = 2000              # a trace's events this long are the GPU sleep in front of the replay
# Kernels that stream a weight matrix (one launch each: a one-launch GEMV, or the first of a
# split-K pair; above 16 rows a GEMM); each takes the next weight of the step, in the order the
# model reads them.
WEIGHT_KERNELS = ("skinny_kernel", "fused_skinny_kernel", "split_k_kernel", "fused_split_kernel",
                  "mm_kernel", "mm_persistent_kernel", "split_k_last_kernel", "weight_major_kernel",
                  "weight_major_split_kernel", "argmax_gemv_kernel")
SUM_KERNELS = ("split_sum_kernel", "fused_sum_kernel")
ATTENTION = ("paged_decode_kernel", "paged_decode_single_kernel", "paged_decode_last_kernel",
             "decode_combine_kernel")


def _kind(name: str, last_weight: bool = False) -> str:
    """A kernel's kind; `last_weight`: it is the step's last weight kernel, the LM head (a plain
    GEMV or GEMM at batch > 1, `argmax_gemv_kernel` at batch 1)."""
    if name.startswith("argmax_gemv") or last_weight:
        return "lm_head"
    if name in WEIGHT_KERNELS or name in SUM_KERNELS:
        return "gemv"
    if name in ATTENTION:
        return "attention"
    if name.startswith("sample") or name.startswith("argmax_rows"):
        return "sampler"
    return "small"


def kinds_of(names: list[str]) -> list[str]:
    """`_kind` of each kernel of a step, its last weight kernel the LM head."""
    last = max((i for i, n in enumerate(names) if n in WEIGHT_KERNELS), default=-1)
    return [_kind(n, i == last) for i, n in enumerate(names)]


def step_bytes(names: list[str], cfg, context: int, splits: int, itemsize: int = 2, batch: int = 1) -> list[int]:
    """Bytes each kernel of a step of `batch` rows moves (reads + writes, counted once), in
    launch order: a weight kernel streams the next of (qkv, o, gate_up, down) x layers, then
    the LM head, once for all rows (and each row's input and output); the attention reads
    `context` keys and values of every KV head per row; the rest move their rows
    (activations, norms, split partials, the sampler's logits)."""
    b = batch
    e, d, inter, v = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size
    hq, hkv = cfg.num_heads * d, cfg.num_kv_heads * d
    weights = []
    for _ in range(cfg.num_layers):
        weights += [(hq + 2 * hkv, e), (e, hq), (2 * inter, e), (e, inter)]
    weights.append((v, e))
    out, w = [], 0
    last_n = 0
    for name in names:
        if name in WEIGHT_KERNELS:
            n, k = weights[min(w, len(weights) - 1)]
            w += 1
            last_n = n
            out.append(n * k * itemsize + b * (k + n) * itemsize)
        elif name in SUM_KERNELS:
            out.append(b * (last_n * 4 * 4 + last_n * itemsize))        # a few fp32 partial rows
        elif name.startswith("paged_decode"):
            out.append(b * (2 * context * hkv * itemsize + 2 * hq * itemsize))
        elif name == "decode_combine_kernel":
            out.append(b * (splits * cfg.num_heads * (d + 2) * 4 + hq * itemsize))
        elif name.startswith("rms_norm") or name.startswith("add_rms_norm"):
            out.append(b * 3 * e * itemsize)
        elif name.startswith("norm_rope_kv"):
            out.append(b * ((hq + 2 * hkv) * itemsize * 2 + 2 * d * itemsize))
        elif name.startswith("argmax_rows"):
            out.append(b * 3 * 4 * (v // 8))
        elif name.startswith("sample"):
            out.append(b * v * itemsize)                                 # each row's logits, once
        else:
            out.append(b * e * itemsize)
    return out


def trace(replay, replays: int = 5) -> list[dict]:
    """Kernels of one replay in launch order: name, median start offset, duration and gap to
    the next kernel (µs) over `replays` replays, each queued behind a GPU sleep (one CUPTI
    session: the sleeps, far longer than any kernel of a step, separate the replays)."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(2):
        replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            torch.cuda._sleep(20_000_000)           # ~10 ms: the host queues the replay meanwhile
            replay()
        torch.cuda.synchronize()
    ev = sorted((x for x in prof.events() if x.device_type == torch.autograd.DeviceType.CUDA
                 and "memcpy" not in x.name.lower() and "memset" not in x.name.lower()),
                key=lambda x: x.time_range.start)
    runs: list[list] = []
    for x in ev:
        if x.time_range.end - x.time_range.start >= SLEEP_US:      # a sleep: the next replay starts
            runs.append([])
        elif runs:
            runs[-1].append((x.name, x.time_range.start, x.time_range.end))
    return rows_of_runs([r for r in runs if r])


def rows_of_runs(runs: list[list[tuple]]) -> list[dict]:
    """Replays' (name, start, end) kernels (µs) -> one row per kernel position: median start
    offset, duration, own time and gap to the next kernel."""
    if not runs:
        return []
    n = min(len(r) for r in runs)
    runs = [r for r in runs if len(r) == n]
    rows = []
    for i in range(n):
        name = runs[0][i][0]
        dur = statistics.median(r[i][2] - r[i][1] for r in runs)
        gap = statistics.median(r[i + 1][1] - r[i][2] for r in runs) if i + 1 < n else 0.0
        start = statistics.median(r[i][1] - r[0][1] for r in runs)
        # Its own time: from the later of its start and the previous kernel's end (a kernel
        # launched early under PDL waits inside for the one before: that wait is not its own).
        own = statistics.median(max(0.0, r[i][2] - max(r[i][1], r[i - 1][2] if i else r[i][1])) for r in runs)
        rows.append({"kernel": name, "start_us": round(start, 2), "us": round(dur, 2), "own_us": round(own, 2),
                     "gap_us": round(gap, 2)})
    return rows


def table(rows: list[dict], nbytes: list[int]) -> dict:
    """The trace with bytes and rates, summed by kind, and the span (first start to last end)."""
    kinds: dict[str, dict] = {}
    for r, b, kind in zip(rows, nbytes, kinds_of([r["kernel"] for r in rows])):
        r.setdefault("own_us", r["us"])
        r["bytes"] = b
        r["GB_s"] = round(b / r["us"] / 1e3, 1) if r["us"] > 0 else None
        r["pct_hbm"] = round(100 * b / r["us"] / 1e-6 / HBM, 1) if r["us"] > 0 else None
        k = kinds.setdefault(kind, {"launches": 0, "us": 0.0, "own_us": 0.0, "bytes": 0})
        k["launches"] += 1
        k["us"] += r["us"]
        k["own_us"] += r["own_us"]
        k["bytes"] += b
    for k in kinds.values():
        k["us"], k["own_us"] = round(k["us"], 1), round(k["own_us"], 1)
        k["TB_s"] = round(k["bytes"] / k["own_us"] / 1e6, 3) if k["own_us"] else None
    by_name: dict[str, dict] = {}
    for r in rows:
        d = by_name.setdefault(r["kernel"], {"launches": 0, "us": 0.0, "bytes": 0})
        d["launches"] += 1
        d["us"] = round(d["us"] + r["us"], 2)
        d["bytes"] += r["bytes"]
    for d in by_name.values():
        d["TB_s"] = round(d["bytes"] / d["us"] / 1e6, 3) if d["us"] else None
    span = rows[-1]["start_us"] + rows[-1]["us"] - rows[0]["start_us"] if rows else 0.0
    kernel_us = sum(r["us"] for r in rows)
    gaps = [r["gap_us"] for r in rows[:-1]]
    return {"launches": len(rows), "span_us": round(span, 1), "kernel_us": round(kernel_us, 1),
            "own_us": round(sum(r["own_us"] for r in rows), 1),
            "gap_us": round(sum(g for g in gaps if g > 0), 1), "overlap_us": round(-sum(g for g in gaps if g < 0), 1),
            "gap_median_us": round(statistics.median(gaps), 2) if gaps else None,
            "by_kind": kinds, "by_kernel": dict(sorted(by_name.items(), key=lambda kv: -kv[1]["us"])),
            "kernels": rows}


def plain_graph(llm, batch: int = 1, greedy: bool = True):
    """The engine's batch-`batch` step captured again without PDL (compiled first, eagerly)."""
    import tilesafe as ts
    steps = llm.decode_steps
    step = steps.steps[batch]
    with torch.inference_mode():
        with ts.pdl(False):
            steps.model.decode(step.a, step.ws, greedy)
        torch.cuda.synchronize()
        with ts.graph(pdl=False) as g:
            steps.model.decode(step.a, step.ws, greedy)
    return g


def summary(plain: dict, pdl: dict | None, step_s: float | None, ideal_s: float) -> dict:
    """The profile added up: where a step's time goes without PDL (each kernel's own time and
    the gaps), what PDL changes, and the distance to 85% of the roofline in numbers."""
    kinds = plain["by_kind"]

    def us(kind):                                # its own time: the kinds and the gaps add up to the span
        return kinds.get(kind, {}).get("own_us", 0.0)
    gemv_bytes = kinds.get("gemv", {}).get("bytes", 0) + kinds.get("lm_head", {}).get("bytes", 0)
    gemv_us = us("gemv") + us("lm_head")
    target_s = ideal_s / TARGET
    out = {"plain_span_us": plain["span_us"], "plain_kernel_us": plain["own_us"], "plain_gap_us": plain["gap_us"],
           "gemv_us": round(gemv_us, 1), "gemv_bytes": gemv_bytes,
           "gemv_TB_s": round(gemv_bytes / gemv_us / 1e6, 3) if gemv_us else None,
           "layer_gemv_us": us("gemv"), "lm_head_us": us("lm_head"), "attention_us": us("attention"),
           "small_us": us("small"), "sampler_us": us("sampler"), "ideal_us": round(ideal_s * 1e6, 1),
           "target_us": round(target_s * 1e6, 1)}
    if pdl is not None:
        out["pdl_span_us"] = pdl["span_us"]
        out["pdl_saves_us"] = round(plain["span_us"] - pdl["span_us"], 1)
        out["pdl_own_us"] = {k: v["own_us"] for k, v in pdl["by_kind"].items()}
    if step_s:
        step_us = step_s * 1e6
        out["step_us"] = round(step_us, 1)
        out["distance_us"] = round(step_us - target_s * 1e6, 1)
        # The step less its GEMVs' own time (plain): attention, small kernels and the gaps PDL
        # leaves. If that stayed as it is, the GEMVs would have to stream at:
        rest = step_us - gemv_us
        out["non_gemv_us"] = round(rest, 1)
        left = target_s * 1e6 - rest
        out["gemv_TB_s_needed"] = round(gemv_bytes / left / 1e6, 3) if left > 0 else None
        # ... and at 4.3 TB/s (about what a long weight stream reaches on the H200) the step
        # would take, the rest unchanged:
        out["step_us_if_gemv_at_4p3"] = round(rest + gemv_bytes / 4.3e6, 1)
    return out


def set_context(step, context: int, max_model_len: int) -> None:
    """Every row of a slot-cache step at cache length `context`: row i in slot i (its table),
    its new key written at position context - 1 of that slot."""
    a = step.a
    rows = torch.arange(a.ids.shape[0], dtype=torch.int32, device=a.ids.device)
    with torch.inference_mode():                 # the step's buffers are inference tensors
        a.positions.fill_(context - 1)
        a.lens.fill_(context)
        a.slots.copy_(rows * max_model_len + context - 1)
        a.tables[:, 0].copy_(rows)


def profile_step(llm, context: int, ideal_s: float, step_s: float | None, replays: int = 5,
                 top: int = 12, batch: int = 1, greedy: bool = True) -> dict | None:
    """The batch-`batch` step's profile with and without PDL, bytes per kernel and the summary
    (module doc); `greedy`: the graph of an all-greedy batch (batch 1 takes its token from
    the LM head), else the sampled one."""
    steps = llm.decode_steps
    step = steps.steps.get(batch)
    g = step.graphs.get(greedy) if step is not None else None
    if g is None:
        return None
    set_context(step, context, steps.model.cache.max_model_len)
    splits = step.ws.attention.splits
    cfg = llm.config
    res = {"context": context, "batch": batch, "attention_splits": splits, "engine_pdl": steps.pdl}
    on = trace(g.replay, replays) if steps.pdl else None
    plain = trace(plain_graph(llm, batch, greedy).replay, replays)
    res["plain"] = table(plain, step_bytes([r["kernel"] for r in plain], cfg, context, splits, batch=batch))
    if on is not None:
        res["pdl"] = table(on, step_bytes([r["kernel"] for r in on], cfg, context, splits, batch=batch))
    res["summary"] = summary(res["plain"], res.get("pdl"), step_s, ideal_s)
    for key in ("plain", "pdl"):                 # launch-order rows: the first layer's and the tail's
        if key in res:
            rows = res[key].pop("kernels")
            res[key]["first_kernels"] = rows[:top]
            res[key]["last_kernels"] = rows[-4:]
            res[key]["per_position"] = _layer_positions(rows, cfg.num_layers)
    return res


def _layer_positions(rows: list[dict], layers: int) -> list[dict]:
    """The median over layers of each kernel position within a layer: the rows between the
    embedding (first) and the tail (the LM head's GEMV — at batch > 1 the last weight kernel —
    and what follows it, and the final norm before it when that is its own kernel)."""
    heads = [i for i, r in enumerate(rows) if r["kernel"].startswith("argmax_gemv")] or \
        [i for i, r in enumerate(rows) if r["kernel"] in WEIGHT_KERNELS][-1:]
    if not heads or not layers:
        return []
    final_norm = heads[-1] > 0 and rows[heads[-1] - 1]["kernel"].startswith(("rms_norm", "add_rms_norm"))
    tail = heads[-1] - final_norm
    body = rows[1:tail]
    per = len(body) // layers
    if per <= 0 or per * layers != len(body):
        return []
    out = []
    for p in range(per):
        col = [body[n * per + p] for n in range(layers)]
        us = statistics.median(r["us"] for r in col)
        out.append({"kernel": col[0]["kernel"], "us": round(us, 2),
                    "own_us": round(statistics.median(r["own_us"] for r in col), 2),
                    "gap_us": round(statistics.median(r["gap_us"] for r in col), 2),
                    "bytes": col[0].get("bytes"),
                    "GB_s": round(col[0]["bytes"] / statistics.median(r["own_us"] for r in col) / 1e3, 1)
                    if col[0].get("bytes") and statistics.median(r["own_us"] for r in col) > 0 else None})
    return out


def print_profile(tag: str, p: dict) -> None:
    s = p["summary"]
    print(f"[{tag}] step {s.get('step_us')} us, target {s['target_us']} us (ideal {s['ideal_us']}), "
          f"distance {s.get('distance_us')} us", flush=True)
    print(f"[{tag}] without PDL: span {s['plain_span_us']} us = kernels {s['plain_kernel_us']} + gaps "
          f"{s['plain_gap_us']}; GEMVs {s['gemv_us']} us at {s['gemv_TB_s']} TB/s (LM head {s['lm_head_us']}), "
          f"attention {s['attention_us']}, small {s['small_us']}; PDL saves {s.get('pdl_saves_us')} us; "
          f"GEMVs would need {s.get('gemv_TB_s_needed')} TB/s", flush=True)
    for key in ("plain", "pdl"):
        if key in p:
            for r in p[key]["per_position"]:
                print(f"[{tag}]   {key:>5} {r['kernel']:<28} {r['us']:>7} us own {r['own_us']:>7} gap {r['gap_us']:>6} "
                      f"{r['bytes'] or 0:>10} B {r['GB_s'] or 0:>8} GB/s", flush=True)
