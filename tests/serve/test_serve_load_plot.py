"""benchmarks/serve_load.py's plot and client choice, without a server: `--plot JSON` draws
a level list (two prefix lengths) to a PNG, and the HTTP client is httpx2 (what openai uses
and what the GPU machine gets) when it is installed."""
import json

import pytest


def level(c, shared, tps):
    pct = {"p50": 0.01 * c, "p90": 0.02 * c, "p99": 0.03 * c, "mean": 0.015 * c}
    return {"concurrency": c, "shared_prefix": shared, "output_tokens_per_s": tps, "ttft_s": pct, "itl_s": pct}


def test_plot_draws_every_prefix_lengths_levels(tmp_path, serve_load):
    pytest.importorskip("matplotlib")
    report = {"model": "m", "prompt_len": "64:256", "output_len": "32:96", "max_num_seqs": 32,
              "levels": [level(c, s, 100.0 * c + s) for s in (0, 256) for c in (1, 8, 32)]}
    src = tmp_path / "serve.json"
    src.write_text(json.dumps(report))
    assert serve_load.main(["--plot", str(src)]) == 0
    png = tmp_path / "serve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_client_is_httpx2_when_installed(serve_load):
    httpx2 = pytest.importorskip("httpx2")
    assert serve_load._httpx() is httpx2
