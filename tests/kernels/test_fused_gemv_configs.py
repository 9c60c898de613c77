"""The fused decode GEMVs (`rms_norm_linear`, `silu_mul_linear`, `linear(residual=)`) stream
the weight exactly as `linear` does for the same (N, K): the same resolved config, tiles,
K splits and prefetch — on the H200 (sm_90 compile target, no GPU needed: launches are
recorded, not run) and under first-use tuning, where the fused call must get the timed choice
of `linear`'s shape bucket, not the config model's untimed one. Their prologue and epilogue
then only add arithmetic to a memory-bound loop."""
import pytest
import torch

import tilesafe.kernels as tk
from tilesafe.backends.triton import targets
from tilesafe.kernels import first_use

BF = torch.bfloat16
E, I, QKV = 4096, 12288, 6144            # Qwen3-8B: hidden, intermediate, packed q/k/v width
CALLS = {   # projection: (plain linear, fused call) on the same rows and weight
    "qkv": (lambda m: tk.linear(e(m, E), e(QKV, E)),
            lambda m: tk.rms_norm_linear(e(m, E), e(E), e(QKV, E))),
    "o": (lambda m: tk.linear(e(m, E), e(E, E)),
          lambda m: tk.linear(e(m, E), e(E, E), residual=e(m, E))),
    "gate_up": (lambda m: tk.linear(e(m, E), e(2 * I, E)),
                lambda m: tk.rms_norm_linear(e(m, E), e(E), e(2 * I, E))),
    "down": (lambda m: tk.linear(e(m, I), e(E, I)),
             lambda m: tk.silu_mul_linear(e(m, 2 * I), e(E, I), residual=e(m, E))),
}


def e(*shape):
    return torch.empty(shape, dtype=BF)


def resolved(seen, call, m):
    seen.clear()
    with targets.compiling_for("sm_90"):
        call(m)
    return list(seen)


@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("proj", list(CALLS))
def test_a_fused_gemv_resolves_linears_config_on_the_h200(gemv_launches, proj, m):
    plain, fused = CALLS[proj]
    want, got = resolved(gemv_launches, plain, m), resolved(gemv_launches, fused, m)
    if (proj, m) == ("down", 1):     # the H200 measured the fused form's own tiles (bf16/4096x12288/gemv/silu)
        assert [(k, t, loop) for k, t, _, loop in got] == [
            ("fused_skinny_kernel", {"c": (1, 8)}, {"BK": 512, "DOT": False, "PREFETCH": True})]
        assert want[0][1] == {"c": (1, 4)}                 # linear keeps its own: 4 x 1024
        return
    assert want and got == want


def test_under_first_use_tuning_the_fused_call_gets_linears_timed_choice(gemv_launches, monkeypatch):
    """Tuning picks the model's last candidate here (a stand-in timer): a fused call that
    skipped tuning would run the model's first choice while `linear` runs the timed one.
    A weight no tuned entry was made for (3000 x 5000), so the shape bucket tunes."""
    def plain(m):
        return tk.linear(e(m, 5000), e(3000, 5000))

    def fused(m):
        return tk.silu_mul_linear(e(m, 10000), e(3000, 5000), residual=e(m, 3000))
    untuned = resolved(gemv_launches, plain, 1)
    picked = []

    def pick(family, key, candidates, run, gpu, timer=None):
        assert run is not None
        picked.append(key)
        return candidates[-1]
    monkeypatch.setattr(first_use, "wanted", lambda: True)
    monkeypatch.setattr(first_use, "pick", pick)
    got, want = resolved(gemv_launches, fused, 1), resolved(gemv_launches, plain, 1)
    assert len(picked) == 2 and picked[0] == picked[1]     # one shape bucket, tuned by either call
    assert want != untuned                                 # the timed choice is not the model's first
    assert got == want
