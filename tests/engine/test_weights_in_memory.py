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
