"""Probe: where do the 4k-context decode's microseconds go, and does a one-kernel form whose
last block reads every split at once (not one split at a time) beat the two kernels?

Raw Triton twins of the library's decode (h = 32 query / 8 KV heads, D = 128, bf16, 64-key
tiles through TMA, as the tuned config): the partial kernel alone (a lower bound), partials +
combination kernel (the library's default), the one-kernel form walking the splits
(`_combine_if_last`), and one kernel reading CS splits per step, for 16/32/64 splits; beside
a copy of the KV bytes (two `copy_` launches: its ratio is not the bench's one-kernel copy, so
compare the rows with each other). The bench's timer (rotated working set, CUDA graphs, median), after
a check against torch. JSON to argv[1].
    PYTHONPATH=src python3 benchmarks/probes/decode_combine.py "$OUT/decode_combine.json"
"""
import json
import math
import sys

import torch
import triton
import triton.language as tl

from tilesafe.bench.twins.attention import decode_combine, decode_partial
from tilesafe.bench.twins.launch import launch
from tilesafe.bench.twins.tma import descriptor_or_tensor

LOG2E = 1.4426950408889634


@triton.jit
def _combine_chunks(o_ptr, acc_ptr, m_ptr, l_ptr, slot, kvh, splits, G, R, D, GS: tl.constexpr, DP: tl.constexpr,
                    CS: tl.constexpr):
    """The KV head's last program combines the splits CS at a time (one load of CS partials)."""
    tl.debug_barrier()
    ticket = tl.atomic_add(slot, 1, sem="acq_rel", scope="gpu")
    last = ticket == splits - 1
    tl.store(slot, 0, mask=last)
    if last:
        rc, rg, rd = tl.arange(0, CS), tl.arange(0, GS), tl.arange(0, DP)
        top = tl.full((1, GS), -float("inf"), tl.float32)
        l = tl.zeros((1, GS), tl.float32)
        acc = tl.zeros((GS, DP), tl.float32)
        for s0 in range(0, splits, CS):
            rs = s0 + rc
            row = rs[:, None] * R + kvh * GS + rg[None, :]                       # (CS, GS)
            ms = tl.load(m_ptr + row, mask=rs[:, None] < splits, other=-float("inf"), cache_modifier=".cg")
            ls = tl.load(l_ptr + row, mask=rs[:, None] < splits, other=0.0, cache_modifier=".cg")
            a = tl.load(acc_ptr + row[:, :, None] * D + rd[None, None, :], mask=(rs[:, None, None] < splits),
                        other=0.0, cache_modifier=".cg")                           # (CS, GS, DP)
            new = tl.maximum(top, tl.max(ms, axis=0, keep_dims=True))            # (1, GS)
            keep = tl.where(top == -float("inf"), 0.0, tl.exp2(top - new))
            w = tl.where(ms == -float("inf"), 0.0, tl.exp2(ms - new))            # (CS, GS)
            l = l * keep + tl.sum(ls * w, axis=0, keep_dims=True)
            acc = acc * tl.reshape(keep, (GS, 1)) + tl.sum(w[:, :, None] * a, axis=0)
            top = new
        o = acc / tl.reshape(l, (GS, 1))
        tl.store(o_ptr + (kvh * G + rg[:, None]) * D + rd[None, :], o.to(o_ptr.dtype.element_ty),
                 mask=rg[:, None] < G)


@triton.jit
def decode_vec(acc_ptr, m_ptr, l_ptr, q_ptr, k_ptr, v_ptr, dk, dv, lens_ptr, G, D, MAXS, R, skh, sks, svh, svs,
               KHR, KHC, VHR, VHC, qk_scale, o_ptr, count_ptr, GP: tl.constexpr, GS: tl.constexpr, BN: tl.constexpr,
               DP: tl.constexpr, CS: tl.constexpr):
    decode_partial(acc_ptr, m_ptr, l_ptr, q_ptr, k_ptr, v_ptr, dk, dv, lens_ptr, G, D, MAXS, R, skh, sks, svh, svs,
                   KHR, KHC, VHR, VHC, qk_scale, False, GP, GS, BN, DP, True, True, True, True)
    _combine_chunks(o_ptr, acc_ptr, m_ptr, l_ptr, count_ptr + tl.program_id(1), tl.program_id(1),
                    tl.num_programs(0), G, R, D, GS, DP, CS)


class Decode:
    def __init__(self, h, hkv, d, splits, mode, cs=8, bn=64):
        self.h, self.hkv, self.d, self.splits, self.mode, self.cs, self.bn = h, hkv, d, splits, mode, cs, bn
        self.gs = h // hkv
        rows = hkv * self.gs
        self.acc = torch.empty(splits, rows, d, device="cuda")
        self.m = torch.empty(splits, rows, device="cuda")
        self.l = torch.empty(splits, rows, device="cuda")
        self.count = torch.zeros(hkv, dtype=torch.int32, device="cuda")
        self.opts = dict(num_warps=4, num_stages=3, launch_pdl=True)

    def __call__(self, o, q, k, v, lens):
        hkv, maxs, d = k.shape
        bn, gs = self.bn, self.gs
        dk = descriptor_or_tensor(k, hkv * maxs, d, k.stride(1), (bn, d), True)
        dv = descriptor_or_tensor(v, hkv * maxs, d, v.stride(1), (bn, d), True)
        args = (self.acc, self.m, self.l, q, k, v, dk, dv, lens, gs, d, maxs, hkv * gs, k.stride(0), k.stride(1),
                v.stride(0), v.stride(1), maxs, 0, maxs, 0, LOG2E / math.sqrt(d))
        grid = (self.splits, hkv)
        if self.mode == "vec":
            launch(decode_vec, grid, *args, o, self.count, options=self.opts, GP=16, GS=gs, BN=bn, DP=d, CS=self.cs)
            return o
        last = self.mode == "walk"
        launch(decode_partial, grid, *args, options=self.opts, NEG_SCALE=False, GP=16, GS=gs, BN=bn, DP=d, EVEN=True,
               K_TMA=True, V_TMA=True, PDL=True, o_ptr=o, count_ptr=self.count, LAST=last)
        if self.mode == "two":
            launch(decode_combine, (self.h,), o, self.acc, self.m, self.l, self.splits, hkv * gs, d, options=self.opts,
                   G=gs, GS=gs, SP=triton.next_power_of_2(self.splits), DP=d, PDL=True)
        return o


def main(out_path):
    from side_by_side import measure, result_check, show
    from tilesafe.bench.timing import rotation_sets
    result = {}
    h, hkv, d = 32, 8, 128
    for ctx in (4096, 8192):
        sets = rotation_sets(2 * hkv * ctx * d * 2)
        qs = [torch.randn(h, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        ks = [torch.randn(hkv, ctx, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        vs = [torch.randn(hkv, ctx, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        ks2 = [torch.empty_like(k) for k in ks]
        os_ = [torch.empty(h, d, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        lens = torch.tensor([ctx], device="cuda", dtype=torch.int32)
        kr = ks[0].repeat_interleave(h // hkv, 0).float()
        vr = vs[0].repeat_interleave(h // hkv, 0).float()
        ref = torch.softmax(qs[0].float()[:, None, :] @ kr.transpose(1, 2) / math.sqrt(d), -1) @ vr
        ref = ref[:, 0]
        impls = {"copy K,V": lambda i: (ks2[i].copy_(ks[i]), ks2[(i + 1) % sets].copy_(vs[i]))}
        for splits in (16, 32, 64):
            impls[f"partials only s={splits}"] = Decode(h, hkv, d, splits, "partial")
            impls[f"two kernels s={splits}"] = Decode(h, hkv, d, splits, "two")
            impls[f"one kernel walk s={splits}"] = Decode(h, hkv, d, splits, "walk")
            for cs in (4, 8, 16):
                impls[f"one kernel CS={cs} s={splits}"] = Decode(h, hkv, d, splits, "vec", cs)
        for key, f in impls.items():
            impls[key] = (f if key.startswith("copy") else
                          (lambda f: lambda i: f(os_[i], qs[i], ks[i], vs[i], lens))(f), "torch")
        check = result_check(os_[0], ref, error="max", runs=2, unchecked=("copy", "partials"))
        entry = result[f"ctx={ctx}"] = measure(impls, sets, check, "copy K,V", "vs_copy")
        show(f"ctx={ctx}", entry, "vs_copy", 30)
        torch.cuda.empty_cache()
    json.dump(result, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
