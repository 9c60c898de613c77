"""engine.Sampler: SamplingParams rows on the device, sampled with tk.sample. The tokens of a
seeded request depend on its seed and step only (not on its row or its neighbours); greedy
rows (temperature below 1e-5, top_k 1) take the first maximum; an unseeded request keeps the
seed drawn for it."""
import random

import numpy as np
import torch

import tilesafe as ts
from tilesafe.engine.sampler import Sampler
from tilesafe.engine.sampling_params import SamplingParams


def params(**kw):
    return SamplingParams(**{"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_tokens": 4, **kw})


def test_rows_follow_their_request_not_their_position():
    torch.manual_seed(0)
    logits = torch.randn(3, 64)
    reqs = [params(seed=11, top_p=0.9), params(temperature=1e-6), params(seed=2**70 + 5, top_k=8, temperature=0.7)]
    with ts.backend("reference"):
        s = Sampler(4, "cpu")
        s.set_rows(reqs, [s.seed_for(p) for p in reqs])
        s.set_steps([5, 0, 9])
        tok, lp = torch.full((3,), -1, dtype=torch.int32), torch.full((3,), float("nan"))
        s(logits, tok, lp)
        order = [2, 0, 1]                                              # the same requests, rows permuted
        s.set_rows([reqs[i] for i in order], [reqs[i].seed for i in order[:2]] + [0])
        s.set_steps([9, 5, 0])
        tok2, lp2 = torch.empty(3, dtype=torch.int32), torch.empty(3)
        s(logits[order], tok2, lp2)
        one, one_lp = torch.empty(1, dtype=torch.int32), torch.empty(1)
        s(logits[:1], one, one_lp, first_row=1)                        # row 0's logits, request 0's row now
    assert one.item() == tok[0].item() and one_lp.item() == lp[0].item()
    assert tok[1] == torch.argmax(logits[1])                           # greedy: temperature below 1e-5
    assert tok2[:2].tolist() == [tok[2].item(), tok[0].item()]
    want = torch.log_softmax(logits.double(), -1)[torch.arange(3), tok.long()]
    np.testing.assert_allclose(lp.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_top_k_one_is_greedy_and_unseeded_requests_keep_a_drawn_seed():
    s = Sampler(2, "cpu", rng=random.Random(3))
    a, b = s.seed_for(params()), s.seed_for(params())
    assert a != b and 0 <= a < 2**63 and s.seed_for(params(seed=-4)) == -4
    s.set_rows([params(top_k=1), params(top_k=-1)], [a, b])
    assert s.temperature.tolist() == [0.0, 1.0] and s.top_k.tolist() == [1, 0]
