"""`python -m tilesafe.bench` / `tilesafe bench`: the dry run on both CPU backends, the JSON
it writes, listing, and the errors for bad arguments or a missing GPU."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tilesafe.bench import cli, families, report
from tilesafe.bench.workload import Setup

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("backend", ["reference", "triton-interpreter"])
def test_dry_run_checks_every_workload_on_a_cpu_backend(backend, capsys, tmp_path):
    assert cli.main(["--dry-run", "--no-progress", "--backend", backend, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for family in families.FAMILIES:
        assert f"{family}: correctness" in out
    assert "WRONG" not in out and "ERROR" not in out
    doc = report.load(next(tmp_path.glob("bench-*-dry-run.json")))
    assert doc["settings"]["backend"] == backend and doc["settings"]["complete"] is True
    assert doc["targets"] == [] and all("median_us" not in i for r in doc["results"] for i in r["impls"].values())
    assert {r["family"] for r in doc["results"]} == set(families.FAMILIES)


def test_tilesafe_bench_subcommand_runs_the_dry_run():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, "-m", "tilesafe", "bench", "--dry-run", "--no-progress", "add", "gemv"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "add: correctness" in p.stdout and "gemv: correctness" in p.stdout and "flash" not in p.stdout


def test_unknown_kernel_is_refused(capsys):
    assert cli.main(["--dry-run", "gemmm"]) == 2
    assert "unknown kernel gemmm" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_timing_without_a_gpu_points_at_the_dry_run(capsys):
    assert cli.main(["--quick", "add"]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "--dry-run" in err


def test_list_names_the_quick_workloads(capsys):
    assert cli.main(["--list", "--quick", "flash"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and all(line.startswith("flash") for line in lines)


@pytest.mark.parametrize("size", ["quick", "full"])
def test_workload_names_are_unique_and_the_quick_set_stays_small(size):
    ws = [w for fam in families.FAMILIES.values() for w in fam(Setup(device="cpu", size=size))]
    assert len({w.name for w in ws}) == len(ws)
    if size == "quick":
        assert len(ws) <= 96        # sized for one device call of < 8 minutes; see docs/benchmarks.md
