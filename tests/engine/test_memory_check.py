"""`LLM`'s memory check counts the prefill graphs' shared buffers beside the weights and the
KV cache (an 8192-row bucket holds ~0.8 GB at 4B): a GPU with room for weights and cache but
not for them is refused before anything is allocated. The free memory is faked on the CPU."""
import pytest
import torch

import tilesafe as ts
from tilesafe.engine import LLM, RequestError
from tilesafe.engine.checkpoint import weight_bytes
from tilesafe.engine.kv_cache import cache_bytes
from tilesafe.engine.llm import memory_needed
from tilesafe.engine.prefill_graphs import buffer_bytes


def prefill_bytes_by_hand(cfg, rows: int, buckets: list[int], item: int) -> int:
    """The shared buffers of a `rows`-row bucket, written out from model.Activations' fields:
    per row the residual, x, h (E each), qkv ((H + 2 HKV) D), qr and attn (H D each), kr
    (HKV D), gate/up (2 I), act (I) and five int32 inputs; one gathered row (h, residual, x,
    logits, its int32 row, token and f32 log-prob); and each bucket's 3 B + 1 int32 inputs."""
    e, d, h, kv, i, v = (cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size,
                         cfg.vocab_size)
    per_row = (3 * e + (h + 2 * kv) * d + 2 * h * d + kv * d + 3 * i) * item + 5 * 4
    gathered = (3 * e + v) * item + 3 * 4
    return rows * per_row + gathered + sum(3 * b + 1 for b in buckets) * 4


def test_prefill_buffer_bytes(checkpoint):
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=16, progress=False)
    cfg = llm.config
    assert buffer_bytes(cfg, 15, torch.float32) == prefill_bytes_by_hand(cfg, 16, [16], 4)
    assert buffer_bytes(cfg, 100, torch.bfloat16) == prefill_bytes_by_hand(cfg, 128, [16, 32, 64, 128], 2)
    need = memory_needed(cfg, torch.float32, 3, 16, 15)
    assert need == {"weights": weight_bytes(cfg, 4), "cache": cache_bytes(cfg, 3, 16, 4),
                    "prefill": prefill_bytes_by_hand(cfg, 16, [16], 4)}
    assert memory_needed(cfg, torch.float32, 3, 16)["prefill"] == 0


def test_4b_prefill_buffers_at_8192_tokens_are_counted():
    from tilesafe.engine.config import Qwen3Config
    from tilesafe.engine.random_checkpoint import qwen3_config
    cfg = Qwen3Config.from_dict(qwen3_config("4b"), "4b")
    buckets = [16, 32, 64, 128, 256, 384, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048,
               2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192]
    got = buffer_bytes(cfg, 8192, torch.bfloat16)
    assert got == prefill_bytes_by_hand(cfg, 8192, buckets, 2)
    assert 0.75 * 2 ** 30 < got < 0.85 * 2 ** 30


def _line(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


def test_room_for_weights_and_cache_but_not_prefill_buffers_is_refused(checkpoint, monkeypatch):
    """Free memory = weights + cache + half the prefill buffers: refused before any allocation
    (the old check passed here and went on to allocate), the error naming all three; without
    prefill graphs the same memory suffices."""
    folder, _ = checkpoint()
    cfg_probe = LLM(str(folder), device="cpu", max_model_len=16, progress=False).config
    weights, cache = weight_bytes(cfg_probe, 4), cache_bytes(cfg_probe, 2, 16, 4)
    prefill = prefill_bytes_by_hand(cfg_probe, 16, [16], 4)
    free = weights + cache + prefill // 2
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)     # a GPU, as far as the device check sees
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(RequestError) as e:
        LLM(str(folder), device="cuda", dtype="float32", max_model_len=16, max_num_seqs=2,  # memory: refused
            prefill_graphs=True, progress=False)
    err = e.value
    assert isinstance(err, ts.TileSafeError)
    gib = 2 ** 30
    for fragment in (f"the weights ({weights / gib:.2f} GiB)", f"KV cache ({cache / gib:.2f} GiB)",
                     f"prefill buffers ({prefill / gib:.2f} GiB, prompts up to 15 tokens)",
                     f"need {(weights + cache + prefill) / gib:.2f} GiB", f"has {free / gib:.2f} GiB free"):
        assert fragment in err.message, err.message
    assert "prefill_graphs=False" in err.help
    assert err.loc is not None and err.loc.file == __file__ and err.loc.line == _line("memory: refused")
    llm = LLM(str(folder), device="cpu", max_model_len=16, max_num_seqs=2, progress=False)
    llm.device = "cuda"                              # the check alone, with the faked free memory
    llm._check_memory(llm.config, 0)                 # no prefill graphs: weights and cache fit
    with pytest.raises(RequestError):
        llm._check_memory(llm.config, 15)
