"""The pure parts of `benchmarks/engine.py` and its correctness gate (`engine_check.py`) on
hand-made numbers: the roofline count, the near-tie-aware agreement, the gate's verdict, the
budgeted parts runner and the README rows. No model is built."""
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import engine as bench  # noqa: E402
import engine_check  # noqa: E402
import readme_table  # noqa: E402


def test_roofline_counts_every_parameter_and_the_kv_read():
    kv_token = bench.kv_bytes_per_token(bench.qwen3_config_of("4b"))
    assert kv_token == 2 * 36 * 8 * 128 * 2              # k and v, 36 layers, 8 KV heads of 128, bf16
    r = bench.roofline_numbers(8_000_000_000, kv_token, 100, 2e-3, embed_bytes=1_000_000, hbm_bytes_per_s=4.8e12)
    ideal = (8e9 + 100 * kv_token) / 4.8e12
    assert r["ideal_step_s"] == pytest.approx(ideal)
    assert r["fraction_of_roofline"] == pytest.approx(ideal / 2e-3)
    assert r["roofline_tokens_per_s"] == pytest.approx(1 / ideal)
    assert r["bytes_read"] == 8_000_000_000 - 1_000_000 + 100 * kv_token      # an untied table: one row read
    assert r["achieved_bytes_per_s"] == pytest.approx(r["bytes_read"] / 2e-3)
    assert bench.roofline_numbers(1, 1, 1, None)["fraction_of_roofline"] is None


def _logits(rows):
    """(R, 6) logits: each row's entries as given, zeros elsewhere."""
    out = torch.zeros(len(rows), 6)
    for i, row in enumerate(rows):
        for j, v in row.items():
            out[i, j] = v
    return out


def test_top2_margin_and_logit_error():
    ref = _logits([{1: 5.0, 3: 4.0}, {0: -2.0}])
    assert engine_check.top2_margin(ref).tolist() == [1.0, 0.0]      # row 1: the zeros tie
    err = engine_check.logit_error(ref + _logits([{2: 0.5}, {0: 0.1}]), ref)
    assert err["row_abs"] == pytest.approx([0.5, 0.1])
    assert err["row_rel"] == pytest.approx([0.5 / 5.0, 0.1 / 2.0])
    assert err["max_abs"] == pytest.approx(0.5) and err["max_rel"] == pytest.approx(0.1)


def test_agreement_ignores_near_ties_and_counts_decisive_disagreements():
    ref = _logits([{1: 5.0, 3: 4.0},        # margin 1.0: decisive, argmax 1
                   {2: 3.0, 4: 2.99},       # margin 0.01: a near-tie, argmax 2
                   {0: 2.0, 5: 1.0}])       # margin 1.0: decisive, argmax 0
    a = engine_check.agreement(ref, [1, 4, 5], tolerance=0.1, factor=3.0)     # decisive: margin > 0.3
    assert (a["decisive"], a["agree"], a["near_ties"], a["disagree_at"], a["all_agree"]) == (2, 1, 1, [2], 1)
    assert a["threshold"] == pytest.approx(0.3)
    b = engine_check.agreement(ref, [1, 4, 0], tolerance=0.1, factor=3.0)     # the near-tie's other token is fine
    assert (b["decisive"], b["agree"], b["disagree_at"]) == (2, 2, [])
    c = engine_check.agreement(ref, [1, 4, 0], tolerance=0.5, factor=3.0)     # margin 1.0 < 1.5: all near-ties
    assert (c["decisive"], c["near_ties"]) == (0, 3)


def test_verdict_fails_on_error_or_decisive_disagreement_and_is_inconclusive_on_ties():
    ok = {"decisive": 3, "agree": 3, "disagree_at": [], "threshold": 0.3}
    assert engine_check.verdict(0.01, 0.02, ok, 0.05)[0] is True
    passed, why = engine_check.verdict(0.01, 0.2, ok, 0.05)
    assert not passed and "0.2 of their scale (limit 0.05)" in why
    assert engine_check.verdict(0.01, math.nan, ok, 0.05)[0] is False
    passed, why = engine_check.verdict(0.01, 0.02, ok | {"agree": 2, "disagree_at": [4]}, 0.05)
    assert not passed and "decisive steps [4]" in why
    passed, why = engine_check.verdict(0.01, 0.02, ok | {"decisive": 0, "agree": 0}, 0.05)
    assert passed and "inconclusive" in why
    passed, why = engine_check.verdict(0.01, 0.02, ok, 0.05, refs_rel=0.2)     # the references disagree
    assert not passed and "cannot vouch" in why
    assert engine_check.verdict(0.01, 0.02, ok, 0.05, refs_rel=0.1)[0] is True


def test_parts_records_errors_and_skips_what_the_budget_cannot_hold(capsys):
    parts, out = bench.Parts(budget_s=100.0), {}

    def boom():
        raise ValueError("no such kernel")
    assert parts.run(out, "a", 1.0, lambda: {"x": 1}) == {"x": 1}
    assert parts.run(out, "b", 1.0, boom) is None
    assert parts.run(out, "c", 1000.0, lambda: {"x": 2}) is None
    assert out["a"] == {"x": 1}
    assert out["b"] == {"error": "ValueError: no such kernel"}
    assert out["c"]["skipped"].startswith("estimated 1000 s")
    assert "c: skipped" in capsys.readouterr().out


def test_parse_args_quick_and_sizes():
    q = bench.parse_args(["--quick"])
    assert (q.sizes, q.tokens, q.batches, q.budget_s) == (["0.6b", "4b"], 64, [1, 8], 90.0)
    d = bench.parse_args(["--sizes", "8b,32b", "--hf-sizes", ""])
    assert (d.sizes, d.hf_sizes, d.prefills, d.batches) == (["8b", "32b"], [], [512, 2048, 8192], [1, 8, 32])


def test_engine_rows_show_numbers_and_refusals():
    run = {"size": "4b", "check": {"passed": True, "first_step": {"max_rel": 0.012},
                                   "teacher_forced": {"agree": 20, "decisive": 20}},
           "decode_128": {"decode_tokens_per_s": 300.4}, "replayed_step": {"gpu_s": 2.5e-3},
           "roofline_128": {"fraction_of_roofline": 0.672}, "torch_graph": {"step_s": 5e-3},
           "transformers": {"decode_tokens_per_s": 41.0}, "batches": {"8": {"decode_tokens_per_s": 2000.0}},
           "prefill": {"2048": {"engine_s": 0.1, "torch_s": 0.08}}, "memory_short": {"peak_bytes": 9 * 2**30}}
    refused = {"size": "32b", "refused": "the correctness gate failed: ...",
               "check": {"passed": False, "first_step": {"max_rel": 0.9},
                         "teacher_forced": {"agree": 1, "decisive": 5}}}
    rows = readme_table.engine_rows({"runs": [refused, run]}).splitlines()
    assert rows[2] == ("| 4B | pass (1.2e-02; 20/20 decisive) | 300 | 2.50 ms | 67% | 5.00 ms (2.00x) | 41 "
                       "| 2000 / — | 100 / 80 ms | 9.0 GiB |")
    assert rows[3].startswith("| 32B | FAIL (9.0e-01; 1/5 decisive) | refused")
