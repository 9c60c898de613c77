"""Tiny random Qwen3 checkpoints written by transformers, the engine's independent oracle.

The weights are drawn at a large scale (initializer_range 0.5) so that greedy choices are
far from ties: a float32 engine then agrees with transformers token for token.
"""
import pytest
import torch

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, initializer_range=0.5, max_position_embeddings=64,
            rope_theta=10000.0)


def build_model(**overrides):
    """A transformers Qwen3ForCausalLM in float32, eval mode, seeded."""
    torch.manual_seed(overrides.pop("seed", 0))
    cfg = transformers.Qwen3Config(**{**TINY, **overrides})
    return transformers.Qwen3ForCausalLM(cfg).float().eval()


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """checkpoint(name, **config) -> (folder, transformers model); each made once per session."""
    made = {}

    def make(name="tiny", save=None, **overrides):
        if name not in made:
            model = build_model(**overrides)
            folder = tmp_path_factory.mktemp(name)
            model.save_pretrained(folder, **(save or {}))
            made[name] = (folder, model)
        return made[name]
    return make


@pytest.fixture(scope="session")
def hf_greedy():
    """hf_greedy(model, prompt, n) -> transformers' greedy tokens after `prompt` and each one's log-probability."""
    return _hf_greedy


def _hf_greedy(model, prompt, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    tokens = out.sequences[0, len(prompt):].tolist()
    logprobs = [torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(out.scores, tokens)]
    return tokens, logprobs


@pytest.fixture(scope="session")
def ours():
    """Qwen3's real tokenizer through tilesafe.engine (the text tests' subject)."""
    from tilesafe.engine.qwen3_files import tokenizer_dir
    from tilesafe.engine.tokenizer import Tokenizer
    return Tokenizer.from_dir(tokenizer_dir())


@pytest.fixture(scope="session")
def reference():
    """The same files through transformers' AutoTokenizer: the text tests' oracle."""
    from tilesafe.engine.qwen3_files import tokenizer_dir
    return transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir()))


@pytest.fixture
def launched_kernels(monkeypatch):
    """launched_kernels() -> the list of the names of the kernels every library call launches
    from then on; calls take their full path (a plan's fast form launches without `start`)."""
    import tilesafe.kernels.call_plans as call_plans
    import tilesafe.kernels.launch as kernel_launch

    def record():
        monkeypatch.setattr(call_plans, "call_key", lambda *args, **kwargs: (None, None, None))
        seen = []
        for module in (kernel_launch, call_plans):
            real = module.start

            def start(kernel, *args, _real=real, **kwargs):
                seen.append(kernel.name if hasattr(kernel, "name") else kernel.__name__)
                return _real(kernel, *args, **kwargs)
            monkeypatch.setattr(module, "start", start)
        return seen
    return record
