"""`--compare OLD.json NEW.json`: two runs side by side (times, ratios, targets)."""
import fakes
from fakes import document, impl, record
from tilesafe.bench import cli, report
from tilesafe.bench.compare import compare


def _newer():
    """The fake run again, with tilesafe's GEMM 4096 10% slower and one workload more."""
    rs = fakes.results()
    rs[1]["impls"]["tilesafe"] = impl("tilesafe", 220.0)
    rs.append(record("add", "add f32 512MiB", tilesafe=impl("tilesafe", 410.0), **{"torch.add": impl("torch", 400.0)}))
    return document(rs)


def _row(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(name + " "))


def test_each_shared_workload_shows_its_time_change_and_ratios_old_to_new():
    text = compare(document(), _newer())
    row = _row(text, "gemm bf16 4096")
    assert "200.0 -> 220.0" in row and "+10.0%" in row
    assert "0.950 -> 0.864" in row                                  # vs cuBLAS: 190/200, then 190/220
    assert "1.000 -> 0.909" in row                                  # vs the twin (200 us both times)
    assert "+0.0%" in _row(text, "add bf16 512MiB")
    assert "only in the new run: add f32 512MiB" in text
    assert "flash bf16 causal s=4096" in text                       # a missing twin ratio shows as -
    assert "- -> -" in _row(text, "flash bf16 causal s=4096")


def test_targets_show_their_value_old_to_new_and_the_new_verdict():
    old, new = document(), _newer()
    text = compare(old, new)
    geo_old, geo_new = (next(t for t in d["targets"] if t["id"] == "gemm-geomean")["value"] for d in (old, new))
    row = _row(text, "GEMM geomean >= 100% of cuBLAS")
    assert f"{geo_old:.3f} -> {geo_new:.3f}" in row and geo_new < geo_old
    assert row.endswith("miss")


def test_kernel_families_narrow_the_workloads():
    text = compare(document(), _newer(), ["gemm"])
    assert "gemm bf16 8192" in text and "add bf16 512MiB" not in text and "only in the new run" not in text


def test_the_cli_compares_two_files_and_refuses_an_unreadable_one(tmp_path, capsys):
    old, new = report.write(document(), tmp_path, "old.json"), report.write(_newer(), tmp_path, "new.json")
    assert cli.main(["--compare", str(old), str(new), "gemv"]) == 0
    out = capsys.readouterr().out
    assert "abc123" in out and "gemv bf16 4B o" in out and "gemm bf16 4096" not in out
    assert cli.main(["--compare", str(old), str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
