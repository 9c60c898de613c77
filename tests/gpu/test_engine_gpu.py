"""The Qwen3 engine on a GPU: bf16 random models of real widths against transformers in bf16,
graph decode against eager decode, and a decode step that runs only tilesafe kernels.

Run on the H200: PYTHONPATH=src python -m pytest tests/gpu/test_engine_gpu.py -m gpu -q -s
(-s shows the measured logit error and greedy agreement).
"""
import pytest
import torch

pytestmark = pytest.mark.gpu
transformers = pytest.importorskip("transformers")

from tilesafe.engine import LLM, SamplingParams  # noqa: E402

# Qwen3-0.6B and Qwen3-4B widths (hidden, intermediate, heads, KV heads; head_dim 128, the
# real vocabulary) with 4 layers, so both fit the disk and load in seconds.
SHAPES = {"0.6b": (1024, 3072, 16, 8), "4b": (2560, 9728, 32, 8)}
PROMPTS = [[151, 2000, 30000, 7, 99, 1234, 5678, 42], [77, 88], list(range(300, 340))]


def write_bf16_model(folder, size, layers=4, seed=0):
    hidden, inter, heads, kv = SHAPES[size]
    torch.manual_seed(seed)
    cfg = transformers.Qwen3Config(vocab_size=151936, hidden_size=hidden, intermediate_size=inter,
                                   num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                                   head_dim=128, rope_theta=1e6, max_position_embeddings=4096,
                                   tie_word_embeddings=True, initializer_range=0.05)
    model = transformers.Qwen3ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    model.save_pretrained(folder)
    return model


@pytest.fixture(scope="module", params=list(SHAPES))
def bf16_model(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    hf = write_bf16_model(folder, request.param)
    llm = LLM(str(folder), device="cuda", dtype="bfloat16", max_model_len=512, max_num_seqs=4, progress=False)
    return request.param, hf, llm


def test_first_step_logits_close_and_greedy_agreement(bf16_model):
    from tilesafe.engine.model import Activations
    size, hf, llm = bf16_model
    prompt = PROMPTS[0]
    a = Activations.allocate(llm.config, len(prompt), 1, torch.bfloat16, "cuda")
    a.ids.copy_(torch.tensor(prompt, dtype=torch.int32))
    a.positions.copy_(torch.arange(len(prompt), dtype=torch.int32))
    with torch.inference_mode():
        a.last.fill_(len(prompt) - 1)
        llm.model.prefill(a, [0, len(prompt)])
        want = hf(torch.tensor([prompt], device="cuda")).logits[0, -1].float()          # (V,)
    got = a.logits[0].float()
    err = (got - want).abs().max().item()
    print(f"\n{size}: first-step logits max |err| {err:.4f} (logits up to {want.abs().max().item():.2f})")
    assert err <= 0.03 * want.abs().max().item() + 0.05
    params = SamplingParams(temperature=0, max_tokens=32)
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params)
    agree = total = 0
    for p, out in zip(PROMPTS, outs):
        with torch.inference_mode():
            ref = hf.generate(torch.tensor([p], device="cuda"), max_new_tokens=32, do_sample=False,
                              pad_token_id=0, eos_token_id=None)[0, len(p):].tolist()
        got_ids = out.outputs[0].token_ids
        same = next((i for i, (x, y) in enumerate(zip(got_ids, ref)) if x != y), len(ref))
        agree, total = agree + same, total + len(ref)
    print(f"{size}: greedy agreement (tokens before the first difference) {agree}/{total}")
    top2 = want.topk(2).values
    if (top2[0] - top2[1]).item() > 2 * err:          # not a near-tie at bf16 precision
        assert outs[0].outputs[0].token_ids[0] == int(want.argmax())


def test_graph_decode_is_token_identical_to_eager(bf16_model):
    size, hf, llm = bf16_model
    params = SamplingParams(temperature=0, max_tokens=24, logprobs=1)
    prompts = [{"prompt_token_ids": p} for p in PROMPTS]
    assert llm.decode_steps.use_graph
    graphed = llm.generate(prompts, params)
    assert any(s.graphs.get(True) is not None for s in llm.decode_steps.steps.values())   # the greedy step's
    llm.decode_steps.use_graph = False
    saved, llm.decode_steps.steps = llm.decode_steps.steps, {}
    try:
        eager = llm.generate(prompts, params)
    finally:
        llm.decode_steps.use_graph, llm.decode_steps.steps = True, saved
    for g, e in zip(graphed, eager):
        assert g.outputs[0].token_ids == e.outputs[0].token_ids
        assert [next(iter(d.values())).logprob for d in g.outputs[0].logprobs] == \
               [next(iter(d.values())).logprob for d in e.outputs[0].logprobs]


FOREIGN = ("at::", "aten", "cublas", "cutlass", "xmma", "nvjet", "cudnn", "flash_fwd", "Memset")


def test_a_decode_step_runs_only_tilesafe_kernels(bf16_model):
    size, hf, llm = bf16_model
    steps = llm.decode_steps
    steps.use_graph = False
    saved, steps.steps = steps.steps, {}
    try:
        with torch.inference_mode():
            llm.generate({"prompt_token_ids": PROMPTS[0]}, SamplingParams(temperature=0, max_tokens=3))  # warm-up
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                with llm.on_device():
                    steps.run([5], [len(PROMPTS[0])])
                torch.cuda.synchronize()
    finally:
        steps.use_graph, steps.steps = True, saved
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [n for n in names if "memcpy" not in n.lower()]
    print(f"\n{size}: {len(kernels)} kernels in one decode step; distinct: {sorted(set(kernels))}")
    assert kernels, names
    foreign = sorted({n for n in kernels if any(f in n for f in FOREIGN)})
    assert not foreign, foreign


def test_weights_and_cache_that_do_not_fit_are_refused_before_allocating(tmp_path):
    from tilesafe.engine import RequestError
    cfg = transformers.Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                   max_position_embeddings=1 << 22)
    transformers.Qwen3ForCausalLM(cfg).save_pretrained(tmp_path)
    free_before = torch.cuda.mem_get_info()[0]
    with pytest.raises(RequestError) as e:
        LLM(str(tmp_path), device="cuda", max_model_len=1 << 22, max_num_seqs=4096, progress=False)
    assert "need" in e.value.message and "free" in e.value.message
    assert torch.cuda.mem_get_info()[0] >= free_before - (64 << 20)


def test_random_real_shape_model_built_on_the_device():
    """LLM.from_random: the 0.6B shape with weights made on the GPU generates greedily, the
    same tokens twice, with a graph-replayed decode."""
    llm = LLM.from_random("0.6b", device="cuda", max_model_len=256, max_num_seqs=2, progress=False)
    assert llm.model.w.embed.is_cuda and llm.model.w.embed.dtype == torch.bfloat16
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    first = llm.generate({"prompt_token_ids": PROMPTS[0]}, params)[0].outputs[0]
    again = llm.generate({"prompt_token_ids": PROMPTS[0]}, params)[0].outputs[0]
    assert first.token_ids == again.token_ids and len(first.token_ids) == 16
    assert all(0 <= t < 151936 for t in first.token_ids) and first.finish_reason == "length"
    assert llm.decode_steps.steps[1].graphs.get(True) is not None          # greedy: the linear_argmax step
