"""A tiny random Qwen3 with a word-level tokenizer (token i is the word `w<i>`) and a small
chat template, served on loopback by the real server (uvicorn on a thread, a free port)."""
import pytest

# The engine tests' tiny shape (tests/engine/conftest.py), one layer: weights at a large scale
# keep greedy choices far from ties, so the float32 engine is exact token for token.
TINY = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, initializer_range=0.5, max_position_embeddings=64,
            rope_theta=10000.0)


def build_model(seed=0):
    import torch
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**TINY)).float().eval()


TEMPLATE = ("{% for m in messages %}w90 {{ m['role'] }} {{ m['content'] }} w91 {% endfor %}"
            "{% if add_generation_prompt %}w90 assistant {% endif %}")


@pytest.fixture(scope="session")
def word_model(tmp_path_factory):
    """A folder: a 1-layer tiny Qwen3 (fast on the CPU interpreter), tokenizer.json and a chat template."""
    import json
    tokenizers = pytest.importorskip("tokenizers")
    folder = tmp_path_factory.mktemp("serve") / "ckpt"
    build_model().save_pretrained(folder)
    vocab = {f"w{i}": i for i in range(96)}
    vocab.update({"user": 92, "assistant": 93, "system": 94})
    del vocab["w92"], vocab["w93"], vocab["w94"]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece()          # words joined by spaces
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    return folder


def _word_llm(word_model, max_num_seqs: int):
    from tilesafe.engine import LLM
    return LLM(str(word_model), device="cpu", max_model_len=32, max_num_seqs=max_num_seqs, progress=False)


@pytest.fixture(scope="module")
def llm(word_model):
    """The tiny word model's engine: 4 sequences of up to 32 positions (one per test module)."""
    return _word_llm(word_model, 4)


@pytest.fixture(scope="module")
def llm_one_seq(word_model):
    """The same model in an engine of one sequence: each prompt alone, the batched engines' oracle."""
    return _word_llm(word_model, 1)


@pytest.fixture(scope="module")
def serve_load():
    """benchmarks/serve_load.py as a module (the load generator is a script, not a package)."""
    import importlib.util
    from pathlib import Path
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "serve_load.py"
    spec = importlib.util.spec_from_file_location("serve_load", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
