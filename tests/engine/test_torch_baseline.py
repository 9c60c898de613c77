"""The plain-PyTorch decode step of `benchmarks/torch_qwen3.py` — the baseline and the
correctness check of `benchmarks/engine.py` — gives transformers' greedy tokens on the
engine's own weight tensors (float32, CPU, where each step runs eagerly)."""
import sys
from pathlib import Path

import torch

from tilesafe.engine import LLM

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from torch_qwen3 import (CompiledGlueMvTorchQwen3Step, CompiledGlueTorchQwen3Step,  # noqa: E402
                         CompiledMmTorchQwen3Step, CompiledTorchQwen3Step, LeanTorchQwen3Step, TorchQwen3Step)


def llm_with_uneven_norms(checkpoint, seed: int, final: bool) -> LLM:
    """A tiny float32 LLM on the CPU whose norm weights are not all ones (the layers' four, and the
    final norm's if `final`), so a swapped or misplaced norm changes the logits."""
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=1, progress=False)
    g = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        for layer in llm.model.w.layers:
            for norm in (layer.q_norm, layer.k_norm, layer.input_norm, layer.post_norm):
                norm.add_(torch.randn(norm.shape, generator=g) * 0.3)
        if final:
            llm.model.w.norm.add_(torch.randn(llm.model.w.norm.shape, generator=g) * 0.3)
    return llm


def test_torch_baseline_gives_transformers_greedy_tokens(checkpoint, hf_greedy):
    folder, hf = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=1, progress=False)
    prompt = [3, 17, 5, 60, 2]
    assert TorchQwen3Step(llm, 32).greedy(prompt, 6) == hf_greedy(hf, prompt, 6)[0]


def test_lean_torch_step_gives_the_plain_steps_logits(checkpoint):
    """The lean step (engine.py --torch-step lean) is the plain step's math: same logits at every
    position, in float32, with norm weights that are not all ones (so q/k norms cannot be swapped)
    and a cache length that is not a multiple of 16 (the mask is a slice of an aligned buffer)."""
    llm = llm_with_uneven_norms(checkpoint, seed=3, final=False)
    seq = [3, 17, 5, 60, 2, 9, 41, 11, 7]
    plain = TorchQwen3Step(llm, 21).teacher_forced_logits(seq)
    lean_step = LeanTorchQwen3Step(llm, 21)
    lean = lean_step.teacher_forced_logits(seq)
    assert lean.dtype == torch.float32 and lean.shape == plain.shape
    torch.testing.assert_close(lean, plain, rtol=1e-5, atol=1e-5 * float(plain.abs().max()))
    plain_step = TorchQwen3Step(llm, 21)
    plain_step.teacher_forced_logits(seq)
    for mine, theirs in zip(lean_step.k + lean_step.v, plain_step.k + plain_step.v):   # the same cache rows
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


def test_engine_bench_torch_step_flag_picks_the_step_and_the_gate_passes_with_lean():
    """engine.py --torch-step: compiled_mm by default (the fastest PyTorch step), plain and lean on
    request (then it is the gate's reference too: the gate must pass with it as with the plain step)."""
    import engine as bench
    import engine_check
    assert bench.TORCH_STEPS[bench.parse_args([]).torch_step] is CompiledMmTorchQwen3Step
    assert bench.TORCH_STEPS[bench.parse_args(["--torch-step", "plain"]).torch_step] is TorchQwen3Step
    assert bench.TORCH_STEPS[bench.parse_args(["--torch-step", "lean"]).torch_step] is LeanTorchQwen3Step
    llm = LLM.from_random("tiny", device="cpu", dtype="float32", max_model_len=16, max_num_seqs=1, progress=False)
    r = engine_check.check(llm, LeanTorchQwen3Step(llm, 16), [151, 2000, 30000, 7], 2)
    assert r["passed"], r["why"]
    assert r["first_step"]["max_rel"] < 1e-4 and r["torch_prefill_vs_baseline"]["max_rel"] < 1e-4
    assert r["teacher_forced"]["engine_tokens"] == r["baseline_tokens"]


def test_compiled_steps_functions_give_the_plain_steps_logits(checkpoint):
    """The compiled steps (engine.py --torch-step compiled, compiled_mm, compiled_glue(_mv)) run the plain
    step's math (compiled_mm's attention as matmuls and a softmax, not SDPA):
    their per-layer functions, here uncompiled (compile=False; the compiled run is the GPU test's),
    give the same float32 logits at every position and write the same cache rows, with norm weights
    that are not all ones (a swapped q/k norm or a wrong next-layer norm would show)."""
    llm = llm_with_uneven_norms(checkpoint, seed=4, final=True)
    seq = [3, 17, 5, 60, 2, 9, 41, 11, 7]
    plain_step = TorchQwen3Step(llm, 21)
    plain = plain_step.teacher_forced_logits(seq)
    for cls in (CompiledTorchQwen3Step, CompiledMmTorchQwen3Step, CompiledGlueTorchQwen3Step,
                CompiledGlueMvTorchQwen3Step):
        step = cls(llm, 21, compile=False)
        got = step.teacher_forced_logits(seq)
        assert got.dtype == torch.float32 and got.shape == plain.shape
        torch.testing.assert_close(got, plain, rtol=1e-5, atol=1e-5 * float(plain.abs().max()))
        for mine, theirs in zip(step.k + step.v, plain_step.k + plain_step.v):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


def test_engine_bench_torch_step_flag_offers_the_compiled_steps():
    import engine as bench
    assert bench.TORCH_STEPS[bench.parse_args(["--torch-step", "compiled"]).torch_step] is CompiledTorchQwen3Step
    assert bench.TORCH_STEPS[bench.parse_args(["--torch-step", "compiled_mm"]).torch_step] is CompiledMmTorchQwen3Step
    assert bench.TORCH_STEPS[bench.parse_args(["--torch-step", "compiled_glue"]).torch_step] \
        is CompiledGlueTorchQwen3Step
    assert bench.TORCH_STEPS[bench.parse_args(["--torch-step", "compiled_glue_mv"]).torch_step] \
        is CompiledGlueMvTorchQwen3Step


def test_engine_gate_passes_with_the_compiled_mm_steps_math_as_reference():
    """The default --torch-step's math (uncompiled here: compiling on the CPU is slow) is a reference
    the gate accepts, as it does the plain step."""
    import engine_check
    llm = LLM.from_random("tiny", device="cpu", dtype="float32", max_model_len=16, max_num_seqs=1, progress=False)
    r = engine_check.check(llm, CompiledMmTorchQwen3Step(llm, 16, compile=False), [151, 2000, 30000, 7], 2)
    assert r["passed"], r["why"]
    assert r["first_step"]["max_rel"] < 1e-4 and r["torch_prefill_vs_baseline"]["max_rel"] < 1e-4
    assert r["teacher_forced"]["engine_tokens"] == r["baseline_tokens"]
