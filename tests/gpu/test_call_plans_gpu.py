"""Library call plans on the GPU (kernels/call_plans.py): the calls after the first of a
layout launch through the launch cache's kept entry and its LayoutLauncher (Triton's compiled
kernel started directly with the new call's pointers, runtime/prepared_launch.py). New torch
tensors every call, new memory every call; results against torch; work on two streams stays
ordered (S10); a call at another alignment class specializes again. Run with `pytest -m gpu`."""
import math

import pytest
import torch
import torch.nn.functional as F

import tilesafe as ts
import tilesafe.kernels as tk

from gpu_oracles import rand_cuda as _r, rms_norm_ref as _rms

pytestmark = pytest.mark.gpu


def _rope(x, pos, theta=1e6):
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    ang = pos.double()[:, None] * inv                                     # (T, D/2)
    cos, sin = torch.cos(ang)[:, None].float(), torch.sin(ang)[:, None].float()
    xf = x.float()
    x1, x2 = xf[..., :d // 2], xf[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)


def _decode(q, k, v, n):
    group = q.shape[0] // k.shape[0]
    kk = k[:, :n].float().repeat_interleave(group, 0)                      # (H, n, D)
    vv = v[:, :n].float().repeat_interleave(group, 0)
    s = torch.einsum("hd,hnd->hn", q.float(), kk) / math.sqrt(q.shape[1])
    return torch.einsum("hn,hnd->hd", s.softmax(-1), vv).to(q.dtype)


CASES = {
    "linear M=1": (lambda s: dict(x=_r(1, 512, seed=s), w=_r(384, 512, seed=s + 1)),
                   lambda t: tk.linear(t["x"], t["w"]), lambda t: F.linear(t["x"], t["w"])),
    "linear M=8": (lambda s: dict(x=_r(8, 512, seed=s), w=_r(384, 512, seed=s + 1)),
                   lambda t: tk.linear(t["x"], t["w"]), lambda t: F.linear(t["x"], t["w"])),
    "matmul": (lambda s: dict(a=_r(200, 256, seed=s), b=_r(256, 192, seed=s + 1)),
               lambda t: tk.matmul(t["a"], t["b"]), lambda t: t["a"] @ t["b"]),
    "bmm": (lambda s: dict(a=_r(4, 64, 32, seed=s), b=_r(4, 32, 64, seed=s + 1)),
            lambda t: tk.bmm(t["a"], t["b"]), lambda t: torch.bmm(t["a"], t["b"])),
    "rms_norm": (lambda s: dict(x=_r(2, 1024, seed=s), w=_r(1024, seed=s + 1)),
                 lambda t: tk.rms_norm(t["x"], t["w"]), lambda t: _rms(t["x"], t["w"])),
    "rope": (lambda s: dict(x=_r(1, 8, 128, seed=s), p=torch.tensor([37], device="cuda", dtype=torch.int32)),
             lambda t: tk.rope(t["x"], t["p"]), lambda t: _rope(t["x"], t["p"])),
    "embedding": (lambda s: dict(i=torch.tensor([3, 99], device="cuda", dtype=torch.int32), tab=_r(128, 256, seed=s)),
                  lambda t: tk.embedding(t["i"], t["tab"]), lambda t: F.embedding(t["i"].long(), t["tab"])),
    "argmax": (lambda s: dict(x=_r(1, 5000, seed=s, dtype=torch.float32)),
               lambda t: tk.argmax(t["x"]), lambda t: t["x"].argmax(-1).to(torch.int32)),
    "softmax": (lambda s: dict(x=_r(2, 3000, seed=s, dtype=torch.float32)),
                lambda t: tk.softmax(t["x"]), lambda t: t["x"].softmax(-1)),
    "decode_attention": (lambda s: dict(q=_r(8, 128, seed=s), k=_r(2, 256, 128, seed=s + 1),
                                        v=_r(2, 256, 128, seed=s + 2),
                                        n=torch.tensor([200], device="cuda", dtype=torch.int32)),
                         lambda t: tk.decode_attention(t["q"], t["k"], t["v"], t["n"]),
                         lambda t: _decode(t["q"], t["k"], t["v"], 200)),
    "flash_attention": (lambda s: dict(q=_r(1, 4, 64, 64, seed=s), k=_r(1, 4, 64, 64, seed=s + 1),
                                       v=_r(1, 4, 64, 64, seed=s + 2)),
                        lambda t: tk.flash_attention(t["q"], t["k"], t["v"], causal=True),
                        lambda t: F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_calls_of_a_seen_layout_with_new_memory_compute_what_torch_computes(case):
    make, call, oracle = CASES[case]
    with ts.backend("triton"), torch.no_grad():
        for seed in range(5):                                     # record, then plans on kept entries
            t = make(10 * seed)                                   # new memory every call
            got, want = call(t), oracle(t)
            if got.dtype in (torch.int32, torch.int64):
                assert torch.equal(got, want), case
            else:
                torch.testing.assert_close(got.float(), want.float(), rtol=3e-2, atol=3e-2)


def test_a_planned_call_on_a_side_stream_is_ordered_before_a_read_on_another():
    """A large product on a side stream, then a norm of its result on the default stream:
    the norm waits for the product (S10) although both launch on kept entries."""
    x, w, nw = _r(64, 4096, seed=1), _r(4096, 4096, seed=2), _r(4096, seed=3)
    with ts.backend("triton"), torch.no_grad():
        side = torch.cuda.Stream()
        for _ in range(6):                                        # the last ones on the LayoutLauncher
            h = torch.empty(64, 4096, device="cuda", dtype=torch.bfloat16)
            y = torch.empty_like(h)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                tk.linear(x, w, out=h)                            # (64, 4096) on the side stream
            tk.rms_norm(h, nw, out=y)                             # reads h on the default stream
            torch.cuda.synchronize()
            want = _rms(F.linear(x, w), nw)
            torch.testing.assert_close(y.float(), want.float(), rtol=3e-2, atol=3e-2)


def test_a_view_at_another_alignment_runs_its_own_specialization():
    base = _r(2 * 1024 + 8, seed=4)
    w = _r(1024, seed=5)
    with ts.backend("triton"), torch.no_grad():
        for _ in range(3):
            x = base[0:2048].view(2, 1024)
            torch.testing.assert_close(tk.rms_norm(x, w).float(), _rms(x, w).float(), rtol=3e-2, atol=3e-2)
        for _ in range(3):
            x = base[1:2049].view(2, 1024)                        # 2 bytes further: not 16-byte aligned
            torch.testing.assert_close(tk.rms_norm(x, w).float(), _rms(x, w).float(), rtol=3e-2, atol=3e-2)


@ts.kernel
def _scale_add(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], y: ts.Ref[ts.f32, ("N",)], s: float,
               B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * s + ts.load_tile_like(y, z))


def test_a_user_kernel_with_new_tensors_every_launch_computes_each_result():
    """From the third launch of a layout with the same scalars the launch cache starts the
    kernel through its LayoutLauncher: each launch still writes its own memory."""
    with ts.backend("triton"):
        for i in range(8):
            x, y = _r(4096, seed=i, dtype=torch.float32), _r(4096, seed=i + 50, dtype=torch.float32)
            z = torch.full((4096,), float("nan"), device="cuda")
            p = ts.from_torch(z).partition((1024,))
            _scale_add(p, ts.from_torch(x), ts.from_torch(y), 0.5)
            p.unpartition()
            torch.testing.assert_close(z, x * 0.5 + y)
