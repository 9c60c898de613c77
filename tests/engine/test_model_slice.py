"""The forward pass alone (prefill + greedy decode, one sequence) against transformers on CPU."""
import pytest
import torch

from tilesafe.engine.checkpoint import load_weights
from tilesafe.engine.config import Qwen3Config
from tilesafe.engine.kv_cache import KVCache
from tilesafe.engine.model import Activations, Qwen3Model
from tilesafe.engine.sampler import Sampler


def greedy(folder, prompt, n):
    cfg = Qwen3Config.from_dir(folder)
    w = load_weights(folder, cfg, torch.float32, "cpu", progress=False)
    cache = KVCache.allocate(cfg, 1, 32, torch.float32, "cpu")
    model = Qwen3Model(cfg, w, cache, Sampler(1, "cpu"))     # its rows start greedy (temperature 0)
    a = Activations.allocate(cfg, len(prompt), 1, torch.float32, "cpu")
    a.ids.copy_(torch.tensor(prompt))
    a.positions.copy_(torch.arange(len(prompt)))
    a.last.fill_(len(prompt) - 1)
    model.prefill(a, [0, len(prompt)])
    tokens, logprobs = [a.tokens.item()], [a.chosen.item()]
    b = Activations.allocate(cfg, 1, 1, torch.float32, "cpu")
    ws = model.decode_workspace(b)
    for pos in range(len(prompt), len(prompt) + n - 1):
        b.ids.fill_(tokens[-1])
        b.positions.fill_(pos)
        b.lens.fill_(pos + 1)
        b.slots.fill_(pos)                                   # slot 0: cache row = position
        model.decode(b, ws)
        tokens.append(b.tokens.item())
        logprobs.append(b.chosen.item())
    return tokens, logprobs


def test_prefill_and_greedy_decode_match_transformers(backend, checkpoint, hf_greedy):
    folder, hf = checkpoint()
    prompt = [3, 17, 5, 60, 2]
    want, want_lp = hf_greedy(hf, prompt, 6)
    with torch.no_grad():
        got, got_lp = greedy(folder, prompt, 6)
    assert got == want
    assert got_lp == pytest.approx(want_lp, abs=1e-3)
