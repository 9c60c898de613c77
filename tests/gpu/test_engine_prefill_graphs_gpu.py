"""Prefill graphs per token bucket on the GPU (engine/prefill_graphs.py): a replayed bucket
computes what the eager pass of the same bucket computes (bit for bit: the same kernels),
close to an eager prefill of the exact length, and after `LLM.warm_up()` no prompt compiles
a kernel (tilesafe specializations and Triton JIT compiles both counted).

Run on the H200: PYTHONPATH=src python -m pytest tests/gpu/test_engine_prefill_graphs_gpu.py -m gpu -q -s
"""
import pytest
import torch

pytestmark = pytest.mark.gpu

from tilesafe.engine import LLM, SamplingParams  # noqa: E402
from tilesafe.engine.model import Activations  # noqa: E402
from tilesafe.runtime.specialize import Specializer  # noqa: E402

MAX_LEN = 300          # buckets 16, 32, 64, 128, 256, 384


@pytest.fixture(scope="module")
def llm():
    return LLM.from_random("0.6b", device="cuda", dtype="bfloat16", max_model_len=MAX_LEN, max_num_seqs=3,
                           progress=False, prefill_graphs=True)


def ids_of(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1000, 100000, (n,), generator=g).tolist()


def bucketed(llm, ids: list[int], slot: int = 0) -> tuple[int, torch.Tensor]:
    """The next token of one prompt through the bucket path, and its logits (V,)."""
    graphs = llm.prefill_graphs
    with torch.inference_mode():
        token, _ = graphs.run(ids, slot=slot, row=slot)
        return token, graphs.buckets[graphs.bucket(len(ids))].a.logits[0].float().clone()


def exact_eager(llm, ids: list[int]) -> torch.Tensor:
    """The logits (V,) of an eager prefill of exactly len(ids) rows, into slot 1."""
    n = len(ids)
    with torch.inference_mode():
        a = Activations.allocate(llm.config, n, 1, torch.bfloat16, "cuda")
        a.ids.copy_(torch.tensor(ids, dtype=torch.int32))
        a.positions.copy_(torch.arange(n, dtype=torch.int32))
        a.slots.copy_(torch.arange(n, dtype=torch.int32) + MAX_LEN)
        a.last.fill_(n - 1)
        llm.model.prefill_paged(a, [0, n], [0], None, sample=False)
        return a.logits[0].float().clone()


@pytest.mark.parametrize("n", [5, 100, 257])
def test_replay_equals_the_eager_bucket_and_the_exact_prefill(llm, n):
    graphs = llm.prefill_graphs
    first, second = ids_of(n, 1), ids_of(n, 2)
    bucketed(llm, first)                                    # the bucket's eager pass, then its capture
    size = graphs.bucket(n)
    assert graphs.buckets[size].graph is not None
    token, replayed = bucketed(llm, second)                 # a replay, another prompt
    cache_replayed = [t[0, :n].clone() for t in llm.model.cache.k[:2]]
    graphs.buckets[size].graph, graphs.use_graph = None, False
    try:
        token_eager, eager = bucketed(llm, second)          # the same bucket, eagerly
    finally:
        graphs.use_graph = True
    assert torch.equal(replayed, eager) and token == token_eager
    assert all(torch.equal(c, t[0, :n]) for c, t in zip(cache_replayed, llm.model.cache.k[:2]))
    exact = exact_eager(llm, second)
    err = (replayed - exact).abs().max().item()
    print(f"\nT={n} (bucket {size}): graph vs exact-length eager logits max |err| {err:.4f}")
    assert err <= 0.03 * exact.abs().max().item() + 0.05
    top2 = exact.topk(2).values
    if (top2[0] - top2[1]).item() > 2 * err:
        assert token == int(exact.argmax())


def test_no_compile_after_warm_up(llm, monkeypatch):
    from triton import knobs
    llm.warm_up()
    assert sorted(llm.prefill_graphs.buckets) == llm.prefill_graphs.sizes
    assert all(b.graph is not None for b in llm.prefill_graphs.buckets.values())
    made = []
    real = Specializer.compiled

    def counting(self, bound, backend, schedule=None):
        before = len(self.code)
        code = real(self, bound, backend, schedule)
        made.extend([self.kernel.name] * (len(self.code) - before))
        return code
    monkeypatch.setattr(Specializer, "compiled", counting)
    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook", lambda *a, **k: made.append(k.get("repr", "triton")))
    one = SamplingParams(temperature=0, max_tokens=1)       # prefill only
    for n in (1, 17, 100, 129, 255, MAX_LEN - 1):
        out = llm.generate({"prompt_token_ids": ids_of(n, n)}, one)[0]
        assert len(out.outputs[0].token_ids) == 1
    outs = llm.generate([{"prompt_token_ids": ids_of(n, n)} for n in (3, 40, 200)], one)   # sampler rows 0, 1, 2
    assert [len(o.outputs[0].token_ids) for o in outs] == [1, 1, 1]
    assert made == []


def test_a_replay_writes_only_its_prompts_cache_rows(llm):
    """A replay's padding rows write no cache row, whatever the bucket's earlier prompt held:
    after a 60-token prompt (bucket 64), a 40-token prompt replayed in that bucket into the same
    slot writes rows 0..39 of it and leaves the poison in rows 40.. ; other slots keep theirs."""
    graphs = llm.prefill_graphs
    caches = llm.model.cache.k + llm.model.cache.v                     # (slots, max_model_len, HKV, D) each
    with torch.inference_mode():
        graphs.run(ids_of(60, 3), slot=2, row=2)                        # captured here or at warm_up
        assert graphs.buckets[64].graph is not None
        for t in caches:
            t[2].fill_(7.0)                                             # poison: what no prefill writes
        others = [t[:2].clone() for t in caches]
        graphs.run(ids_of(40, 4), slot=2, row=2)                        # a replay of bucket 64
        torch.cuda.synchronize()
        for t, before in zip(caches, others):
            assert torch.equal(t[2, 40:], torch.full_like(t[2, 40:], 7.0))
            assert not (t[2, :40] == 7.0).all(dim=-1).all(dim=-1).any()   # every prompt row written
            assert torch.equal(t[:2], before)


def test_a_capture_that_fails_midway_leaves_the_prefill_eager(llm, monkeypatch):
    """A capture that raises after the whole pass was recorded keeps the eager pass's token,
    warns, and later prompts run eagerly, with the tokens the captured bucket gives; the
    GPU stays usable (the module's graphs replay afterwards)."""
    from tilesafe.engine.prefill_graphs import PrefillGraphs
    from tilesafe.settings import graph_var
    model = llm.model
    graphs = PrefillGraphs(model, torch.bfloat16, "cuda", 100, use_graph=True)   # buckets 16 .. 128
    real = model.prefill_paged

    def failing(*args, **kwargs):
        real(*args, **kwargs)
        if graph_var.get() is not None:
            raise RuntimeError("injected capture failure")
    monkeypatch.setattr(model, "prefill_paged", failing)
    ids = ids_of(50, 7)
    with torch.inference_mode():
        with pytest.warns(UserWarning, match="capture of the 64-token bucket failed .*injected"):
            token, _ = graphs.run(ids, slot=2, row=2)
        assert not graphs.use_graph and graphs.buckets[64].graph is None
        again, _ = graphs.run(ids, slot=2, row=2)                      # eager from now on
        monkeypatch.undo()
        want, _ = llm.prefill_graphs.run(ids, slot=2, row=2)           # the module's bucket 64, replayed
    assert llm.prefill_graphs.buckets[64].graph is not None
    assert token == again == want
