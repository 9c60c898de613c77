"""The config model on the GPU (issue 22): on shapes no tuned entry was made for, the
library's call (the model's choice) and each of the model's best four candidates compile,
launch and match torch; the first-use autotune times them, caches its choice on disk, and
a captured `ts.graph()` of the tuned call replays it."""
import json

import pytest
import torch
import torch.nn.functional as F

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.kernels import config_model as cm
from tilesafe.kernels import first_use

pytestmark = pytest.mark.gpu
GEMMS = [cm.Gemm(777, 3072, 1536), cm.Gemm(3001, 1600, 6400), cm.Gemm(5, 1600, 6400), cm.Gemm(1, 4672, 4544),
         # 16 < M <= 128: few tiles split into one wave (64 x 128 x 128 in three, two kernels), the
         # streaming rule's 3-stage one-wave pipeline, its 32-row tiles in three slices added up by the
         # last one (one launch), and its 64 x 128 tiles on a held-out weight
         cm.Gemm(72, 2560, 9728), cm.Gemm(72, 19456, 2560), cm.Gemm(25, 2560, 4096), cm.Gemm(83, 4608, 3584),
         # the autotune's extra candidates: the balanced split (96 tiles in four slices, 3 stages, one
         # launch; ranked() of 72 x 2560 x 9728 and 83 x 4608 x 3584 above holds one too); the
         # short-K GEMV forms 16 x 128, 8 x 256, 16 x 256 (on a K of 1600: a ragged last column
         # tile and a part K tile)
         cm.Gemm(125, 6144, 4096), cm.Gemm(1, 16384, 1024), cm.Gemm(1, 9000, 1600)]
FLASH = [cm.Attention(2, 28, 4, 777, 777, 128, True), cm.Attention(1, 71, 1, 1211, 1211, 64, False)]


def _gemm_inputs(s: cm.Gemm):
    g = torch.Generator(device="cuda").manual_seed(s.m + s.n)
    x = torch.randn(s.m, s.k, device="cuda", generator=g).bfloat16()
    w = (torch.randn(s.n, s.k, device="cuda", generator=g) * s.k ** -0.5).bfloat16()
    return x, w


def _close(got, want, tol=2e-2):
    err = torch.linalg.vector_norm(got.float() - want.float()) / torch.linalg.vector_norm(want.float())
    assert float(err) < tol, float(err)


@pytest.mark.parametrize("shape", GEMMS, ids=str)
def test_model_configs_of_held_out_gemms_run_and_match_torch(shape):
    x, w = _gemm_inputs(shape)
    want = F.linear(x.float(), w.float())
    with ts.backend("triton"):
        _close(tk.linear(x, w), want)                               # the library's own choice: the model's
        for cfg in cm.ranked(shape, 4):                             # the autotune's candidates
            _close(tk.linear(x, w, config=cfg), want)


@pytest.mark.parametrize("shape", FLASH, ids=str)
def test_model_configs_of_held_out_attention_run_and_match_sdpa(shape):
    g = torch.Generator(device="cuda").manual_seed(shape.sq)
    q = torch.randn(shape.batch, shape.heads, shape.sq, shape.d, device="cuda", generator=g).bfloat16()
    k, v = (torch.randn(shape.batch, shape.kv_heads, shape.sk, shape.d, device="cuda", generator=g).bfloat16()
            for _ in range(2))
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=shape.causal, enable_gqa=True)
    with ts.backend("triton"):
        _close(tk.flash_attention(q, k, v, causal=shape.causal), want)
        for cfg in cm.ranked(shape, 4):
            _close(tk.flash_attention(q, k, v, causal=shape.causal, config=cfg), want)


def test_model_decode_config_runs_and_matches_sdpa():
    h, hkv, ctx, d = 14, 2, 633, 64
    q = torch.randn(h, d, device="cuda").bfloat16()
    kc, vc = (torch.randn(hkv, ctx, d, device="cuda").bfloat16() for _ in range(2))
    want = F.scaled_dot_product_attention(q[None, :, None].float(), kc[None].float(), vc[None].float(),
                                          enable_gqa=True).view(h, d)
    with ts.backend("triton"):
        _close(tk.decode_attention(q, kc, vc, ctx), want)
        for cfg in cm.ranked(cm.Decode(h, hkv, ctx, d), 4):
            _close(tk.decode_attention(q, kc, vc, ctx, config=cfg), want)


def test_decode_splits_that_fill_the_slots_match_sdpa():
    """MHA over a long cache (25 KV heads, 10918 keys: 10 splits of 1152 keys, the last ragged)."""
    h, ctx, d = 25, 10918, 64
    q = torch.randn(h, d, device="cuda").bfloat16()
    kc, vc = (torch.randn(h, ctx, d, device="cuda").bfloat16() for _ in range(2))
    want = F.scaled_dot_product_attention(q[None, :, None].float(), kc[None].float(), vc[None].float()).view(h, d)
    with ts.backend("triton"):
        _close(tk.decode_attention(q, kc, vc, ctx), want)
        _close(tk.decode_attention(q, kc, vc, torch.tensor([ctx - 700], device="cuda")),
               F.scaled_dot_product_attention(q[None, :, None].float(), kc[None, :, :ctx - 700].float(),
                                              vc[None, :, :ctx - 700].float()).view(h, d))


def test_first_use_tuning_caches_its_choice_and_a_graph_replays_it(tmp_path, monkeypatch):
    from tilesafe.settings import Settings
    monkeypatch.setattr(first_use, "SETTINGS", Settings.from_env({"TILESAFE_CACHE_DIR": str(tmp_path)}))
    first_use.forget()
    shape = cm.Gemm(555, 2560, 2048)
    x, w = _gemm_inputs(shape)
    out = torch.empty(shape.m, shape.n, device="cuda", dtype=torch.bfloat16)
    want = F.linear(x.float(), w.float())
    try:
        with ts.backend("triton"), tk.first_use_tuning():
            _close(tk.linear(x, w, out=out), want)
            table = json.loads((tmp_path / "library" / f"{configs_gpu()}.json").read_text())
            (key, entry), = table["matmul"].items()
            assert key == "bf16/1024/2560x2048" and entry["time_ms"] > 0
            out.zero_()
            with ts.graph() as g:
                tk.linear(x, w, out=out)
            g.replay()
            torch.cuda.synchronize()
            _close(out, want)
    finally:
        first_use.forget()


def configs_gpu():
    from tilesafe.kernels import configs
    return configs.gpu_name()
