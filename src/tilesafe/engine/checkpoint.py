"""Loading a Qwen3 safetensors checkpoint into packed engine weights.

Each tensor is read with `safetensors.safe_open(..., device=device)` straight onto the
device (a sharded checkpoint through its `model.safetensors.index.json`), checked against
the shape the config implies and converted to the requested dtype (a tensor-parallel rank
reads only its slice of each tensor: `get_slice`, `parallel.Shards.cuts`). The projections that
read the same input are packed into one matrix at load — q/k/v into `qkv`, gate/up into
`gate_up` — so a layer runs one GEMM for each instead of three and two.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import Qwen3Config
from .errors import checkpoint_error

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass(slots=True)
class LayerWeights:
    qkv: torch.Tensor          # ((H + 2 HKV) D, E)  q, k, v projections stacked
    o: torch.Tensor            # (E, H D)
    q_norm: torch.Tensor       # (D,)
    k_norm: torch.Tensor       # (D,)
    gate_up: torch.Tensor      # (2 I, E)  gate then up
    down: torch.Tensor         # (E, I)
    input_norm: torch.Tensor   # (E,)
    post_norm: torch.Tensor    # (E,)


@dataclass(slots=True)
class Weights:
    embed: torch.Tensor        # (V, E)
    layers: list[LayerWeights]
    norm: torch.Tensor         # (E,)
    lm_head: torch.Tensor      # (V, E); the embedding itself when tied


def weight_bytes(cfg: Qwen3Config, itemsize: int) -> int:
    """Bytes the packed weights take in a dtype of `itemsize` bytes (before allocating them)."""
    return sum(math.prod(shape) for shape in expected_shapes(cfg).values()) * itemsize


def expected_shapes(cfg: Qwen3Config) -> dict[str, tuple[int, ...]]:
    """Every tensor name of the checkpoint and its shape."""
    e, d, i = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, e), "model.norm.weight": (e,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, e)
    for n in range(cfg.num_layers):
        p = f"model.layers.{n}."
        shapes.update({p + "self_attn.q_proj.weight": (cfg.num_heads * d, e),
                       p + "self_attn.k_proj.weight": (cfg.num_kv_heads * d, e),
                       p + "self_attn.v_proj.weight": (cfg.num_kv_heads * d, e),
                       p + "self_attn.o_proj.weight": (e, cfg.num_heads * d),
                       p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,),
                       p + "mlp.gate_proj.weight": (i, e), p + "mlp.up_proj.weight": (i, e),
                       p + "mlp.down_proj.weight": (e, i),
                       p + "input_layernorm.weight": (e,), p + "post_attention_layernorm.weight": (e,)})
    return shapes


def load_weights(model_dir, cfg: Qwen3Config, dtype: torch.dtype, device: str, progress: bool = True,
                 shards=None) -> Weights:
    """Read, check, convert and pack every tensor of the checkpoint in `model_dir` (with
    `shards`, a `parallel.Shards`: only that rank's slices). A tensor the model would not use
    is refused: the checkpoint is another architecture's (attention biases, say) or its
    config.json describes another model, and ignoring it would compute something else."""
    files = tensor_files(model_dir)
    unused = sorted(name for name in files if name not in expected_shapes(cfg) and not _harmless(name, cfg))
    if unused:
        shown = ", ".join(repr(n) for n in unused[:4]) + (f" and {len(unused) - 4} more" if len(unused) > 4 else "")
        raise checkpoint_error(f"the checkpoint in {model_dir} holds {len(unused)} tensor(s) a Qwen3 model of this "
                               f"config.json does not use: {shown}",
                               help="load a Qwen3 checkpoint with the config.json saved with it (another "
                                    "architecture's weights, e.g. attention biases, would be ignored)")
    return build_weights(_FileSource(files, device), cfg, dtype, device, progress, shards)


def _harmless(name: str, cfg: Qwen3Config) -> bool:
    """Tensors some saves hold that change nothing: a tied model's copy of the embedding as
    lm_head, and rotary inverse frequencies (recomputed from rope_theta)."""
    return (name == "lm_head.weight" and cfg.tie_word_embeddings) or name.endswith("rotary_emb.inv_freq")


def weights_from_tensors(named_tensors, cfg: Qwen3Config, dtype: torch.dtype, device: str,
                         progress: bool = True, shards=None) -> Weights:
    """The same from (name, tensor) pairs made in memory (random weights built on the GPU):
    each is taken when the packing needs it, so at most a few unpacked tensors wait at once."""
    return build_weights(_StreamSource(iter(named_tensors)), cfg, dtype, device, progress, shards)


def build_weights(source, cfg: Qwen3Config, dtype, device, progress, shards=None) -> Weights:
    local = cfg if shards is None else shards.local_config(cfg)
    read = _Reader(source, expected_shapes(cfg), dtype, device, progress,
                   {} if shards is None else shards.cuts(cfg), expected_shapes(local))
    layers = [_layer(read, f"model.layers.{n}.") for n in range(cfg.num_layers)]
    embed = read("model.embed_tokens.weight")
    lm_head = embed if cfg.tie_word_embeddings else read("lm_head.weight")
    weights = Weights(embed, layers, read("model.norm.weight"), lm_head)
    read.close()
    return weights


def tensor_files(model_dir) -> dict[str, Path]:
    """Which file holds each tensor: the index's weight map, or every tensor of the one file."""
    root = Path(model_dir)
    if not root.is_dir():
        raise checkpoint_error(f"checkpoint folder {model_dir} does not exist",
                               help="pass a folder holding config.json and *.safetensors")
    index = root / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise checkpoint_error(f"{index} has no readable weight_map: {e}",
                                   help=f"restore {INDEX} from the model's release") from None
        files = {name: root / file for name, file in weight_map.items()}
        for path in sorted(set(files.values())):
            if not path.is_file():
                raise checkpoint_error(f"shard {path.name} listed in {index} is missing from {root}",
                                       help="download or copy the missing shard into the folder")
        return files
    single = root / SINGLE
    if not single.is_file():
        raise checkpoint_error(f"no {SINGLE} or {INDEX} in {root}",
                               help="save the model with save_pretrained(..., safe_serialization=True)")
    from safetensors import safe_open
    try:
        with safe_open(str(single), framework="pt") as f:
            return {name: single for name in f.keys()}
    except Exception as e:   # a corrupt or truncated file: safetensors' own error type, from its header
        raise checkpoint_error(f"cannot read {single}: {e}",
                               help="the file is corrupt or cut short (an interrupted download or copy): "
                                    "fetch or save it again") from None


class _FileSource:
    """Tensors read from their safetensors files (each opened once), straight onto `device`."""

    def __init__(self, files: dict, device: str):
        self.files, self.device, self.open = files, device, {}

    def get(self, name: str, cut=None):
        """(tensor, its full shape, the file's name) of `name`; with `cut` (axis, lo, hi) only
        that slice is read."""
        from safetensors import safe_open
        path = self.files.get(name)
        if path is None:
            raise checkpoint_error(f"tensor {name!r} is missing from the checkpoint",
                                   help="use the config.json saved with these weights (its num_hidden_layers and "
                                        "tie_word_embeddings say which tensors there are)")
        if path not in self.open:
            try:
                self.open[path] = safe_open(str(path), framework="pt", device=self.device)
            except Exception as e:   # safetensors raises its own error types for a corrupt header
                raise checkpoint_error(f"cannot read {path}: {e}",
                                       help="the file is corrupt or cut short (an interrupted download or copy): "
                                            "fetch or save it again") from None
        f = self.open[path]
        if name not in f.keys():
            raise checkpoint_error(f"tensor {name!r} is not in {path.name}, where the index says it is",
                                   help=f"the shards and {INDEX} come from different saves: fetch them again together")
        if cut is None:
            t = f.get_tensor(name)
            return t, tuple(t.shape), path.name
        part = f.get_slice(name)
        shape = tuple(part.get_shape())
        return _rank_slice(part, shape, cut), shape, path.name


class _StreamSource:
    """Tensors taken from an iterator of (name, tensor), those asked for later kept meanwhile."""

    def __init__(self, items):
        self.items, self.waiting = items, {}

    def get(self, name: str, cut=None):
        while name not in self.waiting:
            got = next(self.items, None)
            if got is None:
                raise checkpoint_error(f"tensor {name!r} is missing from the given tensors",
                                       help="pass every tensor of the model, named as in its safetensors files")
            self.waiting[got[0]] = got[1]
        t = self.waiting.pop(name)
        shape = tuple(t.shape)
        if cut is not None:
            part = _rank_slice(t, shape, cut)
            t = t if part is None else part.clone()    # the slice alone: the whole is dropped
        return t, shape, "the given tensors"


def _rank_slice(t, shape, cut):
    """`t`'s slice `cut` = (axis, lo, hi) of a 2-D tensor (or a safetensors slice), or None where
    the shape cannot hold it (the reader's shape check then refuses the tensor)."""
    axis, lo, hi = cut
    if len(shape) != 2 or hi > shape[axis]:
        return None
    return t[lo:hi] if axis == 0 else t[:, lo:hi]


class _Reader:
    """Named tensors from a source, checked against the config's shapes and converted."""

    def __init__(self, source, shapes, dtype, device, progress, cuts=None, local_shapes=None):
        from tqdm.auto import tqdm
        self.source, self.shapes, self.dtype, self.device = source, shapes, dtype, device
        self.cuts = cuts or {}                      # name -> (axis, lo, hi): a tensor-parallel rank's slice
        self.local_shapes = local_shapes or shapes  # the shapes this rank holds
        self.bar = tqdm(total=len(shapes), desc="Loading weights", unit="tensor", disable=None if progress else True)

    def __call__(self, name: str) -> torch.Tensor:
        t, shape, where = self.source.get(name, self.cuts.get(name))
        want = self.shapes[name]
        if shape != want:
            raise checkpoint_error(f"tensor {name!r} in {where} has shape {shape}, expected {want} "
                                   "from config.json",
                                   help="config.json and the weights are from different models: use the config.json "
                                        "saved with these weights")
        if t.dtype not in FLOAT_DTYPES:
            raise checkpoint_error(f"tensor {name!r} in {where} has dtype {t.dtype}; expected bfloat16, "
                                   "float16 or float32",
                                   help="quantized checkpoints are not supported: use the model's bf16 release")
        self.bar.update(1)
        return t.to(device=self.device, dtype=self.dtype)

    def close(self) -> None:
        self.bar.close()
        self.source = None


def _layer(read: _Reader, p: str) -> LayerWeights:
    a, m = p + "self_attn.", p + "mlp."
    return LayerWeights(qkv=_packed(read, [a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"]),
                        o=read(a + "o_proj.weight"), q_norm=read(a + "q_norm.weight"), k_norm=read(a + "k_norm.weight"),
                        gate_up=_packed(read, [m + "gate_proj.weight", m + "up_proj.weight"]),
                        down=read(m + "down_proj.weight"), input_norm=read(p + "input_layernorm.weight"),
                        post_norm=read(p + "post_attention_layernorm.weight"))


def _packed(read: _Reader, names: list[str]) -> torch.Tensor:
    """The named (rows, E) matrices stacked by rows into one buffer, filled one part at a time
    so no second full copy exists."""
    parts_shapes = [read.local_shapes[n] for n in names]
    rows = sum(s[0] for s in parts_shapes)
    out = torch.empty((rows, parts_shapes[0][1]), dtype=read.dtype, device=read.device)
    r = 0
    for name, shape in zip(names, parts_shapes):
        out[r:r + shape[0]].copy_(read(name))
        r += shape[0]
    return out
