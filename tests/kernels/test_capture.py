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
