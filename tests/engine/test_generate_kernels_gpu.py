"""Every kernel of a whole `generate` on the GPU is a tilesafe kernel (issue 17, item 3): the
prefill — packed (`prefill_graphs=False`) and through the token buckets — and decode steps of a
batch where one row samples (temperature, top-k, top-p, seed), where the LM head is `linear`
+ `sample` rather than the greedy `linear_argmax`. `tests/gpu/test_engine_gpu.py` profiles one
greedy decode step only.

The graphs are off (`use_graph=False`): the same launches run eagerly, so the profiler sees each
kernel by name. Copies (ids and positions in, tokens out) are allowed; any aten, cuBLAS,
CUTLASS or cuDNN kernel is not.

Run on the H200: PYTHONPATH=src python -m pytest tests/engine/test_generate_kernels_gpu.py -m gpu -q -s
"""
import pytest
import torch

pytestmark = pytest.mark.gpu
transformers = pytest.importorskip("transformers")

from tilesafe.engine import LLM, SamplingParams  # noqa: E402

FOREIGN = ("at::", "aten", "cublas", "cutlass", "xmma", "nvjet", "cudnn", "flash_fwd")
PROMPTS = [{"prompt_token_ids": list(range(5, 45))}, {"prompt_token_ids": [7, 8, 9]}]
PARAMS = [SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
          SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=0, max_tokens=4, ignore_eos=True)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bf16-small")
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(vocab_size=4096, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                                   num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                                   max_position_embeddings=512, rope_theta=1e6, initializer_range=0.05)
    transformers.Qwen3ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("prefill_graphs", [False, True], ids=["packed-prefill", "bucket-prefill"])
def test_generate_launches_only_tilesafe_kernels(folder, prefill_graphs):
    llm = LLM(str(folder), device="cuda", dtype="bfloat16", max_model_len=128, max_num_seqs=2, use_graph=False,
              prefill_graphs=prefill_graphs, progress=False)
    first = llm.generate(PROMPTS, PARAMS)                 # compiles every kernel first
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        outs = llm.generate(PROMPTS, PARAMS)
        torch.cuda.synchronize()
    assert [len(o.outputs[0].token_ids) for o in outs] == [4, 4]
    assert outs[0].outputs[0].token_ids == first[0].outputs[0].token_ids      # greedy
    assert outs[1].outputs[0].token_ids == first[1].outputs[0].token_ids      # seeded
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [n for n in names if "memcpy" not in n.lower() and "memset" not in n.lower()]
    print(f"\n{len(kernels)} kernels in a 2-prompt generate (prefill_graphs={prefill_graphs}); "
          f"distinct: {sorted(set(kernels))}")
    assert kernels, names
    foreign = sorted({n for n in kernels if any(f in n for f in FOREIGN)})
    assert not foreign, foreign
