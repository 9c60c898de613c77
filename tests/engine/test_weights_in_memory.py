"""Weights given as (name, tensor) pairs — how random weights are built on the GPU without a
checkpoint on disk — pack exactly as the same tensors read from safetensors files."""
import random

import pytest
import torch

from tilesafe.engine import CheckpointError
from tilesafe.engine.checkpoint import load_weights, weights_from_tensors
from tilesafe.engine.config import Qwen3Config


def test_pairs_in_any_order_equal_the_files(checkpoint):
    folder, hf = checkpoint()
    cfg = Qwen3Config.from_dir(folder)
    pairs = [(k, v.detach().clone()) for k, v in hf.state_dict().items() if k != "lm_head.weight" or
             not cfg.tie_word_embeddings]
    random.Random(0).shuffle(pairs)
    got = weights_from_tensors(pairs, cfg, torch.float32, "cpu", progress=False)
    want = load_weights(folder, cfg, torch.float32, "cpu", progress=False)
    for a, b in [(got.embed, want.embed), (got.norm, want.norm), (got.lm_head, want.lm_head)]:
        assert torch.equal(a, b)
    for la, lb in zip(got.layers, want.layers):
        for name in ("qkv", "o", "q_norm", "k_norm", "gate_up", "down", "input_norm", "post_norm"):
            assert torch.equal(getattr(la, name), getattr(lb, name)), name
    hd, kvd = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    assert torch.equal(got.layers[1].qkv[hd:hd + kvd], hf.model.layers[1].self_attn.k_proj.weight)


def test_a_missing_pair_is_named(checkpoint):
    folder, hf = checkpoint()
    cfg = Qwen3Config.from_dir(folder)
    pairs = [(k, v) for k, v in hf.state_dict().items() if k != "model.layers.0.mlp.up_proj.weight"]
    with pytest.raises(CheckpointError, match="'model.layers.0.mlp.up_proj.weight' is missing from the given"):
        weights_from_tensors(pairs, cfg, torch.float32, "cpu", progress=False)


@pytest.mark.parametrize("progress", [True, False])
def test_loading_counts_every_tensor_on_a_progress_bar(checkpoint, monkeypatch, progress):
    """The bar counts each checkpoint tensor once (tqdm shows it on a terminal: disable=None);
    progress=False disables it. Each tensor is opened on the requested device (no host copy first)."""
    import safetensors
    import tqdm.auto

    from tilesafe.engine.checkpoint import expected_shapes
    folder, _ = checkpoint("sharded", save={"max_shard_size": "20KB"})
    cfg = Qwen3Config.from_dir(folder)
    bars, devices = [], []

    class Bar:
        def __init__(self, total, desc, unit, disable):
            self.total, self.disable, self.done, self.closed = total, disable, 0, False
            bars.append(self)

        def update(self, n):
            self.done += n

        def close(self):
            self.closed = True
    real_open = safetensors.safe_open

    def safe_open(path, framework, device=None):          # None: the caller left the device out
        devices.append(device)
        return real_open(path, framework=framework, device=device or "cpu")
    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    monkeypatch.setattr(safetensors, "safe_open", safe_open)
    load_weights(folder, cfg, torch.float32, "cpu", progress=progress)
    (bar,) = bars
    assert bar.total == bar.done == len(expected_shapes(cfg)) and bar.closed
    assert bar.disable is (None if progress else True)
    assert devices and set(devices) == {"cpu"} and len(devices) == len(list(folder.glob("model-*.safetensors")))
