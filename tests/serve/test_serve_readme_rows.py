"""benchmarks/readme_table.py --serve: the serving table's rows from serve_load JSONs (smallest
shape, then fewest clients first; off for no decode-step rows; a failed level says so) and
issue 19's inter-token target per size; a load of other lengths names them."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import readme_table  # noqa: E402


def _level(c, rows, tps):
    pct = {"p50": 0.004, "p99": 0.010}
    return {"concurrency": c, "shared_prefix": 0, "decode_step_tokens": rows, "output_tokens_per_s": tps,
            "offline_output_tokens_per_s": 1000.0, "server_vs_offline": tps / 1000, "ttft_s": pct, "itl_s": pct,
            "chunk_gap_s": pct, "hbm_roofline": {"fraction": 0.3}}


def test_serve_rows_order_label_and_target():
    four = {"random_weights": "4b", "levels": [_level(32, "itl", 1100.0), _level(1, "None", 300.0),
                                               {**_level(8, "None", 0), "shared_prefix": 256}],
            "targets": {"chunk_gap_p99_32_s": 0.006, "batch1_step_s": 0.0025, "itl_p99_32_over_2x_batch1_step": 1.2}}
    eight = {"random_weights": "8b", "levels": [{"concurrency": 128, "decode_step_tokens": "itl", "error": "Boom: x"}]}
    rows = readme_table.serve_rows([eight, four]).splitlines()
    assert rows[2] == "| 4B | 1 | off | 300 | 1000 | 0.30 | 4.0 / 10.0 ms | 4.0 / 10.0 ms | 10.0 ms | 30% |"
    assert rows[3].startswith("| 4B | 32 | itl | 1100 | 1000 | 1.10 |")
    assert rows[4] == "| 8B | 128 | itl | error: Boom: x | | | | | | |"
    assert rows[-1] == "4B: p99 gap at 32 clients 6.00 ms against twice the 2.50 ms batch-1 step (1.20x the bound)."


def test_a_load_of_other_lengths_is_labelled_with_them():
    long = {"random_weights": "4b", "prompt_len": "128", "output_len": "512", "levels": [_level(32, "itl", 900.0)]}
    plain = {"random_weights": "4b", "prompt_len": "128", "output_len": "64", "levels": [_level(32, "itl", 1100.0)]}
    rows = readme_table.serve_rows([long, plain]).splitlines()
    assert rows[2].startswith("| 4B (128 in, 512 out) | 32 | itl | 900 |")
    assert rows[3].startswith("| 4B | 32 | itl | 1100 |")
