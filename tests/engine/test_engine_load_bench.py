"""`benchmarks/engine_load.py` (engine.py's load-time part) on the CPU at the tiny size: the
checkpoint is written in the Hub's layout, loaded twice by `LLM(path)` (timed), holds the
weights `LLM.from_random` draws for its seed, and is deleted afterwards."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import engine as bench  # noqa: E402
import engine_load  # noqa: E402


def test_load_time_writes_loads_twice_and_cleans_up(tmp_path):
    r = engine_load.load_time("tiny", "cpu", ckpt_dir=str(tmp_path), seed=2)
    assert r["matches_random"] is True and r["generates"] == 2
    assert "model.safetensors" in r["files"] and "config.json" in r["files"]
    assert r["safetensors_bytes"] >= r["weight_bytes"] > 0
    for name in ("first", "second"):
        assert r[name]["seconds"] > 0 and r[name]["safetensors_bytes_per_s"] > 0
    assert list(tmp_path.iterdir()) == []                     # the checkpoint folder is gone


def test_load_time_refuses_a_disk_without_room(tmp_path, monkeypatch):
    import shutil
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10 << 30, 10 << 30, 1 << 30))
    r = engine_load.load_time("4b", "cpu", ckpt_dir=str(tmp_path))
    assert r == {"skipped": f"4b: 8.0 GB of weights, 1.1 GB free in {tmp_path}"}
    assert list(tmp_path.iterdir()) == []


def test_load_sizes_default_to_4b_on_a_full_gpu_run_only():
    assert bench.parse_args([]).load_sizes == ["4b"]
    assert bench.parse_args(["--quick"]).load_sizes == []
    assert bench.parse_args(["--device", "cpu", "--sizes", "tiny"]).load_sizes == []
    assert bench.parse_args(["--sizes", "", "--load-sizes", "4b,0.6b"]).load_sizes == ["4b", "0.6b"]


def test_readme_rows_end_with_the_load_time():
    import readme_table
    load = {"4b": {"safetensors_bytes": 8.05e9, "first": {"seconds": 4.0, "safetensors_bytes_per_s": 2.0125e9},
                   "second": {"seconds": 2.5, "safetensors_bytes_per_s": 3.22e9}},
            "8b": {"skipped": "estimated 80 s"}}
    assert readme_table.load_line({"runs": [], "load": load}) == (
        "\nLoad time, `LLM(path)` on a random checkpoint written to disk: 4B: 8.1 GB of safetensors in 4.0 s "
        "from disk (2.0 GB/s), 2.5 s from the page cache.\n")
    assert readme_table.load_line({"runs": []}) == ""
    assert readme_table.engine_rows({"runs": [], "load": load}).endswith("from the page cache.\n")


def test_a_full_run_decodes_after_4096_tokens_too():
    assert bench.parse_args([]).long is True
    assert bench.parse_args(["--quick"]).long is False
    assert bench.parse_args(["--quick", "--long"]).long is True
    assert bench.parse_args(["--no-long"]).long is False
