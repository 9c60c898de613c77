"""The two-launch library calls that pass results through the device's scratch (a vocabulary-long
softmax row's statistics, split-K partial products) take their plan's written-out hit on the
GPU (kernels/call_hits_unrolled.py): from the fourth call CallHit's loops never run, and each
call computes its own values (the scratch reused call after call, ordered by S9/S10). Run with
`pytest -m gpu`."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.kernels import call_recording as R
from tilesafe.kernels.call_hits import CallHit

from gpu_oracles import rand_cuda as _r

pytestmark = pytest.mark.gpu

CASES = {   # name: (the planned function, inputs, call(t, out or None), oracle(t) in fp32)
    # A Qwen3 vocabulary row: past the GPU row_max, statistics per chunk then the pass.
    "softmax": (tk.softmax, lambda s: dict(x=_r(1, 151936, seed=s)), lambda t, o: tk.softmax(t["x"], out=o),
                lambda t: torch.softmax(t["x"].float(), -1)),
    # (128, 4096) @ (4096, 2560) bf16: the H200 table's config splits K three ways (partials, then their sum).
    "matmul": (tk.matmul, lambda s: dict(a=_r(128, 4096, seed=s), b=_r(4096, 2560, seed=s + 1)),
               lambda t, o: tk.matmul(t["a"], t["b"], out=o), lambda t: t["a"].float() @ t["b"].float()),
}


@pytest.mark.parametrize("given_out", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_a_call_through_the_scratch_takes_the_written_out_hit_on_the_gpu(monkeypatch, case, given_out):
    fn, make, call, oracle = CASES[case]
    walked = []
    real_walk = CallHit._walk
    monkeypatch.setattr(CallHit, "_walk", lambda self, places: walked.append(1) or real_walk(self, places))
    fn.plans.plans.clear()
    t = make(1)
    want_shape = oracle(t).shape
    out = torch.empty(want_shape, device="cuda", dtype=torch.bfloat16) if given_out else None
    with ts.backend("triton"), torch.no_grad():
        for seed in range(7):
            for name, v in make(10 * seed + 2).items():
                t[name].copy_(v)                            # the same memory, each call's own values
            if given_out:
                out.fill_(float("nan"))                     # poisoned: written by the call
            walked.clear()
            got = call(t, out)
            assert got is out if given_out else got.shape == want_shape
            want = oracle(t)
            if case == "softmax":
                torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=1e-7)
            else:
                torch.testing.assert_close(got.float(), want, rtol=3e-2, atol=3e-2)
            if seed >= 4:
                (plan,) = fn.plans.plans.values()
                assert sum(type(s) is not tuple for s in plan.steps) == 2, "no longer two launches"
                assert any(kind == R.SCRATCH for kind, _ in plan.roots), "no longer through the scratch"
                assert plan.hit and plan.hit.unrolled is not None and walked == []
    fn.plans.plans.clear()
