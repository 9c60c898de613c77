"""The runner on tiny CPU workloads with a fake clock: check before timing, the twin built
from the observed tilesafe launch, wrong and failing implementations, the time budget."""
import pytest

import tilesafe as ts
from fakes import FakeTimer
from tilesafe.bench import families, report, targets
from tilesafe.bench.progress import Progress
from tilesafe.bench.runner import Options, run_all, run_workload, steps
from tilesafe.bench.timing import Policy
from tilesafe.bench.workload import TORCH, Impl, Setup

TINY = Setup(device="cpu", size="tiny", sms=3)
POLICY = Policy(min_working_set=1, l2_bytes=1, probe=2, min_samples=3, max_samples=3)   # 1 set, few launches


def quiet(total=0):
    return Progress(total, enabled=False)


def tiny(family):
    return families.FAMILIES[family](TINY)


@pytest.fixture(autouse=True)
def _reference():
    with ts.backend("reference"):
        yield


def test_gemm_workloads_are_checked_then_timed_and_the_twin_mirrors_the_launch():
    w = tiny("gemm")[1]                               # M=96: the persistent GEMM on CPU tiles
    rec = run_workload(w, FakeTimer(us=100.0), POLICY, quiet())
    assert rec["status"] == "ok" and list(rec["impls"]) == ["tilesafe", "twin", "F.linear"]
    for r in rec["impls"].values():
        assert r["status"] == "ok" and r["rel_error"] < 1e-5 and r["median_us"] == 100.0 and r["tflops"] > 0
    tiling = rec["tiling"]["mm_persistent_kernel"]
    assert tiling["consts"]["BM"] == 32 and tiling["consts"]["GROUP"] == 8 and tiling["grid"] is None
    assert rec["rotation"]["sets"] == 1


def test_bandwidth_workloads_time_their_baseline_on_its_own_buffers():
    rec = run_workload(tiny("add")[0], FakeTimer(us=10.0), POLICY, quiet())
    copy = rec["impls"]["copy"]
    assert copy["role"] == "baseline" and copy["status"] == "ok" and copy["bytes"] == rec["bytes"]
    assert "tflops" not in copy and copy["tbps"] == pytest.approx(rec["bytes"] / 10e-6 / 1e12)


def test_a_wrong_result_is_recorded_and_never_timed():
    w = tiny("add")[0]
    w.impls.append(Impl("broken", TORCH, lambda b: b["x"] * 2))
    timer = FakeTimer()
    rec = run_workload(w, timer, POLICY, quiet())
    assert rec["impls"]["broken"]["status"] == "wrong" and "median_us" not in rec["impls"]["broken"]
    assert rec["impls"]["broken"]["rel_error"] > 0.1


def test_an_output_left_unwritten_is_caught_by_the_poison():
    w = tiny("add")[0]

    def half(b):
        b["out"][: b["out"].numel() // 2] = b["x"][: b["out"].numel() // 2] + b["y"][: b["out"].numel() // 2]
        return b["out"]
    w.impls.append(Impl("half", TORCH, half))
    rec = run_workload(w, None, POLICY, quiet())
    assert rec["impls"]["half"]["status"] == "wrong" and rec["impls"]["half"]["rel_error"] == float("inf")


def test_an_implementation_that_raises_is_recorded_and_the_rest_still_run():
    w = tiny("softmax")[0]

    def refuse(b):
        raise RuntimeError("No available kernel. Aborting execution.")
    w.impls.insert(1, Impl("sdpa-cudnn", TORCH, refuse))
    rec = run_workload(w, FakeTimer(), POLICY, quiet())
    assert rec["impls"]["sdpa-cudnn"] == {"role": "torch", "status": "error",
                                          "error": "RuntimeError: No available kernel. Aborting execution."}
    assert rec["impls"]["torch.softmax"]["status"] == "ok" and rec["impls"]["tilesafe"]["status"] == "ok"


def test_a_workload_whose_buffers_fail_is_an_error_record():
    w = tiny("add")[0]
    w.make = lambda seed: (_ for _ in ()).throw(MemoryError("out of memory"))
    rec = run_workload(w, FakeTimer(), POLICY, quiet())
    assert rec["status"] == "error" and "MemoryError" in rec["error"]


def test_the_budget_stops_new_workloads_and_results_are_saved_after_each():
    ws = tiny("gemv") + tiny("softmax")
    ticks = iter([0.0, 1.0] + [100.0 * k for k in range(1, 10)])
    saved = []
    res = run_all(ws, FakeTimer(), Options(POLICY, budget_s=50.0, on_result=lambda r: saved.append(len(r))),
                  quiet(sum(steps(w) for w in ws)), clock=lambda: next(ticks))
    assert [r["status"] for r in res] == ["ok", "skipped"] + ["skipped"] * (len(ws) - 2)
    assert "time budget" in res[1]["error"] and saved == list(range(1, len(ws) + 1))


def test_a_run_of_every_family_gives_ratios_for_every_target():
    ws = [w for fam in families.FAMILIES for w in tiny(fam)]
    progress = Progress(sum(steps(w) for w in ws), enabled=False)
    res = run_all(ws, FakeTimer(us=50.0), Options(POLICY), progress)
    assert progress.done == progress.total
    doc = report.document(res, {"gpu_slug": "cpu"}, {}, {}, {"dry_run": False}, 1.0)
    assert {t["id"] for t in doc["targets"]} == {t.id for t in targets.TARGETS}
    for t in doc["targets"]:
        assert t["missing"] == [] and t["value"] == pytest.approx(1.0, rel=0.05), t   # gemv: x and y bytes too
    assert all(r["status"] == "ok" for rec in res for r in rec["impls"].values())


def test_a_twin_that_cannot_be_built_is_an_error_of_the_twin_alone():
    w = tiny("add")[0]
    w.twin = lambda seen: seen["no_such_kernel"]
    rec = run_workload(w, FakeTimer(), POLICY, quiet())
    assert rec["impls"]["twin"]["status"] == "error" and "no_such_kernel" in rec["impls"]["twin"]["error"]
    assert rec["impls"]["tilesafe"]["status"] == "ok" and rec["impls"]["copy"]["status"] == "ok"
