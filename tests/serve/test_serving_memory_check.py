"""The serving engine's memory check counts every buffer its steps hold — the KV pool of its
own, the decode buckets, the mixed steps' rows, the split steps' prefill graphs — and refuses
a server that does not fit before allocating, each part named (old check: the pool alone,
and only when it did not reuse the engine's cache)."""
import pytest
import torch

import tilesafe as ts
from tilesafe.engine import RequestError
from tilesafe.engine.kv_cache import cache_bytes
from tilesafe.engine.model import Activations
from tilesafe.engine.prefill_graphs import buffer_bytes
from tilesafe.serve.memory_check import check_memory, serving_bytes

GIB = 2 ** 30


def by_hand(cfg, m, r, size):
    """Activations' bytes from its field shapes (model.py's Activations), written out."""
    e, d, h, kv, i, v = (cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size,
                         cfg.vocab_size)
    rows = m * (3 * e + (h + 2 * kv) * d + h * d + kv * d + h * d + 2 * i + i) * size
    return 5 * m * 4 + rows + r * 4 + r * 3 * e * size + r * v * size + r * 4 + r * 4


def test_activation_count_matches_the_field_shapes(llm):
    from tilesafe.serve.memory_check import activation_bytes
    a = Activations.allocate(llm.config, 48, 4, torch.float32, "cpu")
    assert activation_bytes(llm.config, 48, 4, torch.float32) == by_hand(llm.config, 48, 4, 4)
    assert a.gu.shape == (48, 2 * llm.config.intermediate_size)


def test_every_part_is_counted(llm):
    cfg = llm.config                                     # 4 sequences of up to 32 positions, float32
    need = serving_bytes(llm, 10, 4, max_chunk=16, split_prefill=True, mixed_chunks=4)
    assert need["KV blocks"] == cache_bytes(cfg, 10, 4, 4)
    assert need["decode steps"] == sum(by_hand(cfg, b, b, 4) + 4 * b * 8 for b in (1, 2, 4))
    assert need["mixed steps"] == by_hand(cfg, 128, 4, 4)     # 4 chunks of 16 + 4 rows: the 128-row bucket
    assert need["prefill graphs"] == buffer_bytes(cfg, 16, torch.float32)
    shared = serving_bytes(llm, None, 4, max_chunk=16, split_prefill=False, mixed_chunks=0)
    assert shared == {"decode steps": need["decode steps"]}   # the engine's cache reused; no prefill forms


def test_block_tables_count_the_block_size_with_the_engines_cache_reused(llm):
    """Without a pool of its own the decode buckets' block tables still have max_model_len /
    block_size entries (the check took blocks of 16 positions then)."""
    cfg = llm.config                                     # up to 32 positions: 8 blocks of 4, 2 of 16
    for bs, width in ((4, 8), (16, 2)):
        need = serving_bytes(llm, None, bs, max_chunk=16, split_prefill=False, mixed_chunks=0)
        assert need["decode steps"] == sum(by_hand(cfg, b, b, 4) + 4 * b * width for b in (1, 2, 4))


def test_a_server_whose_step_buffers_do_not_fit_is_refused_naming_each_part(llm, monkeypatch):
    """Free memory = the KV pool and half the rest: refused (the old check counted the pool
    alone and passed, then allocated the step buffers)."""
    need = serving_bytes(llm, 10, 4, max_chunk=16, split_prefill=True, mixed_chunks=4)
    free = need["KV blocks"] + (sum(need.values()) - need["KV blocks"]) // 2
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    monkeypatch.setattr(llm, "device", "cuda")
    with pytest.raises(RequestError) as e:
        check_memory(llm, need)                                         # memory: refused
    err = e.value
    assert isinstance(err, ts.TileSafeError)
    total = sum(need.values())
    for fragment in (f"KV blocks ({need['KV blocks'] / GIB:.2f} GiB)",
                     f"decode steps ({need['decode steps'] / GIB:.2f} GiB)",
                     f"mixed steps ({need['mixed steps'] / GIB:.2f} GiB)",
                     f"and prefill graphs ({need['prefill graphs'] / GIB:.2f} GiB)",
                     f"need {total / GIB:.2f} GiB, but cuda has {free / GIB:.2f} GiB free"):
        assert fragment in err.message, err.message
    assert "max_num_batched_tokens" in err.help and "kv_blocks" in err.help
    assert err.loc is not None and err.loc.file == __file__ and err.loc.line == _line("memory: refused")
    check_memory(llm, {"KV blocks": need["KV blocks"]})               # the pool alone fits


def _line(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))
