"""transformers' Qwen3ForCausalLM over the engine's own weight tensors — the second baseline of
`benchmarks/engine.py` (its `generate`) and a second reference for the correctness gate.

The model is built on the meta device (no memory) and every parameter is then a view of the
engine's packed tensors (q/k/v and gate/up are row ranges of them, so the views are
contiguous): no second copy of the weights. Attention is SDPA; `generate` runs eagerly with
transformers' default (dynamic) cache: a static cache + torch.compile costs minutes of
compilation per shape, more than the benchmark's budget.
"""
from __future__ import annotations

import torch


class HFQwen3:
    def __init__(self, llm, raw_config: dict):
        from torch import nn
        from transformers import Qwen3Config, Qwen3ForCausalLM
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding
        cfg, w = llm.config, llm.model.w
        config = Qwen3Config(**{k: v for k, v in raw_config.items() if k not in ("architectures", "torch_dtype")})
        config._attn_implementation = "sdpa"
        with torch.device("meta"):
            model = Qwen3ForCausalLM(config)

        def put(module, tensor):
            module.weight = nn.Parameter(tensor, requires_grad=False)
        h, kv, d, inter = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
        put(model.model.embed_tokens, w.embed)
        put(model.model.norm, w.norm)
        put(model.lm_head, w.lm_head)
        for layer, lw in zip(model.model.layers, w.layers):
            att, mlp = layer.self_attn, layer.mlp
            put(att.q_proj, lw.qkv[:h * d])
            put(att.k_proj, lw.qkv[h * d:(h + kv) * d])
            put(att.v_proj, lw.qkv[(h + kv) * d:])
            put(att.o_proj, lw.o)
            put(att.q_norm, lw.q_norm)
            put(att.k_norm, lw.k_norm)
            put(mlp.gate_proj, lw.gate_up[:inter])
            put(mlp.up_proj, lw.gate_up[inter:])
            put(mlp.down_proj, lw.down)
            put(layer.input_layernorm, lw.input_norm)
            put(layer.post_attention_layernorm, lw.post_norm)
        with torch.device(llm.device):
            model.model.rotary_emb = Qwen3RotaryEmbedding(config)
        self.model, self.device = model.eval(), llm.device
        left = [n for n, p in model.named_parameters() if p.is_meta] + \
            [n for n, b in model.named_buffers() if b.is_meta]
        if left:
            raise RuntimeError(f"HFQwen3: not set from the engine's weights: {left[:5]}")

    @torch.inference_mode()
    def row_logits(self, seq: list[int]) -> torch.Tensor:
        """float32 logits (T, V) at every position of `seq`, one forward."""
        ids = torch.tensor([seq], device=self.device)
        return self.model(input_ids=ids).logits[0].float()

    @torch.inference_mode()
    def generate(self, prompt: list[int], tokens: int, batch: int = 1) -> list[list[int]]:
        """Greedy `generate` of exactly `tokens` new tokens (EOS ignored) for `batch` copies."""
        ids = torch.tensor([prompt] * batch, device=self.device)
        out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                  max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=0,
                                  temperature=None, top_p=None, top_k=None)
        return out[:, len(prompt):].tolist()
