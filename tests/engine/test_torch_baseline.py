"""The plain-PyTorch decode step of `benchmarks/torch_qwen3.py` — the baseline and the
correctness check of `benchmarks/engine.py` — gives transformers' greedy tokens on the
engine's own weight tensors (float32, CPU, where each step runs eagerly)."""
import sys
from pathlib import Path

from tilesafe.engine import LLM

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from torch_qwen3 import TorchQwen3Step  # noqa: E402


def test_torch_baseline_gives_transformers_greedy_tokens(checkpoint, hf_greedy):
    folder, hf = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=1, progress=False)
    prompt = [3, 17, 5, 60, 2]
    assert TorchQwen3Step(llm, 32).greedy(prompt, 6) == hf_greedy(hf, prompt, 6)[0]
