"""`tilesafe serve` as a user runs it: a subprocess on a free port, a completion through the
openai client, then Ctrl-C during a stream: the stream still ends properly (finished within
uvicorn's grace period, else cut with finish_reason 'abort'), the server exits 0 without a
traceback."""
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tilesafe.cli import main

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_then_shuts_down_gracefully(word_model):
    port = free_port()
    env = dict(os.environ, TILESAFE_BACKEND="reference", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    args = [sys.executable, "-m", "tilesafe", "serve", str(word_model), "--device", "cpu", "--port", str(port),
            "--max-model-len", "64", "--max-num-seqs", "2", "--served-model-name", "words"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        got = client.completions.create(model="words", prompt="w3 w17 w5", max_tokens=3, temperature=0)
        assert got.choices[0].finish_reason == "length" and len(got.choices[0].text.split()) == 3
        finish = []
        stream = client.completions.create(model="words", prompt="w1", max_tokens=30, temperature=0, stream=True,
                                           extra_body={"ignore_eos": True})

        def read():
            finish.extend(c.choices[0].finish_reason for c in stream)
        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        reader.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and f"serving words on http://127.0.0.1:{port}/v1" in err
    assert finish and finish[-1] in ("length", "abort") and all(f is None for f in finish[:-1])


def test_serve_without_model_says_how(capsys):
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "serve: expected MODEL" in err and "--random-weights SIZE" in err


def test_serve_flags_reach_the_engine():
    """--decode-step-tokens, --stream-interval and --split-rows (the engine had them; the CLI
    did not) become AsyncLLM's options."""
    from tilesafe.cli import parser
    from tilesafe.cli_serve import engine_options
    opts = engine_options(parser().parse_args(["serve", "m", "--decode-step-tokens", "48", "--stream-interval", "2",
                                               "--split-rows", "64"]))
    assert (opts["decode_step_tokens"], opts["stream_interval"], opts["split_rows"]) == (48, 2, 64)
    defaults = engine_options(parser().parse_args(["serve", "m"]))
    assert (defaults["decode_step_tokens"], defaults["stream_interval"], defaults["split_rows"]) == ("itl", 1, None)
    for word, value in (("auto", "auto"), ("itl", "itl"), ("off", None)):
        assert engine_options(parser().parse_args(["serve", "m", "--decode-step-tokens", word]))[
            "decode_step_tokens"] == value


@pytest.mark.parametrize("bad", ["0", "many", "-3"])
def test_a_bad_decode_step_tokens_is_a_usage_error(bad, capsys):
    with pytest.raises(SystemExit) as e:
        main(["serve", "m", "--decode-step-tokens", bad])
    assert e.value.code == 2
    assert f"expected auto, itl, off or a positive number of rows, got '{bad}'" in capsys.readouterr().err


def test_more_decode_step_tokens_than_sequences_is_refused_before_serving(word_model, capsys):
    assert main(["serve", str(word_model), "--device", "cpu", "--max-model-len", "32", "--max-num-seqs", "2",
                 "--decode-step-tokens", "7"]) == 2
    err = capsys.readouterr().err
    assert "decode_step_tokens must be 'auto', 'itl', None or an int in 1..3 x max_num_seqs (6), got 7" in err
    assert "Traceback" not in err
