"""Prefill by token bucket (engine/prefill_graphs.py) on the CPU: the padding and bucketing
logic a GPU captures in graphs, run eagerly here, against transformers and the eager prefill.

A prompt of n tokens runs padded to its bucket B (rows n .. B-1: token 0, cache slot -1):
causal attention keeps padding out of the real rows, and the padding writes nothing to the
cache. After `LLM.warm_up()` no prompt up to the largest bucket compiles a kernel.
"""
import linecache

import pytest
import torch

import tilesafe as ts
from tilesafe.engine import LLM, RequestError, SamplingParams
from tilesafe.engine.prefill_graphs import bucket_sizes

GREEDY = SamplingParams(temperature=0, max_tokens=2, logprobs=1)
# Lengths around the buckets of max_model_len 40 (16, 32, 64): 1, a full bucket, one past it.
PROMPTS = [[5], [3, 17, 5, 60, 2, 9, 1, 4, 8, 8, 30, 31, 32, 33, 34, 35], list(range(40, 57)),
           [(7 * i + 3) % 89 for i in range(39)]]


def test_bucket_sizes():
    assert bucket_sizes(1) == [16] and bucket_sizes(16) == [16] and bucket_sizes(17) == [16, 32]
    assert bucket_sizes(2048) == [16, 32, 64, 128, 256, 384, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048]
    sizes = bucket_sizes(8000)
    assert sizes[-1] == 8192 and sizes[-2] < 8000
    assert all(b % 128 == 0 for b in sizes if b >= 256)              # whole row tiles
    assert all((b - a) / b <= 1 / 3 for a, b in zip(sizes, sizes[1:]) if b > 256)   # padding <= a third


def first_token(hf, prompt):
    """transformers' greedy next token after `prompt` and its log-probability, from one forward
    pass (its `generate` scores a 39-token prompt of this tiny model differently from its own
    forward; the forward is the oracle here)."""
    with torch.no_grad():
        lp = torch.log_softmax(hf(torch.tensor([prompt])).logits[0, -1].float(), -1)
    return int(lp.argmax()), float(lp.max())


def tokens_and_logprobs(outs):
    return [(o.outputs[0].token_ids, [next(iter(d.values())).logprob for d in o.outputs[0].logprobs]) for o in outs]


def test_bucketed_prefill_matches_transformers_and_eager(checkpoint, hf_greedy):
    folder, hf = checkpoint()
    bucketed = LLM(str(folder), device="cpu", max_model_len=40, max_num_seqs=4, progress=False, prefill_graphs=True)
    eager = LLM(str(folder), device="cpu", max_model_len=40, max_num_seqs=4, progress=False)
    assert bucketed.prefill_graphs is not None and eager.prefill_graphs is None   # off by default on a CPU
    ran = []
    real = bucketed.prefill_graphs.run
    bucketed.prefill_graphs.run = lambda ids, slot, row: (ran.append((len(ids), slot, row)), real(ids, slot, row))[1]
    got = tokens_and_logprobs(bucketed.generate([{"prompt_token_ids": p} for p in PROMPTS[:3]], GREEDY))
    assert ran == [(1, 0, 0), (16, 1, 1), (17, 2, 2)]                 # each prompt in its slot, with its row
    want = tokens_and_logprobs(eager.generate([{"prompt_token_ids": p} for p in PROMPTS[:3]], GREEDY))
    assert [t for t, _ in got] == [t for t, _ in want]
    assert sum((lp for _, lp in got), []) == pytest.approx(sum((lp for _, lp in want), []), abs=1e-4)
    for prompt, (tokens, logprobs) in zip(PROMPTS, got):
        hf_tokens, hf_lp = hf_greedy(hf, prompt, GREEDY.max_tokens)
        assert tokens == hf_tokens
        assert logprobs == pytest.approx(hf_lp, abs=1e-3)


def test_padding_rows_write_nothing_to_the_cache(checkpoint):
    """The prompt's keys and values land in its slot's first n rows, as the eager prefill's;
    every other cache row keeps what it held (the padding rows are dropped)."""
    folder, _ = checkpoint()
    caches = []
    for graphs in (True, False):
        llm = LLM(str(folder), device="cpu", max_model_len=40, max_num_seqs=3, progress=False,
                  prefill_graphs=graphs)
        for t in llm.model.cache.k + llm.model.cache.v:
            t.fill_(7.0)                                               # poison: what no prefill writes
        llm.generate([{"prompt_token_ids": [1, 2]}, {"prompt_token_ids": PROMPTS[2]}],
                     SamplingParams(temperature=0, max_tokens=1))
        caches.append([t.clone() for t in llm.model.cache.k + llm.model.cache.v])
    n = len(PROMPTS[2])
    for bucketed, eager in zip(*caches):                               # (slots, max_model_len, HKV, D)
        assert torch.equal(bucketed[2:], torch.full_like(bucketed[2:], 7.0))   # an unused slot
        assert torch.equal(bucketed[1, n:], torch.full_like(bucketed[1, n:], 7.0))
        assert torch.equal(bucketed[0, 2:], torch.full_like(bucketed[0, 2:], 7.0))
        assert torch.allclose(bucketed[1, :n], eager[1, :n], atol=1e-5)
        assert torch.allclose(bucketed[0, :2], eager[0, :2], atol=1e-5)


def test_a_shorter_prompt_of_a_used_bucket_writes_only_its_rows(checkpoint):
    """The bucket's input buffer keeps the previous prompt's slots: a 17-token prompt after a
    30-token one (both bucket 32, slot 0) must still give rows 17.. slot -1."""
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=40, max_num_seqs=1, progress=False, prefill_graphs=True)
    one = SamplingParams(temperature=0, max_tokens=1)                   # prefill only
    llm.generate({"prompt_token_ids": list(range(30))}, one)
    for t in llm.model.cache.k + llm.model.cache.v:
        t.fill_(7.0)                                                   # poison: what no prefill writes
    llm.generate({"prompt_token_ids": PROMPTS[2]}, one)                # 17 tokens, the same bucket
    n = len(PROMPTS[2])
    for t in llm.model.cache.k + llm.model.cache.v:                    # (slots, max_model_len, HKV, D)
        assert torch.equal(t[0, n:], torch.full_like(t[0, n:], 7.0))
        assert not (t[0, :n] == 7.0).all(dim=-1).all(dim=-1).any()    # every prompt row written


def test_a_run_after_one_that_raised_waits_for_its_copy(checkpoint, monkeypatch):
    """A run that raises between its (queued, on a GPU) input copy and its sync leaves the
    copy possibly in flight: the next run synchronizes before it rewrites the pinned staging.
    Here the GPU's side is stood in for: `cuda` is set for the failing run, and
    torch.cuda.synchronize records its calls."""
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=40, max_num_seqs=1, progress=False, prefill_graphs=True)
    graphs, one = llm.prefill_graphs, SamplingParams(temperature=0, max_tokens=1)
    want = llm.generate({"prompt_token_ids": PROMPTS[1]}, one)[0].outputs[0].token_ids
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    sampler = llm.model.sampler

    def failing(*args, **kwargs):
        raise RuntimeError("sampler failed")
    graphs.cuda, llm.model.sampler = True, failing
    with pytest.raises(RuntimeError, match="sampler failed"), torch.inference_mode():
        graphs.run([1, 2, 3], slot=0, row=0)
    graphs.cuda, llm.model.sampler = False, sampler
    assert graphs.in_flight and synced == []
    assert llm.generate({"prompt_token_ids": PROMPTS[1]}, one)[0].outputs[0].token_ids == want
    assert synced == ["cpu"] and not graphs.in_flight


def test_no_compile_after_warm_up(checkpoint, compiles):
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=40, max_num_seqs=2, progress=False, prefill_graphs=True)
    llm.warm_up()
    assert sorted(llm.prefill_graphs.buckets) == [16, 32, 64]
    before = compiles()
    one = SamplingParams(temperature=0, max_tokens=1)                 # prefill only: no decode step
    for n in (1, 2, 15, 16, 17, 31, 33, 39):
        llm.generate({"prompt_token_ids": [(3 * i + n) % 90 for i in range(n)]}, one)
    llm.generate([{"prompt_token_ids": [1, 2, 3]}, {"prompt_token_ids": list(range(20))}], one)   # rows 0, 1
    assert compiles() == before


def test_a_prompt_past_the_largest_bucket_prefills_eagerly(checkpoint, hf_greedy, monkeypatch):
    import tilesafe.engine.llm as llm_module
    monkeypatch.setattr(llm_module, "MAX_GRAPH_TOKENS", 20)            # buckets 16, 32; prompts up to 20
    folder, hf = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=40, progress=False, prefill_graphs=True)
    assert llm.prefill_graphs.sizes == [16, 32]
    out = llm.generate({"prompt_token_ids": PROMPTS[3]}, GREEDY)[0].outputs[0]   # 39 tokens: one more fits
    assert llm.prefill_graphs.buckets == {}
    token, logprob = first_token(hf, PROMPTS[3])
    assert out.token_ids == [token]
    assert next(iter(out.logprobs[0].values())).logprob == pytest.approx(logprob, abs=1e-3)


def test_bad_prefill_graphs_value(checkpoint):
    folder, _ = checkpoint()
    with pytest.raises(RequestError) as e:
        LLM(str(folder), device="cpu", progress=False, prefill_graphs="yes")  # LLM: bad prefill_graphs
    err = e.value
    assert isinstance(err, ts.TileSafeError)
    assert "prefill_graphs must be True, False or None, got 'yes'" in err.message
    assert err.loc is not None and err.loc.file == __file__
    assert "LLM: bad prefill_graphs" in linecache.getline(__file__, err.loc.line)


def paged_pass(llm, chunks, pad: int) -> torch.Tensor:
    """One prefill_paged pass over chunks (slot, ids, first position) and `pad` padding rows
    (token 0, slot -1) after them; the logits (R, V) of each chunk's last row."""
    from tilesafe.engine.model import Activations, Qwen3Model
    model = Qwen3Model(llm.config, llm.model.w, llm.model.cache, None)
    L = llm.max_model_len
    starts = [0]
    for _, ids, _ in chunks:
        starts.append(starts[-1] + len(ids))
    a = Activations.allocate(llm.config, starts[-1] + pad, len(chunks), torch.float32, "cpu")
    a.ids.copy_(torch.tensor(sum((ids for _, ids, _ in chunks), []) + [0] * pad, dtype=torch.int32))
    a.positions.copy_(torch.tensor(sum((list(range(p, p + len(ids))) for _, ids, p in chunks), []) + [0] * pad,
                                   dtype=torch.int32))
    a.slots.copy_(torch.tensor(sum((list(range(s * L + p, s * L + p + len(ids))) for s, ids, p in chunks), [])
                               + [-1] * pad, dtype=torch.int32))
    a.last.copy_(torch.tensor(starts[1:], dtype=torch.int32) - 1)
    cached = [p for _, _, p in chunks]
    tables = torch.tensor([[s] for s, _, _ in chunks], dtype=torch.int32) if any(cached) else None
    with torch.inference_mode():
        model.prefill_paged(a, starts, cached, tables, sample=False)
    return a.logits.clone()


def test_padding_rows_after_a_mixed_step(checkpoint):
    """A serving-shaped pass (a fresh prompt, then two decode rows after cached prompts)
    padded to a bucket gives the unpadded pass's logits and cache: padding rows are computed
    row by row, attended by nobody, and write no cache row."""
    folder, _ = checkpoint()
    results = []
    for pad in (0, 9):
        llm = LLM(str(folder), device="cpu", max_model_len=40, max_num_seqs=3, progress=False)
        first = paged_pass(llm, [(0, PROMPTS[1], 0), (1, PROMPTS[2], 0)], pad)       # two fresh prompts
        mixed = paged_pass(llm, [(2, [4, 5, 6], 0), (0, [9], len(PROMPTS[1])), (1, [8], len(PROMPTS[2]))], pad)
        results.append((first, mixed, [t.clone() for t in llm.model.cache.k + llm.model.cache.v]))
    (first0, mixed0, cache0), (first9, mixed9, cache9) = results
    assert torch.allclose(first9, first0, atol=1e-5) and torch.allclose(mixed9, mixed0, atol=1e-5)
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(cache9, cache0))


def test_a_failed_capture_leaves_the_prefill_eager(checkpoint):
    """A capture that fails (here: ts.graph() on a machine without a GPU) keeps the eager
    pass's token, warns once, and later prompts prefill eagerly."""
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=40, progress=False, prefill_graphs=True)
    want = LLM(str(folder), device="cpu", max_model_len=40, progress=False).generate(
        [{"prompt_token_ids": p} for p in PROMPTS[:2]], GREEDY)
    llm.prefill_graphs.use_graph = True
    with pytest.warns(UserWarning, match="capture of the 16-token bucket failed .*prefill runs eagerly"):
        got = llm.generate([{"prompt_token_ids": p} for p in PROMPTS[:2]], GREEDY)
    assert not llm.prefill_graphs.use_graph and all(b.graph is None for b in llm.prefill_graphs.buckets.values())
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in want]


def test_buffers_grow_to_the_largest_bucket_used(checkpoint):
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=40, max_num_seqs=1, progress=False, prefill_graphs=True)
    graphs, one = llm.prefill_graphs, SamplingParams(temperature=0, max_tokens=1)
    first = llm.generate({"prompt_token_ids": [1, 2, 3]}, one)[0].outputs[0].token_ids
    assert sorted(graphs.buckets) == [16] and graphs._shared.ids.shape[0] == 16
    llm.generate({"prompt_token_ids": list(range(20))}, one)              # a larger bucket: new buffers
    assert sorted(graphs.buckets) == [32] and graphs._shared.ids.shape[0] == 32
    assert llm.generate({"prompt_token_ids": [1, 2, 3]}, one)[0].outputs[0].token_ids == first
    assert sorted(graphs.buckets) == [16, 32] and graphs._shared.ids.shape[0] == 32   # views of the same buffers
