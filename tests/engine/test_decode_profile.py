"""The pure parts of `benchmarks/decode_profile.py` (the decode step's per-kernel profile) on a
hand-made trace of a two-layer Qwen3 step: the bytes each kernel moves, the sums by kind, the
gaps, the per-position table and the distance to 85% of the roofline. No GPU, no model."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import decode_profile as dp  # noqa: E402
from engine import qwen3_config_of  # noqa: E402

LAYER = ["rms_norm_kernel", "skinny_kernel", "norm_rope_kv_rows_kernel", "paged_decode_kernel",
         "decode_combine_kernel", "fused_skinny_kernel", "rms_norm_kernel", "skinny_kernel", "fused_skinny_kernel"]


class Cfg:
    hidden_size, head_dim, intermediate_size, vocab_size = 64, 16, 96, 1000
    num_heads, num_kv_heads, num_layers = 4, 2, 2


def names(layers=2):
    return ["embedding_kernel"] + LAYER * layers + ["rms_norm_kernel", "argmax_gemv_kernel", "argmax_rows_kernel"]


def test_each_weight_kernel_streams_the_next_weight_in_the_models_order():
    b = dp.step_bytes(names(), Cfg, context=10, splits=4)
    e, hq, hkv, i = 64, 64, 32, 96
    qkv, o, gu, down = (hq + 2 * hkv) * e, e * hq, 2 * i * e, e * i          # elements of each weight
    assert b[2] == 2 * qkv + 2 * (e + hq + 2 * hkv)                            # qkv: weight + x and output rows
    assert b[6] == 2 * o + 2 * (hq + e)
    assert b[8] == 2 * gu + 2 * (e + 2 * i)
    assert b[9] == 2 * down + 2 * (i + e)
    assert b[11] == b[2]                                                       # layer 2's qkv
    assert b[-2] == 2 * 1000 * e + 2 * (e + 1000)                              # the LM head
    assert b[4] == 2 * 10 * hkv * 2 + 2 * hq * 2                               # 10 keys and values, q and out
    assert b[1] == 3 * e * 2                                                   # an RMSNorm: x, g, out


def test_a_split_k_pair_takes_one_weight():
    seq = ["embedding_kernel", "rms_norm_kernel", "split_k_kernel", "split_sum_kernel", "fused_skinny_kernel"]
    b = dp.step_bytes(seq, Cfg, context=1, splits=1)
    assert b[2] == 2 * 128 * 64 + 2 * (64 + 128)                                # qkv
    assert b[4] == 2 * 64 * 64 + 2 * (64 + 64)                                  # then o
    assert b[3] < b[2] // 5                                                     # partials, not a weight


def rows_of(durations, gap):
    """A trace: kernels back to back with `gap` µs between them."""
    rows, t = [], 0.0
    for name, us in durations:
        rows.append({"kernel": name, "start_us": t, "us": us, "gap_us": gap})
        t += us + gap
    rows[-1]["gap_us"] = 0.0
    return rows


def test_table_sums_kinds_gaps_and_rates():
    seq = names()
    rows = rows_of([(n, 10.0 if n in dp.WEIGHT_KERNELS else 2.0) for n in seq], gap=1.0)
    b = dp.step_bytes(seq, Cfg, context=10, splits=4)
    t = dp.table(rows, b)
    assert t["launches"] == len(seq)
    assert t["gap_us"] == pytest.approx(len(seq) - 1) and t["overlap_us"] == 0
    assert t["span_us"] == pytest.approx(sum(r["us"] for r in rows) + len(seq) - 1)
    assert t["by_kind"]["gemv"]["launches"] == 8 and t["by_kind"]["lm_head"]["launches"] == 1
    assert t["by_kind"]["attention"]["launches"] == 4
    assert t["by_kind"]["gemv"]["us"] == pytest.approx(80.0)
    gemv_bytes = sum(x for n, x in zip(seq, b) if n in dp.WEIGHT_KERNELS[:-1])
    assert t["by_kind"]["gemv"]["TB_s"] == pytest.approx(gemv_bytes / 80.0 / 1e6, abs=1e-3)   # 3 decimals
    assert rows[2]["GB_s"] == pytest.approx(b[2] / 10.0 / 1e3, abs=0.05)                  # 1 decimal
    pos = dp._layer_positions(rows, 2)
    assert [p["kernel"] for p in pos] == LAYER


def test_layer_positions_with_the_norms_folded():
    """Seven kernels a layer and no final norm kernel: the tail is the LM head's two."""
    layer = [n for n in LAYER if n != "rms_norm_kernel"]
    seq = ["embedding_kernel"] + layer * 3 + ["argmax_gemv_kernel", "argmax_rows_kernel"]
    rows = rows_of([(n, 1.0) for n in seq], gap=0.5)
    dp.table(rows, dp.step_bytes(seq, Cfg, context=4, splits=4))
    assert [p["kernel"] for p in dp._layer_positions(rows, 3)] == layer


def test_a_kernel_launched_early_owns_only_its_time_after_the_one_before():
    """Under PDL b starts at 3 inside a (0..10) and waits: its own time is 10..14, not 3..14."""
    runs = [[("a", 0.0, 10.0), ("b", 3.0, 14.0), ("c", 15.0, 17.0)]] * 3
    rows = dp.rows_of_runs(runs)
    assert [r["us"] for r in rows] == [10.0, 11.0, 2.0]
    assert [r["own_us"] for r in rows] == [10.0, 4.0, 2.0]
    assert [r["gap_us"] for r in rows] == [-7.0, 1.0, 0.0]
    t = dp.table(rows, [0, 0, 0])
    assert t["own_us"] + t["gap_us"] == pytest.approx(t["span_us"])


def test_overlapping_kernels_count_as_overlap_not_gaps():
    rows = rows_of([("a", 5.0), ("b", 5.0), ("c", 5.0)], gap=-1.0)
    t = dp.table(rows, [0, 0, 0])
    assert t["gap_us"] == 0 and t["overlap_us"] == pytest.approx(2.0)


def test_summary_gives_the_distance_and_the_gemv_rate_it_would_take():
    seq = names()
    plain = dp.table(rows_of([(n, 10.0 if n in dp.WEIGHT_KERNELS else 2.0) for n in seq], gap=1.0),
                     dp.step_bytes(seq, Cfg, context=10, splits=4))
    s = dp.summary(plain, None, step_s=100e-6, ideal_s=68e-6)
    assert s["target_us"] == pytest.approx(80.0)
    assert s["distance_us"] == pytest.approx(20.0)
    assert s["gemv_us"] == pytest.approx(90.0)             # 8 layer GEMVs and the LM head
    assert s["non_gemv_us"] == pytest.approx(10.0)
    assert s["gemv_TB_s_needed"] == pytest.approx(s["gemv_bytes"] / 70.0 / 1e6, abs=1e-3)


def test_the_real_4b_step_moves_its_weights():
    cfg = qwen3_config_of("4b")
    seq = ["embedding_kernel"] + LAYER * cfg.num_layers + ["rms_norm_kernel", "argmax_gemv_kernel",
                                                           "argmax_rows_kernel"]
    b = dp.step_bytes(seq, cfg, context=160, splits=4)
    weights = sum(x for n, x in zip(seq, b) if n in dp.WEIGHT_KERNELS)
    assert weights == pytest.approx(8.05e9, rel=0.01)     # 36 layers of 202 MB and a 778 MB LM head


@pytest.mark.parametrize("norm_prologue", [False, True])
def test_a_real_steps_kernels_take_every_weight_once(checkpoint, launched_kernels, monkeypatch, norm_prologue):
    """The byte model's order holds for the kernels a one-row greedy step launches (CPU, tiny
    Qwen3): one weight kernel per projection, in the model's order, then the LM head."""
    import tilesafe.engine.model as engine_model
    from tilesafe.engine import LLM, SamplingParams
    monkeypatch.setattr(engine_model, "NORM_PROLOGUE", norm_prologue)
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=1, progress=False)
    llm.sampler.set_rows([SamplingParams(temperature=0).resolved({})], [0])
    seen = launched_kernels()
    with torch.inference_mode():
        llm.decode_steps.run([5], [3])
    cfg = llm.config
    weights = [n for n in seen if n in dp.WEIGHT_KERNELS]
    assert len(weights) == 4 * cfg.num_layers + 1 and weights[-1] == "argmax_gemv_kernel"
    b = dp.step_bytes(seen, cfg, context=4, splits=2, itemsize=4)
    e, d, i = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    per_layer = ((cfg.num_heads + 2 * cfg.num_kv_heads) * d * e + e * cfg.num_heads * d + 2 * i * e + e * i) * 4
    streamed = sum(x for n, x in zip(seen, b) if n in dp.WEIGHT_KERNELS)
    assert streamed >= cfg.num_layers * per_layer + cfg.vocab_size * e * 4
    assert streamed < 1.1 * (cfg.num_layers * per_layer + cfg.vocab_size * e * 4)


def test_a_batch_step_reads_each_weight_once_and_every_rows_keys():
    """At batch B a weight kernel streams its weight once (plus B rows in and out), attention
    and the small kernels move B rows, and the last weight kernel (a GEMM above 16 rows) is
    the LM head, followed by the sampler."""
    seq = (["embedding_kernel"] + ["add_rms_norm_kernel", "mm_kernel", "norm_rope_kv_rows_kernel",
                                    "paged_decode_kernel", "decode_combine_kernel", "split_k_last_kernel",
                                    "add_rms_norm_kernel", "mm_kernel", "binary_kernel", "mm_kernel"] * 2
           + ["add_rms_norm_kernel", "mm_kernel", "sample_kernel"])
    one = dp.step_bytes(seq, Cfg, context=10, splits=4)
    b = dp.step_bytes(seq, Cfg, context=10, splits=4, batch=8)
    e, hq, hkv = 64, 64, 32
    assert b[2] == 2 * (hq + 2 * hkv) * e + 8 * 2 * (e + hq + 2 * hkv)       # qkv once, 8 rows in and out
    assert b[4] == 8 * one[4] and b[1] == 8 * one[1] and b[-1] == 8 * 1000 * 2
    assert b[-2] == 2 * 1000 * e + 8 * 2 * (e + 1000)                          # the LM head
    kinds = dp.kinds_of(seq)
    assert kinds[-2] == "lm_head" and kinds[-1] == "sampler" and kinds.count("lm_head") == 1
    assert kinds[2] == kinds[6] == "gemv" and kinds[4] == "attention"


def test_set_context_puts_every_row_in_its_slot():
    class Step:
        class a:
            ids = torch.zeros(3, dtype=torch.int32)
            positions, lens, slots = torch.zeros(3, dtype=torch.int32), torch.zeros(3, dtype=torch.int32), \
                torch.zeros(3, dtype=torch.int32)
            tables = torch.full((3, 1), 7, dtype=torch.int32)
    dp.set_context(Step, context=5, max_model_len=16)
    assert Step.a.positions.tolist() == [4, 4, 4] and Step.a.lens.tolist() == [5, 5, 5]
    assert Step.a.slots.tolist() == [4, 20, 36] and Step.a.tables[:, 0].tolist() == [0, 1, 2]


def test_layer_positions_of_a_batch_step():
    """Batch > 1: unfused layers (the first norm without a residual), the LM head a plain
    GEMM after the final add + norm, then the sampler."""
    layer = ["add_rms_norm_kernel", "mm_kernel", "norm_rope_kv_rows_kernel", "paged_decode_single_kernel",
             "mm_kernel", "add_rms_norm_kernel", "mm_kernel", "binary_kernel", "mm_kernel"]
    first = ["rms_norm_kernel"] + layer[1:]
    seq = ["embedding_kernel"] + first + layer * 2 + ["add_rms_norm_kernel", "mm_kernel", "sample_kernel"]
    rows = rows_of([(n, 1.0) for n in seq], gap=0.5)
    dp.table(rows, dp.step_bytes(seq, Cfg, context=4, splits=1, batch=32))
    assert [p["kernel"] for p in dp._layer_positions(rows, 3)] == first


def test_the_weight_major_kernels_stream_a_weight():
    """The weight-major GEMM the config model picks at 17..32 rows (kernels/weight_major.py)
    takes its projection's weight like the other weight kernels (it was a "small" kernel)."""
    names = ["weight_major_kernel", "rms_norm_kernel", "weight_major_split_kernel", "mm_kernel"]
    assert dp.kinds_of(names) == ["gemv", "small", "gemv", "lm_head"]
