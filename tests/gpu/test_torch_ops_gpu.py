"""`torch.ops.tilesafe.*` on the GPU: a model compiled by Inductor (`fullgraph=True`, under
`torch.inference_mode()`) against the same model in eager torch, and `_out` ops captured in
a CUDA graph that torch itself captures (`torch.cuda.graph`), whose replays follow torch's
stream order. Run with `pytest -m gpu`."""
import pytest
import torch
import torch.nn.functional as F

import tilesafe.kernels  # noqa: F401  (registers torch.ops.tilesafe)

pytestmark = pytest.mark.gpu
ops = torch.ops.tilesafe


def _weights(vocab, hidden, inter, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = lambda *shape: (torch.randn(*shape, generator=g) * 0.2).cuda()   # noqa: E731
    return dict(table=p(vocab, hidden), w_norm=p(hidden), w_up=p(2 * inter, hidden), w_down=p(hidden, inter),
                head=p(vocab, hidden))


def _block_tilesafe(wt, ids, residual):
    h = ops.embedding(ids, wt["table"])                              # (T, hidden)
    y = torch.empty_like(h)
    ops.add_rms_norm_inplace(y, h, residual, wt["w_norm"], 1e-6)     # residual += h; y = norm(residual)
    gu = ops.linear(y, wt["w_up"])                                   # (T, 2 * inter)
    inter = gu.shape[-1] // 2
    a = ops.silu_mul(gu[:, :inter], gu[:, inter:])                   # (T, inter)
    logits = ops.linear(ops.linear(a, wt["w_down"]), wt["head"])     # (T, vocab)
    return ops.softmax(logits, -1), ops.argmax(logits)


def _block_torch(wt, ids, residual):
    h = F.embedding(ids, wt["table"])
    residual += h
    y = F.rms_norm(residual, (h.shape[-1],), wt["w_norm"], 1e-6)
    gu = F.linear(y, wt["w_up"])
    inter = gu.shape[-1] // 2
    logits = F.linear(F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], wt["w_down"]), wt["head"])
    return logits.softmax(-1), logits.argmax(-1).to(torch.int32)


def test_inductor_compiles_a_model_of_tilesafe_ops_fullgraph():
    """Inductor here (CI on the CPU uses aot_eager: Inductor's C++ compile is slow there)."""
    wt = _weights(vocab=1000, hidden=256, inter=512)
    ids = torch.tensor([3, 17, 999, 0, 512, 7, 7], device="cuda")
    r0 = torch.randn(7, 256, device="cuda")
    torch._dynamo.reset()
    compiled = torch.compile(_block_tilesafe, fullgraph=True, backend="inductor")
    with torch.inference_mode():
        r_compiled, r_eager = r0.clone(), r0.clone()
        probs, tokens = compiled(wt, ids, r_compiled)
        want_probs, want_tokens = _block_torch(wt, ids, r_eager)
    torch.cuda.synchronize()
    torch.testing.assert_close(r_compiled, r_eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(probs, want_probs, rtol=1e-3, atol=1e-5)
    assert torch.equal(tokens, want_tokens)


def test_out_ops_replay_in_a_graph_torch_captures_in_its_stream_order():
    """Captured by torch (not ts.graph()): replays run on the replaying stream, after the
    torch copy that refills the static input and before the torch op that reads the
    result, as any op in the graph; tilesafe's own tracking does not see replays."""
    n, k = 64, 256
    w, w_norm = torch.randn(2 * n, k, device="cuda") * 0.1, torch.randn(k, device="cuda")
    x_static = torch.empty(8, k, device="cuda")
    y, gu, a = (torch.empty(8, k, device="cuda"), torch.empty(8, 2 * n, device="cuda"),
                torch.empty(8, n, device="cuda"))
    total = torch.empty(8, device="cuda")

    def step():
        ops.rms_norm_out(y, x_static, w_norm, 1e-6)
        ops.linear_out(gu, y, w)
        ops.silu_mul_out(a, gu[:, :n], gu[:, n:])
        torch.sum(a, -1, out=total)                 # a torch op reading the tilesafe result

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):                      # warm up (compiles) on the capture stream
        x_static.copy_(torch.randn(8, k, device="cuda"))
        step()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        step()
    for seed in range(3):
        x = torch.randn(8, k, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        x_static.copy_(x)                           # torch's stream order: before the replay
        g.replay()
        yy = F.rms_norm(x, (k,), w_norm, 1e-6)
        gg = F.linear(yy, w)
        want = (F.silu(gg[:, :n]) * gg[:, n:]).sum(-1)
        torch.testing.assert_close(total, want, rtol=1e-4, atol=1e-4)


def test_eager_ops_on_cuda_tensors_match_torch_also_in_inference_mode():
    x, w = torch.randn(4, 1000, device="cuda"), torch.randn(1000, device="cuda")
    torch.testing.assert_close(ops.exp(x), x.exp(), rtol=1e-5, atol=1e-6)
    with torch.inference_mode():
        xi = x.clone()
        got = ops.rms_norm(xi, w)
        out = torch.full_like(xi, float("nan"))
        ops.add_out(out, xi, xi)
    torch.testing.assert_close(got, F.rms_norm(x, (1000,), w, 1e-6), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, 2 * x)
