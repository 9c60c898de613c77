"""Call plans' fast form on the GPU (kernels/call_hits.py, runtime/planned_launch.py): from the
third call of a layout a library call starts Triton's compiled kernel with a prebuilt argument
tuple holding the call's addresses. Each call computes what torch computes — with new memory
every call, and with the same memory under new views (its byte sets kept) — and a host read
through tilesafe waits for it (S9). Run with `pytest -m gpu`."""
import pytest
import torch
import torch.nn.functional as F

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.kernels import elementwise
from tilesafe.runtime import planned_launch

from gpu_oracles import rand_cuda as _r, rms_norm_ref as _rms

pytestmark = pytest.mark.gpu


CASES = {   # name: (the planned function, make(seed), call(t) with out=, oracle(t))
    "linear": (tk.linear, lambda s: dict(x=_r(1, 512, seed=s), w=_r(384, 512, seed=s + 1), o=_r(1, 384)),
               lambda t: tk.linear(t["x"], t["w"], out=t["o"]), lambda t: F.linear(t["x"], t["w"])),
    "rms_norm": (tk.rms_norm, lambda s: dict(x=_r(2, 1024, seed=s), w=_r(1024, seed=s + 1), o=_r(2, 1024)),
                 lambda t: tk.rms_norm(t["x"], t["w"], out=t["o"]), lambda t: _rms(t["x"], t["w"])),
    "add": (elementwise._tensor_operands, lambda s: dict(x=_r(1, 2048, seed=s), y=_r(1, 2048, seed=s + 1),
                                                         o=_r(1, 2048)),
            lambda t: tk.add(t["x"], t["y"], out=t["o"]), lambda t: t["x"] + t["y"]),
    "embedding": (tk.embedding, lambda s: dict(i=torch.tensor([3, 99], device="cuda", dtype=torch.int32),
                                               tab=_r(128, 256, seed=s), o=_r(2, 256)),
                  lambda t: tk.embedding(t["i"], t["tab"], out=t["o"]),
                  lambda t: F.embedding(t["i"].long(), t["tab"])),
}


def _gpu_launches(fn) -> list:
    return [launch for plan in fn.plans.plans.values() if plan.hit
            for launch in plan.hit.launches if launch is not None and launch.mode == planned_launch._GPU]


@pytest.mark.parametrize("case", list(CASES))
def test_a_one_kernel_call_takes_the_gpu_form_with_new_memory_every_call(case):
    fn, make, call, oracle = CASES[case]
    with ts.backend("triton"), torch.no_grad():
        for seed in range(6):                                     # record, redo, then the fast form
            t = make(10 * seed)                                   # new memory every call
            got = call(t)
            assert got is t["o"]
            torch.testing.assert_close(got.float(), oracle(t).float(), rtol=3e-2, atol=3e-2)
    assert _gpu_launches(fn), f"{case}: no launch took the GPU form"


def test_the_same_memory_under_new_views_is_written_by_every_call():
    """The byte sets of a slot are kept while its memory stays; the values change every call."""
    x, w, o = _r(2, 1024, seed=1), _r(1024, seed=2), torch.empty(2, 1024, device="cuda", dtype=torch.bfloat16)
    with ts.backend("triton"), torch.no_grad():
        for seed in range(6):
            x.copy_(_r(2, 1024, seed=seed))
            tk.rms_norm(x.view(2, 1024), w.view(1024), out=o.view(2, 1024))
            torch.testing.assert_close(o.float(), _rms(x, w).float(), rtol=3e-2, atol=3e-2)


def test_a_host_read_through_tilesafe_waits_for_a_fast_launch():
    """S9: the launch registers its write as pending; reading the result with numpy() waits."""
    w = _r(4096, 4096, seed=3)
    with ts.backend("triton"), torch.no_grad():
        for seed in range(5):
            x = _r(64, 4096, seed=seed)
            h = torch.empty(64, 4096, device="cuda", dtype=torch.bfloat16)
            tk.linear(x, w, out=h)                                # no synchronize before the read
            got = torch.from_numpy(ts.from_torch(h).numpy().astype("float32"))
            torch.testing.assert_close(got, F.linear(x, w).float().cpu(), rtol=3e-2, atol=3e-1)


@pytest.mark.parametrize("form", ["eager", "out="])
def test_tma_launches_take_the_gpu_form_at_new_addresses(form):
    """Tensor-core calls address their operands through TMA descriptors on Hopper; the GPU form
    makes each from its layout's template at the call's address (tma.LayoutDescriptor), the
    weight described by columns (w.T). New memory every call; results against torch."""
    tk.linear.plans.plans.clear()
    with ts.backend("triton"), torch.no_grad():
        for seed in range(6):
            x, w = _r(128, 512, seed=seed), _r(256, 512, seed=seed + 50)
            if form == "eager":
                got = tk.linear(x, w)
            else:
                got = torch.full((128, 256), float("nan"), device="cuda", dtype=torch.bfloat16)
                tk.linear(x, w, out=got)
            torch.testing.assert_close(got.float(), F.linear(x, w).float(), rtol=3e-2, atol=3e-1)
    launches = _gpu_launches(tk.linear)
    assert launches and any(launch.descriptors for launch in launches), "no launch used a descriptor"


def test_a_kept_workspace_orders_calls_on_two_streams():
    """decode_attention without `workspace=` keeps the workspace its first fast call allocated
    (call_hits: CallHit.kept); calls alternating between two streams each compute their own
    result: S10 orders a call after the other stream's use of that workspace."""
    k, v = _r(8, 4096, 128, seed=1), _r(8, 4096, 128, seed=2)
    n = torch.tensor([4000], device="cuda", dtype=torch.int32)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    results = []
    with ts.backend("triton"), torch.no_grad():
        for seed in range(8):
            q = _r(32, 128, seed=10 + seed)
            s = streams[seed % 2]
            s.wait_stream(torch.cuda.current_stream())            # q was made on the current stream
            with torch.cuda.stream(s):
                results.append((q, tk.decode_attention(q, k, v, n)))
    torch.cuda.synchronize()
    assert any(p.hit and p.hit.kept for p in tk.decode_attention.plans.plans.values())
    for q, got in results:
        want = F.scaled_dot_product_attention(q[None, :, None], k[None, :, :4000], v[None, :, :4000],
                                              enable_gqa=True)[0, :, 0]
        torch.testing.assert_close(got.float(), want.float(), rtol=3e-2, atol=3e-2)


def test_a_caller_s_workspace_takes_the_written_out_hit_on_the_gpu():
    """decode_attention with the caller's `workspace=` (tilesafe tensors) and out=: from the third
    call the plan's hit is the written-out one; each call computes its own query's attention."""
    k, v = _r(8, 1024, 128, seed=3), _r(8, 1024, 128, seed=4)
    n = torch.tensor([1000], device="cuda", dtype=torch.int32)
    out = torch.empty(32, 128, device="cuda", dtype=torch.bfloat16)
    tk.decode_attention.plans.plans.clear()
    with ts.backend("triton"), torch.no_grad():
        ws = tk.decode_workspace(out, k)
        for seed in range(6):
            q = _r(32, 128, seed=20 + seed)
            out.fill_(float("nan"))
            got = tk.decode_attention(q, k, v, n, out=out, workspace=ws)
            assert got is out
            want = F.scaled_dot_product_attention(q[None, :, None], k[None, :, :1000], v[None, :, :1000],
                                                  enable_gqa=True)[0, :, 0]
            torch.testing.assert_close(got.float(), want.float(), rtol=3e-2, atol=3e-2)
    hits = [p.hit for p in tk.decode_attention.plans.plans.values() if p.hit]
    assert hits and all(h.unrolled is not None for h in hits)
    tk.decode_attention.plans.plans.clear()
