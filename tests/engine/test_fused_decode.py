"""The decode step's fused layer (`Qwen3Model._forward_fused`) and greedy LM head: which
kernels a step launches, and that it gives what the unfused layer gives (float32, CPU).
transformers is the oracle of the greedy tokens in test_llm_greedy.py; here the fused step
is checked against the unfused one (FUSED_ROWS = 0) on the same cache, and a sampled step
still goes through the sampler."""
import pytest
import torch

import tilesafe.engine.model as engine_model
from tilesafe.engine import LLM, SamplingParams

UNFUSED = ("add_rms_norm_inplace_kernel", "add_rms_norm_kernel", "binary_kernel", "rms_norm_kernel")


def params(**kw):
    """Sampling parameters as the engine resolves them (no checkpoint defaults)."""
    return SamplingParams(**kw).resolved({})


def llm_with_cache(checkpoint):
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=2, progress=False)
    torch.manual_seed(1)
    with torch.inference_mode():
        for k, v in zip(llm.model.cache.k, llm.model.cache.v):     # (S, L, HKV, D) cache contents to attend to
            k.copy_(torch.randn_like(k))
            v.copy_(torch.randn_like(v))
    return llm


def one_row_greedy_step(checkpoint, launched_kernels, temperature=0.0):
    """The kernels of one one-row step (greedy by default)."""
    llm = llm_with_cache(checkpoint)
    llm.sampler.set_rows([params(temperature=temperature)], [0])
    seen = launched_kernels()
    with torch.inference_mode():
        llm.decode_steps.run([5], [3])
    return seen, llm.config.num_layers


def fused_gemvs(seen):
    return sum(k in ("fused_skinny_kernel", "fused_split_kernel") for k in seen)


def test_an_unmeasured_shape_keeps_the_norms_apart_and_the_silu_prologue(checkpoint, launched_kernels):
    """NORM_PROLOGUE = SILU_PROLOGUE = None and a shape DECODE_FORMS does not list (the tiny
    model): each norm its own kernel, SiLU-mul the down GEMV's prologue (DEFAULT_FORM)."""
    seen, layers = one_row_greedy_step(checkpoint, launched_kernels)
    assert fused_gemvs(seen) == 2 * layers and seen.count("rms_norm_kernel") == 2 * layers + 1
    assert "binary_kernel" not in seen
    assert seen[-3:] == ["rms_norm_kernel", "argmax_gemv_kernel", "argmax_rows_kernel"]


def test_a_listed_shape_takes_its_measured_form(checkpoint, monkeypatch, launched_kernels):
    """DECODE_FORMS[(hidden, intermediate)]: Qwen3-0.6B's form (every norm folded, SiLU-mul the
    prologue: four fused GEMVs a layer and no small kernel between them), then 4B's (the qkv
    norm folded, SiLU-mul its own kernel), given here to the tiny model's shape (64, 96)."""
    monkeypatch.setitem(engine_model.DECODE_FORMS, (64, 96), engine_model.DECODE_FORMS[(1024, 3072)])
    seen, layers = one_row_greedy_step(checkpoint, launched_kernels)
    assert fused_gemvs(seen) == 4 * layers
    assert not [k for k in seen if k in UNFUSED], seen
    assert seen[-2:] == ["argmax_gemv_kernel", "argmax_rows_kernel"]
    monkeypatch.setitem(engine_model.DECODE_FORMS, (64, 96), engine_model.DECODE_FORMS[(2560, 9728)])
    seen, layers = one_row_greedy_step(checkpoint, launched_kernels)
    assert fused_gemvs(seen) == 3 * layers and seen.count("rms_norm_kernel") == layers + 1
    assert seen.count("binary_kernel") == layers                       # silu_mul, once a layer
    assert seen[-3:] == ["rms_norm_kernel", "argmax_gemv_kernel", "argmax_rows_kernel"]


def test_the_norm_prologue_can_be_chosen_per_gemv(checkpoint, monkeypatch, launched_kernels):
    monkeypatch.setattr(engine_model, "NORM_PROLOGUE", {"qkv", "lm_head"})
    seen, layers = one_row_greedy_step(checkpoint, launched_kernels)
    assert fused_gemvs(seen) == 3 * layers and seen.count("rms_norm_kernel") == layers      # before gate/up only
    assert seen[-2:] == ["argmax_gemv_kernel", "argmax_rows_kernel"]


def test_one_row_runs_the_fused_epilogues_with_the_norms_apart(checkpoint, monkeypatch, launched_kernels):
    """FUSED_ROWS = 1, NORM_PROLOGUE = False: a one-row greedy step fuses the residual adds
    and SiLU-mul into the o and down GEMVs, runs each norm as its own kernel and takes the
    token from the LM head after the final norm."""
    monkeypatch.setattr(engine_model, "NORM_PROLOGUE", False)
    llm = llm_with_cache(checkpoint)
    llm.sampler.set_rows([params(temperature=0)], [0])
    seen = launched_kernels()
    with torch.inference_mode():
        llm.decode_steps.run([5], [3])
    layers = llm.config.num_layers
    assert sum(k in ("fused_skinny_kernel", "fused_split_kernel") for k in seen) == 2 * layers
    assert seen.count("rms_norm_kernel") == 2 * layers + 1
    assert not [k for k in seen if k in ("add_rms_norm_inplace_kernel", "add_rms_norm_kernel", "binary_kernel")]
    assert seen[-3:] == ["rms_norm_kernel", "argmax_gemv_kernel", "argmax_rows_kernel"]


def test_two_rows_run_the_unfused_layer(checkpoint, launched_kernels):
    """FUSED_ROWS = 1: the fused GEMVs' 2..16-row form was slower on the H200 than the
    unfused sequence, so a batch of two takes `_forward`."""
    llm = llm_with_cache(checkpoint)
    llm.sampler.set_rows([params(temperature=0)] * 2, [0, 0])
    seen = launched_kernels()
    with torch.inference_mode():
        llm.decode_steps.run([5, 9], [3, 7])
    assert not [k for k in seen if k.startswith("fused_")], seen


def test_a_greedy_step_is_four_gemvs_a_layer_and_no_logits(checkpoint, monkeypatch, launched_kernels):
    """With the norm prologue on (and the fused layer for two rows)."""
    monkeypatch.setattr(engine_model, "FUSED_ROWS", 16)
    monkeypatch.setattr(engine_model, "NORM_PROLOGUE", True)
    llm = llm_with_cache(checkpoint)
    llm.sampler.set_rows([params(temperature=0)] * 2, [0, 0])
    seen = launched_kernels()
    with torch.inference_mode():
        llm.decode_steps.run([5, 9], [3, 7])
    layers = llm.config.num_layers
    assert not [k for k in seen if k in UNFUSED], seen
    assert sum(k in ("fused_skinny_kernel", "fused_split_kernel") for k in seen) == 4 * layers
    assert seen[-2:] == ["argmax_gemv_kernel", "argmax_rows_kernel"]      # the LM head: ids, no sample
    assert "sample_kernel" not in seen and "skinny_kernel" not in seen


@pytest.mark.parametrize("fold", [False, True])
def test_a_sampled_step_still_samples_from_the_logits(checkpoint, monkeypatch, launched_kernels, fold):
    """With the final norm apart or as the LM head GEMV's prologue."""
    monkeypatch.setattr(engine_model, "NORM_PROLOGUE", fold)
    llm = llm_with_cache(checkpoint)
    llm.sampler.set_rows([params(temperature=0.8)], [3])
    seen = launched_kernels()
    with torch.inference_mode():
        llm.decode_steps.run([5], [3])
    head = [seen[-2]] if fold else seen[-3:-1]
    assert head == (["fused_skinny_kernel"] if fold else ["rms_norm_kernel", "skinny_kernel"]), seen[-3:]
    assert seen[-1] == "sample_kernel" and "argmax_gemv_kernel" not in seen


@pytest.mark.parametrize("variant", [{"NORM_PROLOGUE": False}, {"SILU_PROLOGUE": False}, {"FUSED_ROWS": 0}])
def test_the_fused_step_gives_the_unfused_steps_tokens(checkpoint, monkeypatch, variant):
    """Greedy and sampled rows, the fused layer with the norm prologue (for two rows) against
    the norms as their own kernels (NORM_PROLOGUE False), SiLU-mul as its own kernel
    (SILU_PROLOGUE False) and the unfused layer (FUSED_ROWS = 0), on the same cache."""
    monkeypatch.setattr(engine_model, "FUSED_ROWS", 16)
    monkeypatch.setattr(engine_model, "NORM_PROLOGUE", True)
    runs = {}
    for fused in (True, False):
        if not fused:
            for name, value in variant.items():
                monkeypatch.setattr(engine_model, name, value)
        llm = llm_with_cache(checkpoint)
        with torch.inference_mode():
            for name, rows in (("greedy", [params(temperature=0)] * 2),
                               ("sampled", [params(temperature=0.9, seed=5)] * 2)):
                llm.sampler.set_rows(rows, [5, 5])
                llm.sampler.set_steps([0, 0])
                runs[fused, name] = llm.decode_steps.run([5, 9], [3, 7], [1, 0])
    for name in ("greedy", "sampled"):
        (tf, lf), (tu, lu) = runs[True, name], runs[False, name]
        assert tf == tu
        assert lf == pytest.approx(lu, abs=1e-4)
