"""The results JSON (schema, file name, round trip) and the summary table."""
import json

import pytest

from fakes import document
from tilesafe.bench import report

TOP = {"schema", "created", "machine", "versions", "git", "settings", "elapsed_s", "results", "targets"}
RECORD = {"family", "name", "params", "dtype", "metric", "bytes", "flops", "tolerance", "status", "impls", "ratios"}


def test_document_schema():
    doc = document()
    assert set(doc) == TOP and doc["schema"] == "tilesafe-bench/1"
    assert doc["machine"]["hbm_peak_tbps"] == 4.8 and doc["git"]["commit"] == "abc123"
    for rec in doc["results"]:
        assert RECORD <= set(rec)
        for impl in rec["impls"].values():
            assert impl["role"] in ("tilesafe", "torch", "twin", "baseline") and "status" in impl
    for t in doc["targets"]:
        assert {"id", "text", "threshold", "value", "passed", "workloads", "missing"} <= set(t)


def test_write_and_load_round_trip(tmp_path):
    doc = document()
    path = report.write(doc, tmp_path / "h200")
    assert path.parent == tmp_path / "h200" and path.name.startswith("bench-") and path.name.endswith("-quick.json")
    assert report.load(path) == json.loads(json.dumps(doc))
    assert not list(path.parent.glob("*.tmp"))


def test_load_refuses_other_json(tmp_path):
    other = tmp_path / "launch_overhead.json"
    other.write_text('{"gpu": "NVIDIA H200"}')
    with pytest.raises(ValueError, match="not a tilesafe benchmark result"):
        report.load(other)


def test_table_has_every_workload_ratio_and_target_verdict():
    text = report.table(document())
    for name in ("add bf16 512MiB", "gemm bf16 8192", "flash bf16 causal s=4096", "gemv bf16 4B o"):
        assert name in text
    assert "gemm (TFLOP/s)" in text and "add (TB/s)" in text
    assert "sdpa-cudnn" in text                       # the best torch backend is named
    assert "0.990" in text                            # add: torch.add 396 us / tilesafe 400 us
    assert "error" in text                            # the flash twin's status
    targets = text[text.index("\ntarget "):].splitlines()[3:]       # the targets come last
    assert len(targets) == len(document()["targets"])
    row = {line.split("  ")[0]: line for line in targets}
    assert row["add >= 99% of torch.add"].endswith("pass")
    assert row["flash >= 90% of the fastest SDPA backend"].endswith("MISS (worst: flash bf16 causal s=4096)")
    assert row["tilesafe within 1% of its raw Triton twin"].endswith("MISS (no data: 1 of 5)")
    assert ">1.00" in row["GEMV faster than F.linear"]


def test_a_failed_workload_shows_its_error():
    doc = document()
    doc["results"][0].update(status="error", error="OutOfMemoryError: CUDA out of memory")
    assert "add bf16 512MiB  error: OutOfMemoryError" in report.table(doc)


def test_dry_run_table_shows_checks_and_no_targets():
    doc = document()
    doc["settings"]["dry_run"] = True
    text = report.table(doc)
    assert "correctness" in text and "tilesafe ok" in text and "target" not in text


def test_markdown_summary_has_a_row_per_family_and_per_target():
    doc = document()
    text = report.markdown(doc)
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    families = report.families(doc["results"])
    assert [r.split(" | ")[0][2:] for r in rows[1:1 + len(families)]] == families
    add = next(r for r in rows if r.startswith("| add |"))
    assert "0.99 (worst 0.99)" in add                      # torch.add 396 us / tilesafe 400 us
    assert sum(r.startswith("| target |") for r in rows) == 1
    assert len(rows) == 2 + len(families) + len(doc["targets"])
    assert any(r.startswith("| flash >= 90% of the fastest SDPA backend") and "miss" in r for r in rows)
