"""Random Qwen3 checkpoints: the real shapes (checked against transformers' Qwen3 model and the
parameter counts Qwen publishes), files transformers loads, seeds that reproduce."""
import json

import pytest
import torch

from tilesafe.engine.random_checkpoint import qwen3_config, random_weights, weight_shapes, write_checkpoint
from tilesafe.engine.text_errors import TextInputError

transformers = pytest.importorskip("transformers")

# The model cards' counts, in billions: (all parameters, non-embedding parameters).
PUBLISHED = {"0.6b": (0.6, 0.44), "1.7b": (1.7, 1.4), "4b": (4.0, 3.6), "8b": (8.2, 6.95), "14b": (14.8, 13.2),
             "32b": (32.8, 31.2)}


@pytest.mark.parametrize("size", PUBLISHED)
def test_shapes_equal_transformers_qwen3_and_the_published_counts(size):
    config = qwen3_config(size)
    with torch.device("meta"):
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**config))
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    if config["tie_word_embeddings"]:
        expected.pop("lm_head.weight")                 # a tied checkpoint stores the embedding once
    assert weight_shapes(config) == expected
    total = sum(torch.Size(s).numel() for s in weight_shapes(config).values())
    embedding = config["vocab_size"] * config["hidden_size"]
    untied_head = 0 if config["tie_word_embeddings"] else embedding
    billions, non_embedding = PUBLISHED[size]
    assert round(total / 1e9, 1) == billions
    assert abs((total - embedding - untied_head) / 1e9 - non_embedding) < 0.05


def test_the_real_constants():
    for size in PUBLISHED:
        c = qwen3_config(size)
        assert (c["head_dim"], c["vocab_size"], c["rope_theta"], c["rms_norm_eps"], c["max_position_embeddings"]) == \
            (128, 151936, 1e6, 1e-6, 40960)
        assert c["tie_word_embeddings"] == (size in ("0.6b", "1.7b", "4b"))
    assert qwen3_config("4b")["hidden_size"] == 2560 and qwen3_config("32b")["num_hidden_layers"] == 64


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny size in float32, split into several shards so the index is exercised."""
    return write_checkpoint(tmp_path_factory.mktemp("tiny"), "tiny", seed=3, dtype="float32", shard_bytes=16 << 20)


def test_transformers_loads_the_checkpoint_and_its_tokenizer(tiny):
    index = json.loads((tiny / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    model, info = transformers.Qwen3ForCausalLM.from_pretrained(tiny, output_loading_info=True)
    assert not any(info.values()), info                # nothing missing, unexpected or mismatched
    weights = dict(random_weights(qwen3_config("tiny"), seed=3, dtype="float32"))
    state = model.state_dict()
    for name, tensor in weights.items():
        assert torch.equal(state[name], tensor), name
    assert torch.equal(state["lm_head.weight"], weights["model.embed_tokens.weight"])    # tied
    tok = transformers.AutoTokenizer.from_pretrained(tiny)
    assert tok.eos_token_id == 151645 and tok.encode("Hello") == [9707]
    assert transformers.GenerationConfig.from_pretrained(tiny).eos_token_id == [151645, 151643]


def test_writing_again_replaces_the_weights_of_a_sharded_checkpoint(tmp_path):
    write_checkpoint(tmp_path, "tiny", seed=1, dtype="float32", shard_bytes=16 << 20)
    assert (tmp_path / "model.safetensors.index.json").is_file()
    write_checkpoint(tmp_path, "tiny", seed=2, dtype="bfloat16")           # one file this time
    assert sorted(p.name for p in tmp_path.glob("model*")) == ["model.safetensors"]
    model, info = transformers.Qwen3ForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    expected = dict(random_weights(qwen3_config("tiny"), seed=2, dtype="bfloat16"))["model.norm.weight"]
    assert torch.equal(model.state_dict()["model.norm.weight"].to(torch.bfloat16), expected)


def test_without_tokenizer_and_the_marker_of_where_weights_were_drawn(tmp_path):
    from tilesafe.engine.random_checkpoint import is_random_checkpoint
    write_checkpoint(tmp_path, "tiny", seed=4, dtype="float32", tokenizer=False)
    assert not (tmp_path / "tokenizer.json").exists() and (tmp_path / "config.json").is_file()
    assert is_random_checkpoint(tmp_path, "tiny", 4, "float32")
    assert not is_random_checkpoint(tmp_path, "tiny", 4, "float32", device="cuda")    # a GPU draws other values
    assert not is_random_checkpoint(tmp_path, "tiny", 5, "float32")


def test_a_seed_reproduces_its_weights_and_another_differs():
    config = qwen3_config("tiny")
    a, b, c = (dict(random_weights(config, seed=s, dtype="float32")) for s in (0, 0, 1))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["model.layers.0.mlp.up_proj.weight"], c["model.layers.0.mlp.up_proj.weight"])
    up = a["model.layers.0.mlp.up_proj.weight"]
    assert abs(up.std().item() - 0.02) < 0.002 and abs(a["model.norm.weight"].mean().item() - 1) < 0.05


def test_an_unknown_size_is_refused():
    with pytest.raises(TextInputError) as info:
        qwen3_config("7b")
    assert info.value.message == "no Qwen3 size '7b'"
    assert info.value.help == "choose one of 0.6b, 1.7b, 4b, 8b, 14b, 32b, tiny"


@pytest.mark.gpu
def test_random_weights_are_built_on_the_gpu():
    """The engine's benchmarks build 32B weights straight on the GPU (65.5 GB fits no disk)."""
    config = qwen3_config("0.6b")
    first = dict(random_weights(config, seed=0, dtype="bfloat16", device="cuda"))
    assert {k: tuple(t.shape) for k, t in first.items()} == weight_shapes(config)
    assert all(t.is_cuda and t.dtype == torch.bfloat16 for t in first.values())
    again = random_weights(config, seed=0, dtype="bfloat16", device="cuda")
    name, tensor = next(again)
    assert torch.equal(tensor, first[name])
