"""`LLM.generate` against transformers' greedy `generate`, float32 on the CPU.

Each checkpoint shape the engine must read — untied and tied embeddings, a head_dim that is
not hidden / heads, grouped-query and multi-head attention, a sharded checkpoint with its
index, the Hub's config.json spelling — gives transformers' tokens exactly and each chosen
token's log-probability within 1e-3.
"""
import json

import pytest

from tilesafe.engine import LLM, SamplingParams

PROMPTS = [[3, 17, 5, 60, 2], [11], [40, 41, 42, 43, 44, 45, 46, 47, 48], [7, 7]]
GREEDY = SamplingParams(temperature=0, max_tokens=6, logprobs=1)

SHAPES = {
    "untied_gqa": {},
    "tied": dict(tie_word_embeddings=True),
    "head_dim_24_mha": dict(head_dim=24, num_attention_heads=2, num_key_value_heads=2),
    "mqa_3_layers": dict(num_key_value_heads=1, num_hidden_layers=3, hidden_size=48),
}


def check_against_transformers(llm, hf, hf_greedy, prompts):
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY)
    for prompt, out in zip(prompts, outs):
        want, want_lp = hf_greedy(hf, prompt, GREEDY.max_tokens)
        got = out.outputs[0]
        assert out.prompt_token_ids == prompt
        assert got.token_ids == want
        assert [next(iter(d.values())).logprob for d in got.logprobs] == pytest.approx(want_lp, abs=1e-3)
        assert [next(iter(d)) for d in got.logprobs] == want
        assert got.finish_reason == "length"


@pytest.mark.parametrize("name", SHAPES)
def test_greedy_matches_transformers(checkpoint, hf_greedy, name):
    folder, hf = checkpoint(name, **SHAPES[name])
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=4, progress=False)
    check_against_transformers(llm, hf, hf_greedy, PROMPTS[:2])


def test_sharded_checkpoint_with_index(checkpoint, hf_greedy):
    folder, hf = checkpoint("sharded", save={"max_shard_size": "20KB"})
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("model-*.safetensors"))) > 2
    llm = LLM(str(folder), device="cpu", max_model_len=32, progress=False)
    check_against_transformers(llm, hf, hf_greedy, PROMPTS[:1])


def test_hub_release_config_spelling(checkpoint, hf_greedy, tmp_path):
    """config.json as the Qwen3 releases write it: rope_theta at the top level, torch_dtype."""
    folder, hf = checkpoint()
    raw = json.loads((folder / "config.json").read_text())
    raw["rope_theta"] = raw.pop("rope_parameters")["rope_theta"]
    raw["torch_dtype"] = raw.pop("dtype", "float32")
    (tmp_path / "config.json").write_text(json.dumps(raw))
    (tmp_path / "model.safetensors").symlink_to(folder / "model.safetensors")
    llm = LLM(str(tmp_path), device="cpu", max_model_len=32, progress=False)
    check_against_transformers(llm, hf, hf_greedy, PROMPTS[:1])


def test_a_batch_gives_each_prompt_its_tokens_alone(checkpoint, hf_greedy):
    """Several prompts of different lengths in one call: each gets exactly the tokens it gets
    alone and transformers' tokens; more prompts than max_num_seqs run in waves, each wave's
    prompts packed into one ragged prefill."""
    folder, hf = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=3, progress=False)
    waves = []
    real = llm.model.prefill
    llm.model.prefill = lambda a, starts: (waves.append(starts), real(a, starts))
    together = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], GREEDY)
    assert waves == [[0, 5, 6, 15], [0, 2]]              # two waves, each one ragged prefill
    llm.model.prefill = real
    alone = [llm.generate({"prompt_token_ids": p}, GREEDY)[0] for p in PROMPTS]
    assert [o.outputs[0].token_ids for o in together] == [o.outputs[0].token_ids for o in alone]
    for prompt, out in zip(PROMPTS, together):
        assert out.outputs[0].token_ids == hf_greedy(hf, prompt, GREEDY.max_tokens)[0]


def test_bf16_checkpoint_runs_in_float32(checkpoint, hf_greedy, tmp_path):
    """bf16 weights on disk, converted at load to the requested float32: the same tokens as
    transformers running those bf16 weights in float32."""
    import copy

    import torch
    _, hf = checkpoint()
    bf16 = copy.deepcopy(hf).to(torch.bfloat16)      # the session's model stays float32
    bf16.save_pretrained(tmp_path)
    llm = LLM(str(tmp_path), device="cpu", dtype="float32", max_model_len=32, progress=False)
    assert llm.model.w.embed.dtype == torch.float32
    reference = type(hf)(hf.config)
    reference.load_state_dict({k: v.float() for k, v in bf16.state_dict().items()})
    check_against_transformers(llm, reference.eval(), hf_greedy, PROMPTS[:1])


def test_sequences_that_stop_early_leave_the_others_unchanged(checkpoint, hf_greedy):
    """Per-sequence lengths in one batch: short requests finish (first and last rows), the
    decode batch keeps only the running sequence (row 0, reading its own cache slot 1), and
    the long one still gets its tokens."""
    folder, hf = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=3, progress=False)
    short = SamplingParams(temperature=0, max_tokens=2)
    prompts = [{"prompt_token_ids": p} for p in PROMPTS[:3]]
    outs = llm.generate(prompts, [short, GREEDY, short])
    assert [len(o.outputs[0].token_ids) for o in outs] == [2, 6, 2]
    for prompt, out in zip(PROMPTS, outs):
        n = len(out.outputs[0].token_ids)
        assert out.outputs[0].token_ids == hf_greedy(hf, prompt, n)[0]
    assert sorted(llm.decode_steps.steps) == [1, 3]          # batch 3, then the one running sequence


def test_greedy_matches_transformers_on_the_triton_interpreter(checkpoint, hf_greedy):
    """The same engine with every kernel on Triton's CPU interpreter (what the GPU compiles, not the
    reference backend the other tests use): a ragged prefill of two prompts and a batched decode
    step give transformers' tokens and log-probabilities. 2 tokens: the interpreter takes ~3 s a step."""
    import tilesafe as ts
    folder, hf = checkpoint()
    params = SamplingParams(temperature=0, max_tokens=2, logprobs=1)
    with ts.backend("triton-interpreter"):
        llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=2, progress=False)
        assert llm.backend is None                     # not switched to the reference backend
        outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS[:2]], params)
    for prompt, out in zip(PROMPTS, outs):
        want, want_lp = hf_greedy(hf, prompt, params.max_tokens)
        assert out.outputs[0].token_ids == want
        assert [next(iter(d.values())).logprob for d in out.outputs[0].logprobs] == pytest.approx(want_lp, abs=1e-3)


@pytest.mark.parametrize("spelling", ["transformers", "hub"])
def test_a_rope_theta_and_eps_other_than_the_defaults_are_read_in_both_spellings(checkpoint, hf_greedy, tmp_path,
                                                                                  spelling):
    """The other tests' rope_theta (10000) is also the fallback an unread field would take: here
    500000 (rope_parameters.rope_theta, or the Hub's top-level rope_theta) and rms_norm_eps 1e-5
    must reach the model (log-probabilities within 1e-3 of transformers')."""
    folder, hf = checkpoint("theta", rope_theta=500000.0, rms_norm_eps=1e-5)
    raw = json.loads((folder / "config.json").read_text())
    assert raw["rope_parameters"]["rope_theta"] == 500000.0 and "rope_theta" not in raw
    if spelling == "hub":
        raw["rope_theta"] = raw.pop("rope_parameters")["rope_theta"]
        raw["torch_dtype"] = raw.pop("dtype", "float32")
    (tmp_path / "config.json").write_text(json.dumps(raw))
    (tmp_path / "model.safetensors").symlink_to(folder / "model.safetensors")
    llm = LLM(str(tmp_path), device="cpu", max_model_len=32, progress=False)
    assert (llm.config.rope_theta, llm.config.rms_norm_eps) == (500000.0, 1e-5)
    check_against_transformers(llm, hf, hf_greedy, [PROMPTS[2]])
