"""Decode-step rows on the GPU (`decode_step_tokens`): after the default warm-up, "auto"
times every decode bucket and the row buckets past max_num_seqs and gives each decode bucket
its row budget; prompts beside decodes then run as rows of the
captured decode steps — chunked, after a prefix hit — compiling nothing, every request
finishing, and most prompts' first tokens the offline engine's (bf16 near-ties may flip some)."""
import pytest

from tilesafe.engine import LLM, SamplingParams


@pytest.mark.gpu
def test_prompts_as_decode_step_rows_replay_the_warmed_buckets_on_the_gpu(compiles):
    from tilesafe.engine.decode_step import bucket_sizes
    from tilesafe.serve.engine_core import EngineCore
    from tilesafe.serve.request import Request
    llm = LLM.from_random("0.6b", device="cuda", max_model_len=128, max_num_seqs=4, progress=False)
    core = EngineCore(llm, kv_blocks=40, block_size=16, max_num_batched_tokens=32, decode_step_tokens="auto")
    buckets = bucket_sizes(4) + [8, 12]                  # the decode buckets, then the row buckets past max_num_seqs
    assert sorted(core.decode_step_times) == buckets
    assert all(t > 0 for t in core.decode_step_times.values())
    assert sorted(core.decode_step_tokens) == buckets and set(core.decode_step_tokens.values()) <= set(buckets)
    core.set_decode_step_tokens(12)                      # steps beside decodes up to 12 rows: the row buckets replay
    before = compiles()
    lengths = [3, 20, 45, 5, 9, 1, 24, 30]
    prompts = [[200 + (7 * i + n) % 3000 for i in range(n)] for n in lengths]
    prompts[6][:16] = prompts[1][:16]                    # one shared block: a prefix hit, kept as cached
    sp = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    outs = [[] for _ in prompts]

    def add(j):
        core.add(Request(f"b{j}", llm._sequences({"prompt_token_ids": prompts[j]}, sp)[0],
                         sink=lambda out, got=outs[j]: got.extend(out.token_ids)))
    add(0)
    core.step()                                          # alone: a mixed step
    for j in range(1, len(prompts)):
        add(j)
    while core.has_work():
        core.step()
    assert compiles() == before                          # no kernel compiled while serving
    assert [len(o) for o in outs] == [5] * len(prompts)
    assert core.timing["rows"][0] > 0
    first = [llm.generate({"prompt_token_ids": p}, sp)[0].outputs[0].token_ids[0] for p in prompts]
    same = sum(o[0] == f for o, f in zip(outs, first))
    print(f"\ndecode-step rows, bf16 0.6b: {same}/{len(prompts)} first tokens equal to the offline engine's; "
          f"bucket step times (ms): { {b: round(t * 1e3, 3) for b, t in core.decode_step_times.items()} }")
    assert same >= len(prompts) // 2                     # wrong rows would match ~never (151936 tokens)


@pytest.mark.gpu
def test_itl_rows_come_from_the_timed_buckets_and_serve_without_compiling(compiles):
    """"itl" on the GPU: the decode buckets timed (no row bucket past max_num_seqs), the bound
    ITL_SHARE x twice the 1-row step; a burst beside a decoding request is served (rows while
    they keep up, whole prompts past that) without compiling, every request finishing."""
    from tilesafe.serve.engine_core import EngineCore
    from tilesafe.serve.request import Request
    from tilesafe.serve.row_policy import ITL_SHARE, ItlRows
    llm = LLM.from_random("0.6b", device="cuda", max_model_len=128, max_num_seqs=4, progress=False)
    core = EngineCore(llm, kv_blocks=40, block_size=16, max_num_batched_tokens=32, decode_step_tokens="itl")
    assert isinstance(core.decode_step_tokens, ItlRows) and core.scheduler.row_budget is core.decode_step_tokens
    assert sorted(core.decode_step_tokens.times) == [1, 2, 4] == core.runner.decoder.sizes
    assert core.decode_step_tokens.bound_s == pytest.approx(ITL_SHARE * 2 * core.decode_step_times[1])
    before = compiles()
    sp = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    outs = [[] for _ in range(6)]
    for j, n in enumerate([5, 20, 9, 30, 3, 14]):
        core.add(Request(f"i{j}", llm._sequences({"prompt_token_ids": [300 + i for i in range(n)]}, sp)[0],
                         sink=lambda out, got=outs[j]: got.extend(out.token_ids)))
        if j == 0:
            core.step()                                  # then the others arrive beside its decode row
    while core.has_work():
        core.step()
    assert compiles() == before
    assert [len(o) for o in outs] == [6] * 6
