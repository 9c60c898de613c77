"""A Qwen3 config.json, read and validated into the few numbers the model needs.

Both spellings are accepted: the Hub's releases (`rope_theta` at the top level,
`torch_dtype`) and current transformers (`rope_parameters: {rope_theta, rope_type}`,
`dtype`). Anything the engine does not implement — another architecture (Llama, the Qwen3
MoE), attention biases, sliding windows, scaled RoPE — is refused naming the field, rather
than run as a silently different model.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .errors import checkpoint_error

ARCHITECTURE = "Qwen3ForCausalLM"


@dataclass(frozen=True, slots=True)
class Qwen3Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    dtype: str | None             # the checkpoint's stored dtype as config.json says ("bfloat16"), if it says

    @classmethod
    def from_dir(cls, model_dir) -> "Qwen3Config":
        path = Path(model_dir) / "config.json"
        if not path.is_file():
            raise checkpoint_error(f"no config.json in {model_dir}",
                                   help="pass a folder holding a Hugging Face Qwen3 checkpoint")
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise checkpoint_error(f"{path} is not valid JSON: {e}",
                                   help="restore config.json from the model's release") from None
        if not isinstance(raw, dict):
            raise checkpoint_error(f"{path} must hold a JSON object, got {type(raw).__name__}",
                                   help="config.json is the model's settings as one object, as save_pretrained "
                                        "writes it")
        return cls.from_dict(raw, str(path))

    @classmethod
    def from_dict(cls, raw: dict, where: str = "config.json") -> "Qwen3Config":
        _check_architecture(raw, where)
        f = _Fields(raw, where)
        heads = f.int("num_attention_heads")
        hidden = f.int("hidden_size")
        kv = f.int("num_key_value_heads", heads)
        if heads % kv:
            raise checkpoint_error(f"{where}: num_key_value_heads {kv} must divide num_attention_heads {heads}",
                                   help="restore config.json from the model's release")
        head_dim = f.int("head_dim", hidden // heads)
        if head_dim % 2:
            raise checkpoint_error(f"{where}: head_dim {head_dim} must be even (rotary embedding)",
                                   help="restore config.json from the model's release (Qwen3's head_dim is 128)")
        for name in ("attention_bias", "use_sliding_window"):
            if raw.get(name):
                raise checkpoint_error(f"{where}: {name}=true is not supported by the Qwen3 engine",
                                       help="use a dense Qwen3 checkpoint as released (no attention bias, no "
                                            "sliding window)")
        if raw.get("hidden_act", "silu") != "silu":
            raise checkpoint_error(f"{where}: hidden_act {raw['hidden_act']!r} is not supported (Qwen3 uses 'silu')",
                                   help="use a dense Qwen3 checkpoint as released")
        return cls(vocab_size=f.int("vocab_size"), hidden_size=hidden, intermediate_size=f.int("intermediate_size"),
                   num_layers=f.int("num_hidden_layers"), num_heads=heads, num_kv_heads=kv, head_dim=head_dim,
                   rms_norm_eps=f.float("rms_norm_eps", 1e-6), rope_theta=_rope_theta(raw, where),
                   max_position_embeddings=f.int("max_position_embeddings", 32768),
                   tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
                   dtype=raw.get("dtype") or raw.get("torch_dtype"))


def _check_architecture(raw: dict, where: str) -> None:
    archs = raw.get("architectures")
    model_type = raw.get("model_type")
    if archs is not None and archs != [ARCHITECTURE]:
        raise checkpoint_error(f"{where}: architectures {archs} is not supported; the engine runs {ARCHITECTURE}",
                               help="use a dense Qwen3 checkpoint (Qwen3-0.6B ... Qwen3-32B)")
    if model_type != "qwen3":
        raise checkpoint_error(f"{where}: model_type {model_type!r} is not supported; the engine runs 'qwen3'",
                               help="use a dense Qwen3 checkpoint (Qwen3-0.6B ... Qwen3-32B)")


def _rope_theta(raw: dict, where: str) -> float:
    """rope_theta from either spelling; any RoPE scaling is refused (not implemented)."""
    params = raw.get("rope_parameters") or {}
    if not isinstance(params, dict):
        raise checkpoint_error(f"{where}: rope_parameters must be an object, got {params!r}",
                               help='e.g. "rope_parameters": {"rope_type": "default", "rope_theta": 1000000}')
    scaling = raw.get("rope_scaling")
    kind = params.get("rope_type", "default")
    if scaling or kind != "default":
        raise checkpoint_error(f"{where}: RoPE scaling ({scaling or kind!r}) is not supported",
                               help="remove rope_scaling / use rope_type 'default'")
    theta = params.get("rope_theta", raw.get("rope_theta", 10000.0))
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not theta > 1:
        raise checkpoint_error(f"{where}: rope_theta must be a number > 1, got {theta!r}",
                               help="restore config.json from the model's release (Qwen3's rope_theta is 1000000)")
    return float(theta)


class _Fields:
    """Typed reads of config.json fields, each error naming the field."""

    def __init__(self, raw: dict, where: str):
        self.raw, self.where = raw, where

    def int(self, name: str, default: int | None = None) -> int:
        v = self.raw.get(name, default)
        if v is None:
            raise checkpoint_error(f"{self.where}: missing field {name!r}",
                                   help="restore config.json from the model's release")
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise checkpoint_error(f"{self.where}: {name} must be a positive integer, got {v!r}",
                                   help="restore config.json from the model's release")
        return v

    def float(self, name: str, default: float) -> float:
        v = self.raw.get(name, default)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise checkpoint_error(f"{self.where}: {name} must be a positive number, got {v!r}",
                                   help="restore config.json from the model's release")
        return float(v)
