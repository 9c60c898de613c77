"""Every kind of serving step — packed, split, mixed — pads its rows (chunk tails, one-token
padding chunks, rows in no chunk); none of them may write the KV cache. The pool is poisoned
with 7.0; after each step a cache row differs from 7.0 exactly when it is a slot the
block manager gave a request for a position a step so far computed."""
import pytest
import torch

from tilesafe.engine import SamplingParams
from tilesafe.serve.engine_core import EngineCore
from tilesafe.serve.request import Request

POISON = 7.0
WAYS = {"packed": dict(split_prefill=False, mixed_steps=False),
        "split": dict(split_prefill=True, mixed_steps=False),
        "mixed": dict(split_prefill=False, mixed_steps=True)}


def written_rows(cache) -> set[int]:
    """Cache rows (block * block_size + offset) of any layer's keys or values not poison."""
    rows = set()
    for t in cache.k + cache.v:
        flat = t.reshape(t.shape[0] * t.shape[1], -1)
        rows |= set(torch.nonzero((flat != POISON).any(dim=1)).flatten().tolist())
    return rows


@pytest.mark.parametrize("way", list(WAYS))
def test_padding_rows_write_no_kv(llm, llm_one_seq, way):
    core = EngineCore(llm, kv_blocks=40, block_size=4, max_num_batched_tokens=12, warm_up=False,  # own pool
                      **WAYS[way])
    cache = core.runner.cache
    assert not core.runner.shares_llm_cache
    for t in cache.k + cache.v:
        t.fill_(POISON)
    calls = []
    for name in ("split", "mixed_step", "prefill"):
        real = getattr(core.runner, name)
        setattr(core.runner, name, lambda *a, real=real, name=name: calls.append(name) or real(*a))
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    prompts = {"a": [2, 4, 6], "b": [8, 10, 12, 14, 16], "c": [3, 5], "d": [7, 9, 11, 13, 15, 17, 19, 21, 23, 25]}
    arrivals = [["a", "b"], ["c"], ["d"]]                  # two together, then one per step beside decodes
    outs = {rid: [] for rid in prompts}
    allowed = set()                                        # slots computed so far (they stay written)
    computed = core.scheduler.computed

    def record(req, n):                                    # the step wrote positions computed .. + n
        allowed.update(core.scheduler.blocks.slots(req.request_id, req.computed, req.computed + n))
        computed(req, n)
    core.scheduler.computed = record
    while arrivals or core.has_work():
        for rid in (arrivals.pop(0) if arrivals else []):
            seq = llm._sequences({"prompt_token_ids": prompts[rid]}, params)[0]
            core.add(Request(rid, seq, sink=lambda out, rid=rid: outs[rid].extend(out.token_ids)))
        core.step()
        assert written_rows(cache) <= allowed
    assert written_rows(cache) == allowed and allowed       # every computed position was written
    want = {rid: llm_one_seq.generate({"prompt_token_ids": p}, params)[0].outputs[0].token_ids
            for rid, p in prompts.items()}
    assert outs == want
    kinds = {"packed": "prefill", "split": "split", "mixed": "mixed_step"}
    assert kinds[way] in calls
