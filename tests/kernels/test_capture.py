"""A decode step of library calls with `out=` and workspaces captures into `ts.graph()` and
replays for new sequence lengths held in a device tensor (GPU only)."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from kernel_helpers import assert_close, randn

pytestmark = pytest.mark.gpu


def test_decode_step_replays_for_new_lengths():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    dev, dt = "cuda", "bf16"
    h, hkv, d, hidden, max_seq = 8, 2, 64, 256, 128
    x, w_norm = randn((1, hidden), dt, 1, dev), randn((hidden,), dt, 2, dev)
    wq = randn((h * d, hidden), dt, 3, dev, scale=0.05)
    kc, vc = randn((hkv, max_seq, d), dt, 4, dev), randn((hkv, max_seq, d), dt, 5, dev)
    length = torch.tensor([1], dtype=torch.int32, device=dev)
    xn, q = torch.empty(1, hidden, dtype=torch.bfloat16, device=dev), torch.empty(1, h * d, dtype=torch.bfloat16, device=dev)
    o, tok = torch.empty(h, d, dtype=torch.bfloat16, device=dev), torch.empty(1, dtype=torch.int32, device=dev)
    ws = tk.decode_workspace(q.view(h, d), kc)
    aws = tk.argmax_workspace(o.view(1, h * d))

    def step():
        tk.rms_norm(x, w_norm, out=xn)
        tk.linear(xn, wq, out=q)
        tk.decode_attention(q.view(h, d), kc, vc, length, out=o, workspace=ws)
        tk.argmax(o.view(1, h * d), out=tok, workspace=aws)

    with ts.backend("triton"):
        eager = {}
        for n in (5, 77, 128):                   # compile and record eager results outside the capture
            length.fill_(n)
            step()
            eager[n] = (o.clone(), tok.clone())
        with ts.graph() as g:
            step()
        for n in (128, 5, 77):
            length.fill_(n)
            g.replay().sync()
            assert_close(o, eager[n][0], dt, rtol=0, atol=0)
            assert torch.equal(tok, eager[n][1])


def test_split_k_and_long_softmax_capture_after_a_warm_up():
    """Calls that use the device scratch (a split-K GEMV, a vocabulary-wide softmax) allocate
    nothing once a warm-up call of the shape has grown it: they capture and replay exactly."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    dev, dt = "cuda", "bf16"
    x, w = randn((1, 9728), dt, 6, dev), randn((2560, 9728), dt, 7, dev, scale=0.01)   # few outputs: split K
    logits = randn((1, 151936), "f32", 8, dev)
    y = torch.empty(1, 2560, dtype=torch.bfloat16, device=dev)
    p = torch.empty(1, 151936, dtype=torch.float32, device=dev)
    split = {"split_k": 4}

    def step():
        tk.linear(x, w, out=y, config=split)
        tk.softmax(logits, out=p)

    with ts.backend("triton"):
        step()                                   # warm-up: compiles, grows the scratch
        want_y, want_p = y.clone(), p.clone()
        y.fill_(float("nan"))
        p.fill_(float("nan"))
        with ts.graph() as g:
            step()
        g.replay().sync()
        assert_close(y, want_y, dt, rtol=0, atol=0)
        assert_close(p, want_p, "f32", rtol=0, atol=0)
        assert_close(y, torch.nn.functional.linear(x.float(), w.float()), dt)
