"""Every kind of serving step — packed, split, mixed — pads its rows (chunk tails, one-token
padding chunks, rows in no chunk); none of them may write the KV cache. The pool is poisoned
with 7.0; after each step a cache row differs from 7.0 exactly when it is a slot the
block manager gave a request for a position a step so far computed. On the CPU each way
runs eagerly (tokens checked against each prompt alone); on the GPU (`-m gpu`) the default
engine replays its captured mixed steps and decode buckets."""
import pytest
import torch

from tilesafe.engine import SamplingParams
from tilesafe.serve.engine_core import EngineCore
from tilesafe.serve.request import Request

POISON = 7.0
WAYS = {"packed": dict(split_prefill=False, mixed_steps=False),
        "split": dict(split_prefill=True, mixed_steps=False),
        "mixed": dict(split_prefill=False, mixed_steps=True)}
PROMPTS = {"a": [2, 4, 6], "b": [8, 10, 12, 14, 16], "c": [3, 5], "d": [7, 9, 11, 13, 15, 17, 19, 21, 23, 25]}
ARRIVALS = [["a", "b"], ["c"], ["d"]]          # two together, then one per step beside decodes
PARAMS = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)


def written_rows(cache) -> set[int]:
    """Cache rows (block * block_size + offset) of any layer's keys or values not poison."""
    rows = set()
    for t in cache.k + cache.v:
        flat = t.reshape(t.shape[0] * t.shape[1], -1)
        rows |= set(torch.nonzero((flat != POISON).any(dim=1)).flatten().tolist())
    return rows


def serve_poisoned(core, llm, prompts, arrivals, params) -> dict:
    """Serve `prompts` (arriving as `arrivals` says, one group a step) over a poisoned pool,
    checking after every step that only computed slots were written (and the next slot of each
request in a decode step launched ahead); each one's tokens."""
    cache = core.runner.cache
    assert not core.runner.shares_llm_cache
    for t in cache.k + cache.v:
        t.fill_(POISON)
    outs = {rid: [] for rid in prompts}
    allowed = set()                                        # slots computed so far (they stay written)
    computed = core.scheduler.computed

    def record(req, n):                                    # the step wrote positions computed .. + n
        allowed.update(core.scheduler.blocks.slots(req.request_id, req.computed, req.computed + n))
        computed(req, n)
    core.scheduler.computed = record
    arrivals = list(arrivals)
    while arrivals or core.has_work():
        for rid in (arrivals.pop(0) if arrivals else []):
            seq = llm._sequences({"prompt_token_ids": prompts[rid]}, params)[0]
            core.add(Request(rid, seq, sink=lambda out, rid=rid: outs[rid].extend(out.token_ids)))
        core.step()
        ahead = set()                                      # a decode step launched ahead: each request's next slot
        bs = core.scheduler.blocks.block_size
        for r in core.ahead_requests:                      # (in its last block: not appended yet)
            ahead.add(core.scheduler.blocks.block_table(r.request_id)[r.computed // bs] * bs + r.computed % bs)
        assert written_rows(cache) <= allowed | ahead
    assert written_rows(cache) == allowed and allowed       # every computed position was written
    return outs


@pytest.mark.parametrize("way", list(WAYS))
def test_padding_rows_write_no_kv(llm, llm_one_seq, way):
    core = EngineCore(llm, kv_blocks=40, block_size=4, max_num_batched_tokens=12, warm_up=False,  # own pool
                      **WAYS[way])
    calls = []
    for name in ("split", "mixed_step", "prefill"):
        real = getattr(core.runner, name)
        setattr(core.runner, name, lambda *a, real=real, name=name: calls.append(name) or real(*a))
    outs = serve_poisoned(core, llm, PROMPTS, ARRIVALS, PARAMS)
    want = {rid: llm_one_seq.generate({"prompt_token_ids": p}, PARAMS)[0].outputs[0].token_ids
            for rid, p in PROMPTS.items()}
    assert outs == want
    kinds = {"packed": "prefill", "split": "split", "mixed": "mixed_step"}
    assert kinds[way] in calls


@pytest.mark.gpu
def test_captured_steps_write_no_kv_from_padding_rows_on_the_gpu():
    """The default GPU engine: warm-up (all rows padding) writes nothing; then mixed steps
    (two prompts, then one beside decodes) and decode buckets, replayed from the graphs the
    warm-up captured, write only computed slots."""
    from tilesafe.engine import LLM
    llm = LLM.from_random("0.6b", device="cuda", max_model_len=128, max_num_seqs=4, progress=False)
    core = EngineCore(llm, kv_blocks=40, block_size=16, max_num_batched_tokens=32)   # 40 > 4 x 128 / 16: own pool
    assert all(float(t.abs().sum()) == 0.0 for t in core.runner.cache.k + core.runner.cache.v)   # warm-up
    prompts = {k: [100 + 3 * t for t in p] for k, p in PROMPTS.items()}
    replays = []
    for step in core.runner.mixed.steps.values():
        graph = step.graph
        assert graph is not None                            # captured at warm-up
        step.graph = type("Counted", (), {"replay": lambda self, g=graph: replays.append(1) or g.replay()})()
    outs = serve_poisoned(core, llm, prompts, ARRIVALS, PARAMS)
    torch.cuda.synchronize()
    assert [len(o) for o in outs.values()] == [PARAMS.max_tokens] * len(prompts)
    assert replays                                          # some step was a replayed mixed graph
