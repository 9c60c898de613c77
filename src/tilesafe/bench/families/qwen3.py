"""Qwen3 dense model dimensions, and the weight matrices one decoder layer multiplies by
(fused as an inference engine runs them: q/k/v in one matrix, gate/up in one) plus the
lm_head. Weights are (N, K) as `F.linear` takes them."""
from __future__ import annotations

from dataclasses import dataclass

HEAD_DIM = 128
VOCAB = 151936


@dataclass(frozen=True, slots=True)
class Model:
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int

    @property
    def q_width(self) -> int:
        return self.heads * HEAD_DIM

    @property
    def kv_width(self) -> int:
        return self.kv_heads * HEAD_DIM

    def projections(self) -> dict[str, tuple[int, int]]:
        """name -> (N, K) of each weight."""
        return {
            "qkv": (self.q_width + 2 * self.kv_width, self.hidden),
            "o": (self.hidden, self.q_width),
            "gate_up": (2 * self.intermediate, self.hidden),
            "down": (self.hidden, self.intermediate),
            "lm_head": (VOCAB, self.hidden),
        }


MODELS = {
    "4B": Model("Qwen3-4B", hidden=2560, intermediate=9728, heads=32, kv_heads=8),
    "8B": Model("Qwen3-8B", hidden=4096, intermediate=12288, heads=32, kv_heads=8),
    "32B": Model("Qwen3-32B", hidden=5120, intermediate=25600, heads=64, kv_heads=8),
}
