"""Tensor parallelism on the CPU: two gloo ranks (this process and one it spawns) on a tiny
random Qwen3 give exactly the tokens of one rank and of transformers (float32), each rank
holding only its share of the weights; a model that does not split, or a world size that
does not match torchrun's, is refused before any process starts.

One two-rank LLM serves the whole module (spawning a rank costs seconds)."""
import sys

import pytest
import torch

from tilesafe.engine import LLM, SamplingParams
from tilesafe.engine.checkpoint import load_weights
from tilesafe.engine.config import Qwen3Config
from tilesafe.engine.parallel import Shards, TensorParallelError

PROMPTS = [{"prompt_token_ids": [3, 17, 42, 5]}, {"prompt_token_ids": [60, 1, 88]}]
SHARDED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "embed_tokens", "lm_head")


def here() -> int:
    return sys._getframe(1).f_lineno


@pytest.fixture(scope="module")
def tiny(checkpoint):
    return checkpoint()          # GQA: 4 heads, 2 KV heads, vocabulary 96, intermediate 96, untied


@pytest.fixture(scope="module")
def two_ranks(tiny):
    folder, _ = tiny
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=2, progress=False,
              tensor_parallel_size=2, tp_timeout=120)
    yield llm
    llm.close()


@pytest.fixture(scope="module")
def one_rank(tiny):
    folder, _ = tiny
    return LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=2, progress=False)


def tokens(outs):
    return [o.outputs[0].token_ids for o in outs]


def test_two_ranks_give_the_greedy_tokens_of_one_and_of_transformers(tiny, two_ranks, one_rank, hf_greedy):
    _, model = tiny
    params = SamplingParams(temperature=0, max_tokens=6, logprobs=1)
    got = two_ranks.generate(PROMPTS, params)
    assert tokens(got) == tokens(one_rank.generate(PROMPTS, params))
    for prompt, out in zip(PROMPTS, got):
        want, logprobs = hf_greedy(model, prompt["prompt_token_ids"], 6)
        assert out.outputs[0].token_ids == want
        for step, lp in zip(out.outputs[0].logprobs, logprobs):
            assert abs(next(iter(step.values())).logprob - lp) < 1e-3


def test_two_ranks_sample_the_seeded_tokens_of_one(two_ranks, one_rank):
    params = [SamplingParams(temperature=0.9, top_k=20, top_p=0.9, max_tokens=8, seed=s) for s in (1, 2)]
    assert tokens(two_ranks.generate(PROMPTS, params)) == tokens(one_rank.generate(PROMPTS, params))


def test_a_stream_left_early_does_not_stall_the_ranks(two_ranks, one_rank):
    params = SamplingParams(temperature=0, max_tokens=6)
    stream = two_ranks.stream(PROMPTS[0], params)
    next(stream)
    stream.close()                                   # rank 0 stops sending: the other rank just waits
    assert tokens(two_ranks.generate(PROMPTS[1:], params)) == tokens(one_rank.generate(PROMPTS[1:], params))


def test_each_rank_holds_its_share_of_the_weight_bytes(tiny, two_ranks):
    _, model = tiny
    share = 0
    for name, t in model.state_dict().items():
        share += t.numel() * 4 // (2 if any(s in name for s in SHARDED) else 1)
    assert two_ranks.weight_bytes_per_rank() == [share, share]
    assert share < sum(t.numel() * 4 for t in model.state_dict().values()) * 0.52


def test_a_rank_reads_only_its_slices_kv_heads_replicated(checkpoint, monkeypatch):
    """MQA over 2 ranks: the one KV head is on both; q, o, gate/up, down and the vocabulary split.
    Every split tensor is read as a slice (safetensors' get_slice), never whole."""
    from safetensors import safe_open
    folder, model = checkpoint("mqa", num_key_value_heads=1)
    cfg = Qwen3Config.from_dir(folder)
    sd = model.state_dict()
    d, heads, inter, vocab = cfg.head_dim, cfg.num_heads, cfg.intermediate_size, cfg.vocab_size
    whole = []

    class Spy:
        def __init__(self, *args, **kwargs):
            self.f = safe_open(*args, **kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def keys(self):
            return self.f.keys()

        def get_slice(self, name):
            return self.f.get_slice(name)

        def get_tensor(self, name):
            whole.append(name)
            return self.f.get_tensor(name)
    monkeypatch.setattr("safetensors.safe_open", Spy)
    for rank in range(2):
        shards = Shards.of(cfg, rank, 2)
        whole.clear()
        w = load_weights(folder, cfg, torch.float32, "cpu", progress=False, shards=shards)
        assert whole and not [n for n in whole if any(s in n for s in SHARDED)]   # norms whole, the rest sliced
        p = "model.layers.1."
        q = sd[p + "self_attn.q_proj.weight"][rank * heads // 2 * d:(rank + 1) * heads // 2 * d]
        qkv = torch.cat([q, sd[p + "self_attn.k_proj.weight"], sd[p + "self_attn.v_proj.weight"]])
        assert torch.equal(w.layers[1].qkv, qkv)
        cols = slice(rank * heads // 2 * d, (rank + 1) * heads // 2 * d)
        assert torch.equal(w.layers[1].o, sd[p + "self_attn.o_proj.weight"][:, cols])
        rows = slice(rank * inter // 2, (rank + 1) * inter // 2)
        gate_up = torch.cat([sd[p + "mlp.gate_proj.weight"][rows], sd[p + "mlp.up_proj.weight"][rows]])
        assert torch.equal(w.layers[1].gate_up, gate_up)
        assert torch.equal(w.layers[1].down, sd[p + "mlp.down_proj.weight"][:, rows])
        v = slice(rank * vocab // 2, (rank + 1) * vocab // 2)
        assert torch.equal(w.embed, sd["model.embed_tokens.weight"][v])
        assert torch.equal(w.lm_head, sd["lm_head.weight"][v])
        assert torch.equal(w.layers[1].q_norm, sd[p + "self_attn.q_norm.weight"])


@pytest.mark.parametrize("heads, kv, world", [(4, 2, 2), (8, 2, 4), (8, 1, 4), (16, 8, 8), (64, 8, 2), (8, 4, 8)])
def test_every_rank_holds_the_kv_heads_its_q_heads_read(checkpoint, heads, kv, world):
    """Each rank's q heads read only KV heads it holds; heads, intermediate and vocabulary
    rows are split into equal, disjoint, covering ranges."""
    cfg = Qwen3Config.from_dir(checkpoint()[0])
    cfg = Qwen3Config(**{**{f: getattr(cfg, f) for f in cfg.__slots__}, "num_heads": heads, "num_kv_heads": kv,
                         "intermediate_size": 96, "vocab_size": 96 * 8})
    shards = [Shards.of(cfg, r, world) for r in range(world)]
    group = heads // kv                                        # q heads per KV head
    for s in shards:
        needed = {h // group for h in range(*s.heads)}
        assert needed <= set(range(*s.kv_heads)) and s.kv_heads[1] - s.kv_heads[0] == max(kv // world, 1)
        local = s.local_config(cfg)
        assert local.num_heads % local.num_kv_heads == 0 and local.hidden_size == cfg.hidden_size
    for field, total in (("heads", heads), ("intermediate", 96), ("vocab", 96 * 8)):
        ranges = [getattr(s, field) for s in shards]
        assert ranges[0][0] == 0 and ranges[-1][1] == total
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert len({r[1] - r[0] for r in ranges}) == 1


def test_a_model_that_does_not_split_is_refused_before_any_process_starts(tiny):
    folder, _ = tiny
    line = here() + 2
    with pytest.raises(TensorParallelError) as info:
        LLM(str(folder), device="cpu", max_model_len=32, progress=False, tensor_parallel_size=3)
    assert info.value.message == "tensor_parallel_size 3 does not divide the model's num_attention_heads 4"
    assert info.value.loc.file == __file__ and info.value.loc.line == line


def test_kv_heads_that_neither_divide_nor_multiply_are_refused(checkpoint):
    cfg = Qwen3Config.from_dir(checkpoint()[0])
    odd = Qwen3Config(**{**{f: getattr(cfg, f) for f in cfg.__slots__}, "num_heads": 12, "num_kv_heads": 3,
                         "intermediate_size": 96, "vocab_size": 96})
    with pytest.raises(TensorParallelError, match="tensor_parallel_size 2 and the model's 3 KV heads"):
        Shards.of(odd, 0, 2)


def test_a_world_size_other_than_torchruns_is_refused(tiny, monkeypatch):
    folder, _ = tiny
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    line = here() + 2
    with pytest.raises(TensorParallelError) as info:
        LLM(str(folder), device="cpu", max_model_len=32, progress=False, tensor_parallel_size=2)
    assert info.value.message == "tensor_parallel_size 2 does not match torchrun's WORLD_SIZE 3"
    assert info.value.loc.file == __file__ and info.value.loc.line == line
    with pytest.raises(TensorParallelError, match="tensor_parallel_size must be a positive int, got 0"):
        LLM(str(folder), device="cpu", max_model_len=32, progress=False, tensor_parallel_size=0)


def test_generate_and_chat_pass_tp_to_the_llm(monkeypatch, capsys):
    """`tilesafe generate/chat --tp N` asks for N ranks, and closes the LLM (its ranks) at the end.
    (The LLM is replaced: two ranks of a real model are tested above.)"""
    from tilesafe import cli
    seen = []

    class FakeLLM:
        def __init__(self, model, **kwargs):
            seen.append(kwargs["tensor_parallel_size"])

        def stream(self, prompt, params):
            yield type("Delta", (), {"text": "ok", "token_ids": [1]})()

        def close(self):
            seen.append("closed")
    monkeypatch.setattr("tilesafe.engine.LLM", FakeLLM)
    assert cli.main(["generate", "some-folder", "Hi", "--device", "cpu", "--tp", "2"]) == 0
    assert capsys.readouterr().out == "ok\n"
    assert seen == [2, "closed"]


def test_the_server_refuses_a_tensor_parallel_llm(two_ranks):
    from tilesafe.engine import RequestError
    from tilesafe.serve.engine_core import EngineCore
    line = here() + 2
    with pytest.raises(RequestError) as info:
        EngineCore(two_ranks)
    assert info.value.message == "serve: a tensor-parallel LLM cannot be served yet (the server runs one rank)"
    assert info.value.loc.file == __file__ and info.value.loc.line == line
