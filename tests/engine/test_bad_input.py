"""Refused checkpoints and requests: a located `ts.TileSafeError` naming what is wrong, raised
before any device work, and an LLM that still works afterwards."""
import json
import shutil
from pathlib import Path

import pytest
import torch

import tilesafe as ts
from tilesafe.engine import LLM, CheckpointError, RequestError, SamplingParams


def marker_line(marker: str) -> int:
    with open(__file__) as f:
        hits = [i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, hits
    return hits[0]


def assert_located(e, marker: str, *fragments: str) -> None:
    assert isinstance(e, ts.TileSafeError)
    for fragment in fragments:
        assert fragment in e.message, e.message
    assert e.loc is not None and e.loc.file == __file__ and e.loc.line == marker_line(marker), str(e)
    assert "Traceback" not in str(e) and "src/tilesafe" not in str(e)


@pytest.fixture(scope="module")
def llm(checkpoint):
    folder, _ = checkpoint()
    return LLM(str(folder), device="cpu", max_model_len=16, max_num_seqs=2, progress=False)


def copy_of(folder, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(folder, dst)
    return dst


def test_missing_folder_and_file(tmp_path):
    with pytest.raises(CheckpointError) as e:
        LLM(str(tmp_path / "nope"), device="cpu")  # ckpt: no folder
    assert_located(e.value, "ckpt: no folder", "nope", "does not exist")
    with pytest.raises(CheckpointError) as e:
        LLM(str(tmp_path), device="cpu")  # ckpt: no config
    assert_located(e.value, "ckpt: no config", "no config.json")


@pytest.mark.parametrize("model", [None, 5, "", Path("")])
def test_a_model_that_is_no_path_is_named(model):
    """None and 5 were a TypeError from pathlib; "" and Path("") (which pathlib reads as
    Path(".")) read the current folder."""
    with pytest.raises(CheckpointError) as e:
        LLM(model, device="cpu")  # ckpt: no path
    assert_located(e.value, "ckpt: no path", f"model must be a checkpoint folder or a hub id ('owner/name'), "
                                             f"got {model!r}")


def test_missing_shard(checkpoint, tmp_path):
    folder, _ = checkpoint("sharded", save={"max_shard_size": "20KB"})
    dst = copy_of(folder, tmp_path)
    victim = sorted(dst.glob("model-*.safetensors"))[1]
    victim.unlink()
    with pytest.raises(CheckpointError) as e:
        LLM(str(dst), device="cpu", progress=False)  # ckpt: shard
    assert_located(e.value, "ckpt: shard", victim.name, "missing")


def test_wrong_tensor_shape_and_dtype(checkpoint, tmp_path):
    from safetensors.torch import load_file, save_file
    folder, _ = checkpoint()
    dst = copy_of(folder, tmp_path)
    tensors = load_file(dst / "model.safetensors")
    name = "model.layers.1.self_attn.k_proj.weight"
    good = tensors[name]
    tensors[name] = good[:-1].contiguous()
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError) as e:
        LLM(str(dst), device="cpu", progress=False)  # ckpt: shape
    assert_located(e.value, "ckpt: shape", name, "(31, 64)", "expected (32, 64)")
    tensors[name] = good.to(torch.int32)
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError) as e:
        LLM(str(dst), device="cpu", progress=False)  # ckpt: dtype
    assert_located(e.value, "ckpt: dtype", name, "torch.int32")


def test_tensors_the_model_would_not_use_are_refused(checkpoint, tmp_path):
    """Were silently ignored: attention biases (another architecture's) made another model."""
    from safetensors.torch import load_file, save_file
    folder, _ = checkpoint()
    dst = copy_of(folder, tmp_path)
    tensors = load_file(dst / "model.safetensors")
    tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)     # harmless: recomputed
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError) as e:
        LLM(str(dst), device="cpu", progress=False)  # ckpt: unused
    assert_located(e.value, "ckpt: unused", "holds 1 tensor(s) a Qwen3 model of this config.json does not use: "
                                            "'model.layers.0.self_attn.q_proj.bias'")
    del tensors["model.layers.0.self_attn.q_proj.bias"]
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    assert LLM(str(dst), device="cpu", max_model_len=16, max_num_seqs=1, progress=False)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_an_unreadable_safetensors_file_is_named(checkpoint, tmp_path, damage):
    """Was safetensors' own SafetensorError, raised from the engine's listing of the file's tensors."""
    folder, _ = checkpoint()
    dst = copy_of(folder, tmp_path)
    data = (dst / "model.safetensors").read_bytes()
    (dst / "model.safetensors").write_bytes(b"not a safetensors file" * 4 if damage == "garbage"
                                            else data[:len(data) // 2])
    with pytest.raises(CheckpointError) as e:
        LLM(str(dst), device="cpu", progress=False)  # ckpt: unreadable
    assert_located(e.value, "ckpt: unreadable", f"cannot read {dst / 'model.safetensors'}")


@pytest.mark.parametrize("text,fragment", [
    ("[1, 2]", "config.json must hold a JSON object, got list"),              # was an AttributeError
    (None, "rope_parameters must be an object, got [10000.0]"),               # was an AttributeError
])
def test_a_config_of_the_wrong_json_shape_is_named(checkpoint, tmp_path, text, fragment):
    folder, _ = checkpoint()
    dst = copy_of(folder, tmp_path)
    if text is None:
        raw = json.loads((dst / "config.json").read_text())
        text = json.dumps({**raw, "rope_parameters": [10000.0]})
    (dst / "config.json").write_text(text)
    with pytest.raises(CheckpointError) as e:
        LLM(str(dst), device="cpu", progress=False)  # ckpt: json shape
    assert_located(e.value, "ckpt: json shape", fragment)


@pytest.mark.parametrize("edit,fragment", [
    (dict(architectures=["LlamaForCausalLM"], model_type="llama"), "LlamaForCausalLM"),
    (dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe"), "Qwen3MoeForCausalLM"),
    (dict(num_key_value_heads=3), "num_key_value_heads 3 must divide num_attention_heads 4"),
    (dict(hidden_size=0), "hidden_size must be a positive integer, got 0"),
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}), "RoPE scaling"),
    (dict(attention_bias=True), "attention_bias"),
])
def test_unsupported_config(checkpoint, tmp_path, edit, fragment):
    folder, _ = checkpoint()
    dst = copy_of(folder, tmp_path)
    raw = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**raw, **edit}))
    with pytest.raises(CheckpointError) as e:
        LLM(str(dst), device="cpu", progress=False)  # ckpt: config
    assert_located(e.value, "ckpt: config", fragment, "config.json")


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(max_model_len=65), "max_model_len 65 exceeds the model's max_position_embeddings 64"),
    (dict(max_model_len=0), "max_model_len must be a positive int, got 0"),
    (dict(max_num_seqs=0), "max_num_seqs must be a positive int, got 0"),
    (dict(dtype="int8"), "dtype must be one of float32, bfloat16, float16 or 'auto', got 'int8'"),
    (dict(device="tpu"), "device must be 'cpu' or 'cuda[:N]', got 'tpu'"),
    # each below was torch's error from inside the load: "cpu:0" a safetensors error called a
    # corrupt file, a GPU index this machine lacks an AssertionError (no CUDA) or a CUDA error
    (dict(device="cpu:0"), "device must be 'cpu' or 'cuda[:N]', got 'cpu:0'"),
    (dict(device="cuda:x"), "device must be 'cpu' or 'cuda[:N]', got 'cuda:x'"),
    # the LLM was made, then every generate failed: ts.graph()'s LaunchError without a help line
    (dict(use_graph=True), "use_graph=True needs a CUDA GPU and the triton backend, got device 'cpu' on the "
                           "reference backend"),
    (dict(use_graph="no"), "use_graph must be True, False or None, got 'no'"),
    (dict(device=f"cuda:{torch.cuda.device_count()}"),
     f"device 'cuda:{torch.cuda.device_count()}', but this machine has {torch.cuda.device_count()} CUDA device"),
])
def test_bad_llm_settings(checkpoint, kwargs, fragment):
    folder, _ = checkpoint()
    with pytest.raises(RequestError) as e:
        LLM(str(folder), **{"device": "cpu", "progress": False, **kwargs})  # llm: bad setting
    assert_located(e.value, "llm: bad setting", fragment)
    assert e.value.help


def test_a_torch_device_names_the_device(checkpoint):
    folder, _ = checkpoint()
    assert LLM(str(folder), device=torch.device("cpu"), max_model_len=16, progress=False).device == "cpu"


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(max_tokens=0), "max_tokens must be > 0, got 0"),
    (dict(temperature=-0.5), "temperature must be >= 0, got -0.5"),
    (dict(top_p=0.0), "top_p must be in (0, 1], got 0.0"),
    (dict(top_p=1.5), "top_p must be in (0, 1], got 1.5"),
    # Each below was accepted before: logprobs=5 gave one entry per token, stop=[1] and a lone
    # stop_token_ids int were TypeErrors (the first mid-generation), stop=[""] cut every text to "".
    (dict(logprobs=5), "logprobs must be 0 or 1 (the chosen token's log-probability), got 5"),
    (dict(stop=[1]), "stop must be non-empty strings, got 1"),
    (dict(stop=["ok", ""]), "stop must be non-empty strings, got ''"),
    (dict(stop=3), "stop must be a list, got int 3"),
    (dict(stop_token_ids=5), "stop_token_ids must be a list, got int 5"),
    (dict(stop_token_ids=[3, -1]), "stop_token_ids must be a list of token ids >= 0, got -1"),
    (dict(top_k=-2), "top_k must be >= -1 (0 or -1: no limit), got -2"),
    (dict(top_k=2.5), "top_k must be >= -1 (0 or -1: no limit), got 2.5"),
    (dict(temperature="hot"), "temperature must be >= 0, got 'hot'"),
    (dict(max_tokens=True), "max_tokens must be > 0, got True"),
    (dict(seed=1.5), "seed must be an int, got 1.5"),
    # a string was taken for its truth: ignore_eos="false" ignored EOS
    (dict(ignore_eos="false"), "ignore_eos must be True or False, got 'false'"),
    (dict(skip_special_tokens=None), "skip_special_tokens must be True or False, got None"),
])
def test_bad_sampling_params(kwargs, fragment):
    with pytest.raises(RequestError) as e:
        SamplingParams(**kwargs)  # params: bad
    assert_located(e.value, "params: bad", fragment)
    assert e.value.help


# vLLM's knobs the sampler does not implement: each was a TypeError (an unknown keyword), and a
# checkpoint's min_p / repetition_penalty were read but silently not applied.
NOT_APPLIED = [("min_p", 0.05), ("repetition_penalty", 1.1), ("presence_penalty", 0.5), ("frequency_penalty", -0.5),
               ("n", 2), ("n", True), ("best_of", 3), ("min_tokens", 4), ("logit_bias", {5: 1.0}),
               ("allowed_token_ids", [1, 2]), ("bad_words", ["x"]), ("logits_processors", [print]),
               ("prompt_logprobs", 0), ("include_stop_str_in_output", True)]
NEUTRAL = dict(min_p=0.0, repetition_penalty=1.0, presence_penalty=0, frequency_penalty=0.0, n=1, best_of=1,
               min_tokens=0, logit_bias={}, allowed_token_ids=None, bad_words=[], logits_processors=[],
               prompt_logprobs=None, include_stop_str_in_output=False)


@pytest.mark.parametrize("name,value", NOT_APPLIED)
def test_a_sampling_knob_the_sampler_lacks_is_refused_not_ignored(name, value):
    with pytest.raises(RequestError) as e:
        SamplingParams(temperature=0.7, **{name: value})  # params: not applied
    assert_located(e.value, "params: not applied", f"SamplingParams: {name}={value!r} is not supported",
                   f"does not implement {name}")
    assert e.value.help


def test_neutral_values_of_those_knobs_decode_as_if_unset(llm):
    """Code written for vLLM that spells out the neutral values runs unchanged: same tokens."""
    params = SamplingParams(temperature=1.0, top_k=5, max_tokens=3, seed=11)
    spelled = SamplingParams(temperature=1.0, top_k=5, max_tokens=3, seed=11, **NEUTRAL)
    want = llm.generate(OK_PROMPT, params)[0].outputs[0].token_ids
    assert llm.generate(OK_PROMPT, spelled)[0].outputs[0].token_ids == want and len(want) == 3


def test_stop_lists_in_any_spelling():
    assert SamplingParams(stop="x").stop == ["x"] and SamplingParams(stop=("x", "y")).stop == ["x", "y"]
    assert SamplingParams(stop=None).stop == [] and SamplingParams(stop_token_ids=None).stop_token_ids == []
    assert SamplingParams(stop_token_ids=(3, 4)).stop_token_ids == [3, 4]
    assert SamplingParams(logprobs=0).logprobs == 0 and SamplingParams(logprobs=1).logprobs == 1


OK_PROMPT = {"prompt_token_ids": [3, 4]}
GREEDY3 = SamplingParams(temperature=0, max_tokens=3)


@pytest.fixture(scope="module")
def ok_tokens(llm):
    """What the module's LLM gives OK_PROMPT before any refused call."""
    return llm.generate(OK_PROMPT, GREEDY3)[0].outputs[0].token_ids


@pytest.mark.parametrize("prompt,params,fragment", [
    # sampling params of another type: was an AttributeError ('dict' object has no attribute 'resolved')
    (OK_PROMPT, {"temperature": 0}, "sampling params 0 must be a SamplingParams (or None), got dict"),
    (OK_PROMPT, [SamplingParams(max_tokens=2), "greedy"],
     "sampling params 1 must be a SamplingParams (or None), got str"),
    ({"prompt_token_ids": []}, GREEDY3, "prompt 1 is empty"),
    ({"prompt_token_ids": [1, 96]}, GREEDY3, "token id 96, outside the vocabulary [0, 96)"),
    ({"prompt_token_ids": [1, -1]}, GREEDY3, "token id -1"),
    ({"prompt_token_ids": list(range(16))}, GREEDY3, "prompt 1 has 16 tokens, but max_model_len is 16"),
    ("some text", GREEDY3, "no tokenizer.json in its folder"),
])
def test_a_refused_generate_leaves_the_llm_working(llm, prompt, params, fragment):
    """A bad second prompt or bad sampling params: refused at the user's line, and the same LLM
    then gives the tokens it gave before."""
    before = llm.generate(OK_PROMPT, GREEDY3)[0].outputs[0].token_ids
    with pytest.raises(RequestError) as e:
        llm.generate([OK_PROMPT, prompt], params)  # generate: refused
    assert_located(e.value, "generate: refused", fragment)
    assert llm.generate(OK_PROMPT, GREEDY3)[0].outputs[0].token_ids == before


def test_a_refused_call_launches_no_kernel(llm, launched_kernels):
    """Refused before any device work: the good prompt before the bad one is not prefilled."""
    seen = launched_kernels()
    for prompts, params in [([{"prompt_token_ids": [3, 4]}, {"prompt_token_ids": [1, 96]}], SamplingParams()),
                            ({"prompt_token_ids": [3, 4]}, {"max_tokens": 2})]:
        with pytest.raises(RequestError):
            llm.generate(prompts, params)
    assert seen == []
    llm.generate({"prompt_token_ids": [3, 4]}, SamplingParams(temperature=0, max_tokens=2))
    assert seen                                            # the recorder does see a real call's launches


def test_empty_prompt_list(llm):
    assert llm.generate([], SamplingParams(temperature=0)) == []


def test_generation_stops_at_max_model_len(llm):
    out = llm.generate({"prompt_token_ids": list(range(13))}, SamplingParams(temperature=0, max_tokens=50))[0]
    assert len(out.outputs[0].token_ids) == 3 and out.outputs[0].finish_reason == "length"


def test_stop_token_ids_and_eos(llm):
    params = SamplingParams(temperature=0, max_tokens=6)
    full = llm.generate({"prompt_token_ids": [3, 17, 5]}, params)[0].outputs[0].token_ids
    stop = full[2]
    cut = full[:full.index(stop) + 1]
    out = llm.generate({"prompt_token_ids": [3, 17, 5]}, SamplingParams(temperature=0, max_tokens=6,
                                                                        stop_token_ids=[stop]))[0].outputs[0]
    assert out.token_ids == cut and out.finish_reason == "stop" and out.stop_reason == stop
    llm.eos_ids = frozenset({stop})
    try:
        out = llm.generate({"prompt_token_ids": [3, 17, 5]}, params)[0].outputs[0]
        assert out.token_ids == cut and out.finish_reason == "stop" and out.stop_reason is None
        out = llm.generate({"prompt_token_ids": [3, 17, 5]}, SamplingParams(temperature=0, max_tokens=6,
                                                                            ignore_eos=True))[0].outputs[0]
        assert out.token_ids == full and out.finish_reason == "length"
    finally:
        llm.eos_ids = frozenset()


def test_seeded_sampling_is_reproducible_and_batch_independent(llm):
    """A seed fixes a request's tokens, alone or beside other requests; greedy rows stay greedy."""
    seeded = SamplingParams(temperature=1.0, max_tokens=5, seed=7)
    alone = llm.generate({"prompt_token_ids": [3, 17]}, seeded)[0].outputs[0].token_ids
    again = llm.generate([{"prompt_token_ids": [9]}, {"prompt_token_ids": [3, 17]}],
                         [SamplingParams(temperature=0.8, max_tokens=5, seed=1), seeded])[1].outputs[0].token_ids
    assert alone == again and len(alone) == 5 and all(0 <= t < 96 for t in alone)
    greedy = SamplingParams(temperature=0, max_tokens=5)
    beside = llm.generate([{"prompt_token_ids": [3, 17]}, {"prompt_token_ids": [4]}], [greedy, seeded])
    assert llm.generate({"prompt_token_ids": [3, 17]}, greedy)[0].outputs[0].token_ids == beside[0].outputs[0].token_ids


def test_an_interrupted_call_or_an_abandoned_stream_leaves_the_llm_working(llm):
    """Ctrl-C inside a decode step (KeyboardInterrupt), or a stream the caller stops reading: the
    next call gives the same tokens as before, the seeded row included."""
    prompts = [{"prompt_token_ids": [3, 17, 5]}, {"prompt_token_ids": [9]}]
    params = [SamplingParams(temperature=0, max_tokens=5), SamplingParams(temperature=1.0, max_tokens=5, seed=3)]
    before = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    for _ in llm.stream(prompts[0], params[0]):
        break
    real, calls = llm.decode_steps.run, []

    def interrupted(*args):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)
    llm.decode_steps.run = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            llm.generate(prompts, params[::-1])
    finally:
        llm.decode_steps.run = real
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == before


@pytest.mark.parametrize("name,value,fragment", [("top_p", 0.0, "top_p must be in (0, 1], got 0.0"),
                                                ("min_p", 0.1, "min_p=0.1 is not supported")])
def test_a_params_object_changed_after_it_was_made_is_checked_again_by_generate(llm, launched_kernels, name, value,
                                                                                 fragment):
    """SamplingParams is mutable: generate checks the values again (through `resolved`), before any kernel."""
    params = SamplingParams(temperature=0, max_tokens=3)
    setattr(params, name, value)
    seen = launched_kernels()
    with pytest.raises(RequestError) as e:
        llm.generate({"prompt_token_ids": [3, 4]}, params)  # generate: mutated params
    assert_located(e.value, "generate: mutated params", fragment)
    assert seen == []


# Refusals of the call's shape, each once untested: (the call, on a line with its marker; the message).
SHAPES = [
    (lambda llm: llm.generate(5, GREEDY3), "shape: prompts",  # shape: prompts
     "generate: prompts must be a str, a dict or a list of them, got int"),
    (lambda llm: llm.generate([OK_PROMPT, OK_PROMPT], [GREEDY3]), "shape: params count",  # shape: params count
     "generate: 2 prompts but 1 sampling params"),
    (lambda llm: llm.generate({"prompt_token_ids": [1, "2"]}, GREEDY3), "shape: ids",  # shape: ids
     "generate: prompt 0: prompt_token_ids must be a list of ints"),
    (lambda llm: llm.generate({"prompt_token_ids": [1, True]}, GREEDY3), "shape: bool id",  # shape: bool id
     "generate: prompt 0: prompt_token_ids must be a list of ints"),
    (lambda llm: llm.generate([OK_PROMPT, 7], GREEDY3), "shape: prompt type",  # shape: prompt type
     "generate: prompt 1 must be a str, {'prompt': str} or {'prompt_token_ids': [...]}, got int"),
    (lambda llm: llm.generate(OK_PROMPT, SamplingParams(max_tokens=2, stop=["x"])), "shape: stop",  # shape: stop
     "generate: stop strings need the model's tokenizer (tokenizer.json)"),
    (lambda llm: list(llm.stream([OK_PROMPT, OK_PROMPT], GREEDY3)), "shape: stream two",  # shape: stream two
     "LLM.stream: takes one prompt"),
    (lambda llm: list(llm.stream({"prompt_token_ids": [1, 96]}, GREEDY3)), "shape: stream id",  # shape: stream id
     "generate: prompt 0 holds token id 96, outside the vocabulary [0, 96)"),
    (lambda llm: llm.chat([{"role": "user", "content": "Hi"}], GREEDY3), "shape: chat",  # shape: chat
     "LLM.chat: the model folder has no tokenizer.json"),
]


@pytest.mark.parametrize("call,marker,fragment", SHAPES, ids=[m for _, m, _ in SHAPES])
def test_a_call_of_the_wrong_shape_is_refused_before_any_kernel(llm, ok_tokens, launched_kernels, call, marker,
                                                                fragment):
    """Located at the user's line with a help line, no kernel launched, and the LLM unchanged."""
    seen = launched_kernels()
    with pytest.raises(RequestError) as e:
        call(llm)
    assert_located(e.value, marker, fragment)
    assert e.value.help and seen == []
    assert llm.generate(OK_PROMPT, GREEDY3)[0].outputs[0].token_ids == ok_tokens


def test_no_sequence_of_a_batch_runs_past_max_model_len(llm):
    """max_model_len 16 bounds each sequence on its own, in a batch, across waves and in a
    stream: a 13-token prompt gets 3 tokens, a 15-token one 1, a 1-token one 15 (the same ones
    it gets alone, streamed)."""
    params = SamplingParams(temperature=0, max_tokens=50, ignore_eos=True)
    prompts = [{"prompt_token_ids": ids} for ids in (list(range(13)), [3], list(range(1, 16)))]
    outs = [o.outputs[0] for o in llm.generate(prompts, params)]
    assert [len(o.token_ids) for o in outs] == [3, 15, 1] and {o.finish_reason for o in outs} == {"length"}
    streamed = [t for delta in llm.stream(prompts[1], params) for t in delta.token_ids]
    assert streamed == outs[1].token_ids


def test_sampling_values_beyond_the_device_rows_take_their_limit(llm):
    """top_k 2**40 was torch's int32 overflow (a RuntimeError) inside generate; a temperature of
    1e300 or inf (inf in f32) gave the last token of the vocabulary every time (NaN weights).
    Now the first means no limit, and the others the uniform weights any huge temperature gives
    (1e20, which needs no limit, is their oracle)."""
    def tokens(**kwargs):
        return llm.generate(OK_PROMPT, SamplingParams(max_tokens=4, seed=5, **kwargs))[0].outputs[0].token_ids
    assert tokens(temperature=1.0, top_k=2 ** 40) == tokens(temperature=1.0, top_k=0)
    uniform = tokens(temperature=1e20)
    assert tokens(temperature=1e300) == tokens(temperature=float("inf")) == uniform and len(set(uniform)) > 2


def test_per_prompt_params_may_be_a_tuple(llm, ok_tokens):
    """vLLM takes any sequence of SamplingParams: a tuple was refused ('sampling params 0 must be
    a SamplingParams (or None), got tuple')."""
    outs = llm.generate([OK_PROMPT, OK_PROMPT], (SamplingParams(temperature=0, max_tokens=2), GREEDY3))
    assert [o.outputs[0].token_ids for o in outs] == [ok_tokens[:2], ok_tokens]
