"""Ratios of one workload and the targets of the benchmark issue, from fake results."""
import math

import pytest

from fakes import document, impl, record, results
from tilesafe.bench import targets as T


def test_ratios_are_speed_ratios_against_the_best_torch_the_twin_and_the_baseline():
    rec = results()[3]                              # flash: two SDPA backends, a failed twin
    r = T.ratios(rec)
    assert r["torch_best"] == "sdpa-cudnn"
    assert r["vs_torch"] == pytest.approx(2000.0 / 3000.0)
    assert "vs_twin" not in r                       # the twin failed: no ratio, never a made-up one


def test_baseline_ratio_compares_rates_of_each_ones_own_bytes():
    rec = results()[4]                              # gemv: the read moves only the weight's bytes
    r = T.ratios(rec, peak_tbps=4.8)
    ts_rate, read_rate = 21_000_000 / 6e-6, 20_971_520 / 5.5e-6
    assert r["vs_baseline"] == pytest.approx(ts_rate / read_rate)
    assert r["peak_fraction"] == pytest.approx(ts_rate / 1e12 / 4.8)
    assert r["vs_torch"] == pytest.approx(1.5)


def test_no_tilesafe_time_means_no_ratios():
    rec = record("add", "x", tilesafe={"role": "tilesafe", "status": "wrong", "rel_error": 1.0},
                 torch=impl("torch", 1.0))
    assert T.ratios(rec) == {}


def _target(doc, id_):
    return next(t for t in doc["targets"] if t["id"] == id_)


def test_targets_each_geomean_strict_and_missing():
    doc = document()
    add = _target(doc, "add")
    assert add["value"] == pytest.approx(396.0 / 400.0) and add["passed"] is True
    geo = _target(doc, "gemm-geomean")
    assert geo["value"] == pytest.approx(math.sqrt((190 / 200) * (1600 / 1500)))
    assert geo["passed"] is (geo["value"] >= 1.0)
    assert _target(doc, "gemm-min")["passed"] is True               # worst 0.95 >= 0.90
    twin = _target(doc, "twin")
    assert twin["passed"] is False and twin["missing"] == ["flash bf16 causal s=4096"]
    flash = _target(doc, "flash")
    assert flash["passed"] is False and flash["worst"] == "flash bf16 causal s=4096"   # 0.667 < 0.90
    linear = _target(doc, "gemv-linear")
    assert linear["passed"] is True and linear["value"] == pytest.approx(1.5)


def test_gemv_must_be_strictly_faster_than_f_linear():
    res = results()
    res[4]["impls"]["F.linear"]["median_us"] = 6.0
    doc = document(res)
    assert _target(doc, "gemv-linear")["value"] == pytest.approx(1.0)
    assert _target(doc, "gemv-linear")["passed"] is False


def test_targets_of_families_not_run_are_left_out():
    doc = document(results()[:1])
    assert {t["id"] for t in doc["targets"]} == {"add", "twin"}


def test_the_twin_target_covers_every_family_even_one_added_later():
    res = results()[:1] + [record("some_new_family", "new bf16", tilesafe=impl("tilesafe", 100.0),
                                  twin=impl("twin", 90.0))]
    twin = _target(document(res), "twin")
    assert twin["passed"] is False and twin["worst"] == "new bf16" and twin["value"] == pytest.approx(0.9)
