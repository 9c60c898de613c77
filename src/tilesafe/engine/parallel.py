"""Tensor parallelism: which share of the weights each rank holds, and the model's collectives.

With N ranks (Megatron's split, as vLLM does it):
- q/k/v and gate/up are column-parallel: rank r holds heads [r H/N, (r+1) H/N), its KV heads
  and rows [r I/N, (r+1) I/N) of gate and of up, packed per rank (its q, k, v rows; its gate,
  up rows) so each rank still runs one GEMM for each;
- the output and down projections are row-parallel: rank r holds the columns matching its
  heads / its intermediate rows, so its product is a partial sum, all-reduced;
- KV heads are split (HKV/N per rank) when N divides HKV, else replicated (N a multiple of
  HKV: rank r keeps KV head r HKV / N, the one its q heads read);
- the embedding and the LM head are vocabulary-parallel: rank r holds rows [r V/N, (r+1) V/N).
  Its embedding reads ids shifted by r V/N (ids outside its rows read zeros) and the rows are
  all-reduced; its logits are all-gathered and rank 0 samples.

So a rank's share is the model of `Shards.local_config(cfg)` (H/N heads, its KV heads, I/N,
V/N), with the hidden size unchanged: the same model code runs it, with three collectives
per layer boundary (embedding, output, down) and one gather of the logits.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

import tilesafe as ts
import tilesafe.kernels as tk

from ..errors import TileSafeError, caller_loc
from .config import Qwen3Config


class TensorParallelError(TileSafeError):
    """Tensor parallelism cannot run: a model that does not split over N ranks, a world size
    that does not match, a rank that failed or exited."""


def tp_error(message: str, help: str | None = None) -> TensorParallelError:
    return TensorParallelError(message, loc=caller_loc(), help=help)


@dataclass(frozen=True, slots=True)
class Shards:
    """The ranges of heads, KV heads, intermediate rows and vocabulary rows rank `rank` of
    `world` holds ([lo, hi) each)."""
    rank: int
    world: int
    heads: tuple[int, int]
    kv_heads: tuple[int, int]
    intermediate: tuple[int, int]
    vocab: tuple[int, int]

    @classmethod
    def of(cls, cfg: Qwen3Config, rank: int, world: int) -> "Shards":
        """Rank `rank`'s share; a model that does not split over `world` ranks is refused."""
        for field, n in (("num_attention_heads", cfg.num_heads), ("intermediate_size", cfg.intermediate_size),
                         ("vocab_size", cfg.vocab_size)):
            if n % world:
                raise tp_error(f"tensor_parallel_size {world} does not divide the model's {field} {n}",
                               help=f"use a tensor_parallel_size that divides {field}")
        kv = cfg.num_kv_heads
        if kv % world == 0:
            kv_range = (rank * kv // world, (rank + 1) * kv // world)
        elif world % kv == 0:                     # fewer KV heads than ranks: each is replicated
            kv_range = (rank * kv // world, rank * kv // world + 1)
        else:
            raise tp_error(f"tensor_parallel_size {world} and the model's {kv} KV heads (num_key_value_heads) "
                           "neither divide the other", help="use a tensor_parallel_size that divides the KV heads, "
                                                            "or a multiple of them")

        def part(n: int) -> tuple[int, int]:
            return rank * n // world, (rank + 1) * n // world
        return cls(rank, world, part(cfg.num_heads), kv_range, part(cfg.intermediate_size), part(cfg.vocab_size))

    def local_config(self, cfg: Qwen3Config) -> Qwen3Config:
        """The model this rank runs: its heads, KV heads, intermediate rows and vocabulary rows."""
        return replace(cfg, num_heads=_n(self.heads), num_kv_heads=_n(self.kv_heads),
                       intermediate_size=_n(self.intermediate), vocab_size=_n(self.vocab))

    def cuts(self, cfg: Qwen3Config) -> dict[str, tuple[int, int, int]]:
        """Per checkpoint tensor this rank slices: (axis, lo, hi); tensors not named are whole."""
        d = cfg.head_dim
        q, kv = _scaled(self.heads, d), _scaled(self.kv_heads, d)
        cuts = {"model.embed_tokens.weight": (0, *self.vocab), "lm_head.weight": (0, *self.vocab)}
        for n in range(cfg.num_layers):
            a, m = f"model.layers.{n}.self_attn.", f"model.layers.{n}.mlp."
            cuts.update({a + "q_proj.weight": (0, *q), a + "k_proj.weight": (0, *kv), a + "v_proj.weight": (0, *kv),
                         a + "o_proj.weight": (1, *q), m + "gate_proj.weight": (0, *self.intermediate),
                         m + "up_proj.weight": (0, *self.intermediate),
                         m + "down_proj.weight": (1, *self.intermediate)})
        return cuts


def check_splits(cfg: Qwen3Config, world: int) -> None:
    """Refuse, before any process starts, a model that does not split over `world` ranks."""
    Shards.of(cfg, 0, world)


class TensorParallel:
    """The model's collectives on one rank (`Qwen3Model(..., tp=...)`)."""

    def __init__(self, shards: Shards, group=None):
        self.shards, self.group = shards, group
        self._logits: dict[int, tuple] = {}   # rows -> (gathered, full) buffers, made outside any capture

    @property
    def vocab_start(self) -> int:
        """This rank's first vocabulary row: its embedding reads ids shifted by it."""
        return self.shards.vocab[0]

    def all_reduce(self, x: torch.Tensor) -> None:
        """Sum a partial result over the ranks, in place."""
        ts.distributed.all_reduce(x, group=self.group)

    def gather_logits(self, local: torch.Tensor) -> torch.Tensor | None:
        """(R, V/N) logits of every rank -> (R, V) on rank 0 (None elsewhere: rank 0 samples)."""
        r, vs = local.shape
        n = self.shards.world
        bufs = self._logits.get(r)
        if bufs is None:
            gathered = torch.empty((n * r, vs), dtype=local.dtype, device=local.device)     # (N R, V/N)
            full = torch.empty((r, n * vs), dtype=local.dtype, device=local.device) if r > 1 else None
            bufs = self._logits[r] = (gathered, full)
        gathered, full = bufs
        ts.distributed.all_gather(local, out=gathered, group=self.group)
        if self.shards.rank != 0:
            return None
        if full is None:                      # one row: rank-major is already vocabulary order
            return gathered.view(1, n * vs)   # (1, V)
        # (N, R, V/N) -> (R, N, V/N): one exact copy (x * 1) through the permuted view of `full`.
        tk.mul(gathered.view(n, r, vs), 1.0, out=full.view(r, n, vs).permute(1, 0, 2))
        return full                           # (R, V)


def _n(r: tuple[int, int]) -> int:
    return r[1] - r[0]


def _scaled(r: tuple[int, int], k: int) -> tuple[int, int]:
    return r[0] * k, r[1] * k
