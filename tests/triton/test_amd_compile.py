"""Compile targets (issue 21): `kernel.compile(*specs, target=...)` for AMD (gfx942: MI300X,
gfx950: MI355X) and NVIDIA (sm_90, sm_100) on any machine. A target decides the warp
width and which schedule hints apply; the safety checks are decided on the IR, so the
refusals and the bounds report are the same for every target. No GPU is needed."""
import os
import re

import pytest

import tilesafe as ts
from triton_helpers import gemm

pytestmark = [pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                 reason="TRITON_INTERPRET=1 makes Triton's own library interpreted, so it cannot compile"),
              pytest.mark.interpreter_only]   # compile-only: one run is enough, also on a GPU machine

HERE = __file__
AMD = ["gfx942", "gfx950"]
ALL = ["sm_90", "sm_100", *AMD]
MFMA = {"gfx942": "v_mfma_f32_32x32x8_bf16", "gfx950": "v_mfma_f32_32x32x16_bf16"}   # CDNA3 / CDNA4 bf16
# NVIDIA-only code in any form: Triton's NVIDIA dialect, NVVM intrinsics, PTX instructions
NVIDIA_ONLY = re.compile(r"ttng\.|nvvm|nvgpu|wgmma|cp\.async|griddepcontrol|mma\.sync|tensordesc")


def _gemm_specs(m=256, n=256, k=512, dtype=ts.bf16):
    return (ts.spec((m, n), dtype, tile=(128, 128)), ts.spec((m, k), dtype), ts.spec((k, n), dtype))


def _marker_line(marker: str) -> int:
    with open(HERE) as f:
        hits = [i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, hits
    return hits[0]


def _assert_located(e, marker: str, fragment: str) -> None:
    text = str(e)
    assert fragment in e.message, e.message
    assert e.loc is not None and e.loc.file == HERE and e.loc.line == _marker_line(marker), text
    assert text.startswith("error: ") and text.count("error:") == 1 and "= help: " in text, text
    for internal in ("Traceback", "tilesafe/runtime", "tilesafe/backends", "tilesafe/lang", "GPUTarget"):
        assert internal not in text, text


# --- what a target compiles to ------------------------------------------------------------------
@pytest.mark.parametrize("target", AMD)
def test_a_bf16_gemm_compiles_for_amd_to_matrix_core_code(target):
    k = gemm.compile(*_gemm_specs(), BK=64, target=target)
    asm = k.asm["amdgcn"]
    assert MFMA[target] in asm                               # the matrix cores
    assert f".amdgcn_target \"amdgcn-amd-amdhsa--{target}" in asm
    assert k.asm["hsaco"][:4] == b"\x7fELF"                 # a code object the ROCm loader takes
    assert not NVIDIA_ONLY.search(k.asm["ttgir"] + k.asm["llir"] + asm)
    assert k.metadata.warp_size == 64 and k.metadata.num_warps == 4   # Triton's default: 4 wavefronts


def test_the_same_gemm_compiles_for_hopper_to_wgmma_and_tma():
    k = gemm.compile(*_gemm_specs(), BK=64, target="sm_90")
    assert "wgmma.mma_async" in k.asm["ptx"] and "cp.async.bulk.tensor" in k.asm["ptx"]
    assert k.metadata.warp_size == 32


def test_fp32_and_ragged_gemms_compile_for_amd():
    """IEEE fp32 products use CDNA3's fp32 MFMA; ragged extents keep their masks."""
    k = gemm.compile(*_gemm_specs(200, 120, 72, ts.f32), BK=32, target="gfx942")
    assert "v_mfma_f32" in k.asm["amdgcn"]
    report = gemm.checks(*_gemm_specs(200, 120, 72, ts.f32), BK=32, target="gfx942")
    assert report.kernel == 3                                # both loads and the store stay masked


def test_waves_per_eu_reaches_the_amd_compiler():
    k = gemm.compile(*_gemm_specs(), BK=64, target="gfx942", schedule=ts.schedule(num_warps=8, waves_per_eu=2))
    assert (k.metadata.num_warps, k.metadata.waves_per_eu) == (8, 2)


@ts.kernel
def split_part(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 2.0)


@pytest.mark.parametrize("target", ["gfx942", "sm_90"])
def test_pdl_is_an_optional_hint_dropped_on_amd_with_a_note(target):
    s = ts.schedule(pdl=True)
    specs = (ts.spec((4096,), ts.f32, tile=(1024,)), ts.spec((4096,), ts.f32))
    k = split_part.compile(*specs, target=target, schedule=s)
    notes = split_part.checks(*specs, target=target, schedule=s).notes
    if target == "gfx942":
        assert "gdc" not in k.asm["ttir"] and not NVIDIA_ONLY.search(k.asm["amdgcn"])
        assert notes == ("pdl=True ignored on gfx942: no programmatic dependent launch, the launch is plain "
                         "(it waits for the kernel before it, as any launch does)",)
        assert "note: pdl=True ignored on gfx942" in str(split_part.checks(*specs, target=target, schedule=s))
    else:
        assert "griddepcontrol.wait" in k.asm["ptx"] and notes == ()


def test_a_matrix_kernel_notes_that_amd_reads_through_pointers():
    assert gemm.checks(*_gemm_specs(), BK=64, target="gfx950").notes == (
        "tma: gfx950 has no TMA; accesses use pointers",)
    assert gemm.checks(*_gemm_specs(), BK=64, target="sm_90").notes == ()


# --- bad input: an unknown target, a hint the target has no hardware for ------------------------
def test_an_unknown_target_is_a_launch_error_naming_it():
    with pytest.raises(ts.LaunchError) as ei:
        gemm.compile(*_gemm_specs(), BK=64, target="gfx1234")  # E:unknown-target
    _assert_located(ei.value, "E:unknown-target", "unknown compile target 'gfx1234'")
    assert "use one of sm_80, sm_90, sm_100, gfx942, gfx950" in str(ei.value)


def test_a_target_with_another_backend_is_refused():
    with pytest.raises(ts.LaunchError) as ei:
        gemm.compile(*_gemm_specs(), BK=64, target="gfx942", backend="reference")  # E:target-backend
    _assert_located(ei.value, "E:target-backend", "target='gfx942' compiles through Triton, not the reference backend")


def test_a_pipeline_deeper_than_the_lds_is_refused_for_that_target():
    deep = ts.schedule(num_stages=6)
    with pytest.raises(ts.LaunchError) as ei:
        gemm.compile(*_gemm_specs(), BK=64, target="gfx942", schedule=deep)  # E:lds
    _assert_located(ei.value, "E:lds", "of shared memory per block on gfx942, which has 64 KiB")
    assert "num_stages" in ei.value.help
    gemm.compile(*_gemm_specs(), BK=64, target="gfx950", schedule=deep)   # 160 KiB of LDS: it fits


@pytest.mark.parametrize("target", AMD)
def test_tma_forced_on_amd_is_refused(target):
    with pytest.raises(ts.LaunchError) as ei:
        gemm.compile(*_gemm_specs(), BK=64, target=target, schedule=ts.schedule(tma=True))  # E:tma-on-amd
    _assert_located(ei.value, "E:tma-on-amd", f"schedule hint tma=True does not apply to target {target}: "
                                              f"it needs TMA tensor descriptors, which {target} does not have")
    with pytest.raises(ts.LaunchError, match=f"tma=True does not apply to target {target}"):
        gemm.checks(*_gemm_specs(), BK=64, target=target, schedule=ts.schedule(tma=True))


def test_a_register_cap_on_amd_and_waves_per_eu_on_nvidia_are_refused():
    with pytest.raises(ts.LaunchError) as ei:
        gemm.compile(*_gemm_specs(), BK=64, target="gfx950", schedule=ts.schedule(maxnreg=128))  # E:maxnreg
    _assert_located(ei.value, "E:maxnreg", "schedule hint maxnreg=128 does not apply to target gfx950")
    with pytest.raises(ts.LaunchError) as ei:
        gemm.compile(*_gemm_specs(), BK=64, target="sm_90", schedule=ts.schedule(waves_per_eu=2))  # E:waves
    _assert_located(ei.value, "E:waves", "schedule hint waves_per_eu=2 does not apply to target sm_90")


@pytest.mark.parametrize("bad", [-1, 9, True, 1.5])
def test_waves_per_eu_must_be_a_small_int(bad):
    with pytest.raises(ts.LaunchError, match=re.escape(f"waves_per_eu={bad!r} must be an int from 0")):
        ts.schedule(waves_per_eu=bad)


# --- the safety checks do not depend on the target ----------------------------------------------
@ts.kernel(deny_kernel_checks=True)
def strict_scale(z: ts.Mut[ts.f32, ("BM", "BN")], x: ts.Ref[ts.f32, ("M", "N")], BM: ts.Const[int],
                 BN: ts.Const[int], M: int, N: int):
    t = ts.load_tile_like(x, z)  # E:deny-load
    z.store(t * 2.0)


@pytest.mark.parametrize("target", ALL)
def test_a_denied_mask_is_refused_the_same_for_every_target(target):
    specs = (ts.spec((30, 64), ts.f32, tile=(16, 32)), ts.spec((30, 64), ts.f32))
    with pytest.raises(ts.KernelError) as ei:
        strict_scale.compile(*specs, target=target)
    _assert_located(ei.value, "E:deny-load",
                    "`strict_scale` denies in-kernel bounds checks, but this load of `x` needs a mask on axis 0")
    strict_scale.compile(ts.spec((32, 64), ts.f32, tile=(16, 32)), ts.spec((32, 64), ts.f32), target=target)


@ts.kernel(preconditions=["dim(c, 1) == dim(b, 1)"])
def product(c: ts.Mut[ts.f16, ("BM", "BN")], a: ts.Ref[ts.f16, ("M", "K")], b: ts.Ref[ts.f16, ("KB", "N")],
            BM: ts.Const[int], BN: ts.Const[int], BK: ts.Const[int], M: int, N: int, K: int, KB: int):
    ta = ts.load(a, (ts.block_id(0), 0), shape=(BM, BK))          # (BM, BK)
    tb = ts.load(b, (0, ts.block_id(1)), shape=(BM, BN))          # (BM, BN): BM rows where BK are needed
    acc = ts.mma(ta, tb, ts.zeros((BM, BN), ts.f32))  # E:inner
    c.store(acc.astype(ts.f16))


@pytest.mark.parametrize("target", ALL)
def test_shape_and_argument_refusals_are_the_same_for_every_target(target):
    a, b = ts.spec((64, 32), ts.f16), ts.spec((32, 64), ts.f16)
    with pytest.raises(ts.KernelError) as ei:   # S3: inner dims 32 and 64 differ, found at specialization
        product.compile(ts.spec((64, 64), ts.f16, tile=(64, 64)), a, b, BK=32, target=target)
    _assert_located(ei.value, "E:inner", "inner")
    with pytest.raises(ts.LaunchError) as ei:   # S6: a precondition
        product.compile(ts.spec((64, 48), ts.f16, tile=(64, 64)), a, b, BK=32, target=target)  # E:pre
    _assert_located(ei.value, "E:pre", "dim(c, 1) == dim(b, 1)")
    with pytest.raises(ts.LaunchError) as ei:   # S6: a dtype
        product.compile(ts.spec((64, 64), ts.f32, tile=(64, 64)), a, b, BK=32, target=target)  # E:dtype
    _assert_located(ei.value, "E:dtype", "f32")


SHAPES = {"aligned": (256, 256, 512), "ragged": (250, 200, 72)}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_bounds_report_is_the_same_for_both_vendors(shape):
    m, n, k = SHAPES[shape]
    specs = _gemm_specs(m, n, k)
    want = gemm.checks(*specs, BK=64)                                   # no target: the IR's own report
    for target in ALL:
        got = gemm.checks(*specs, BK=64, target=target)
        assert (got.static, got.launch, got.kernel, got.accesses) == (want.static, want.launch, want.kernel,
                                                                      want.accesses), target
    assert want.kernel == (0 if shape == "aligned" else 3)


# --- tilesafe check --target --------------------------------------------------------------------
CHECKED = '''
import numpy as np
import tilesafe as ts


@ts.kernel
def double(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 2.0)


@ts.kernel
def unused(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z))


x = ts.tensor(np.arange(1000, dtype=np.float32))
z = ts.empty(1000)
double(z.partition((256,)), x)
'''


def _check(tmp_path, capsys, text: str, *args: str):
    from tilesafe import cli
    path = tmp_path / "kernels.py"
    path.write_text(text.lstrip())
    rc = cli.main(["check", *args, str(path)])
    out = capsys.readouterr()
    return rc, out.out, out.err, str(path)


@pytest.mark.parametrize("target", AMD)
def test_check_target_compiles_each_launch_and_lists_the_kernels_it_could_not(tmp_path, capsys, target):
    rc, out, _, path = _check(tmp_path, capsys, CHECKED, "--target", target)
    assert rc == 0, out
    assert out.endswith(f"ok: 2 kernels checked, 1 by signature only; 1 launch compiled for {target}\n"), out
    assert f"not compiled for {target} (no launch made when the file is imported gives their shapes" in out
    assert f"  unused at {path}:11\n" in out and "double at" not in out


def test_check_target_reports_a_hint_the_target_lacks_at_the_launch(tmp_path, capsys):
    text = CHECKED.replace("double(z.partition((256,)), x)", "double(z.partition((256,)), x, schedule=ts.schedule(maxnreg=64))")
    rc, out, _, path = _check(tmp_path, capsys, text, "--target", "gfx942")
    assert rc == 1, out
    assert "error: schedule hint maxnreg=64 does not apply to target gfx942" in out
    assert f"--> {path}:17:1" in out, out
    assert out.rstrip().endswith("; 0 launches compiled for gfx942") and "1 error in 2 kernels checked" in out
    rc, out, _, _ = _check(tmp_path, capsys, text, "--target", "sm_90")   # NVIDIA has a register cap
    assert rc == 0 and "1 launch compiled for sm_90" in out, out


def test_check_target_refuses_a_denied_mask_as_a_launch_would(tmp_path, capsys):
    text = CHECKED.replace("@ts.kernel\ndef double", "@ts.kernel(deny_kernel_checks=True)\ndef double")
    rc, out, _, path = _check(tmp_path, capsys, text, "--target", "gfx950")
    assert rc == 1 and "`double` denies in-kernel bounds checks" in out and f"--> {path}:7:13" in out, out


def test_check_with_an_unknown_target_fails_before_reading_the_file(tmp_path, capsys):
    rc, out, err, _ = _check(tmp_path, capsys, CHECKED, "--target", "gfx9")
    assert rc == 2 and out == ""
    assert err == "error: unknown compile target 'gfx9'\n   = help: use one of sm_80, sm_90, sm_100, gfx942, gfx950\n"


# --- the GPU at hand ----------------------------------------------------------------------------
def test_waves_per_eu_is_a_config_hint_for_autotuning():
    c = ts.Config(BM=128, num_warps=4, waves_per_eu=2)
    assert c.schedule == ts.schedule(num_warps=4, waves_per_eu=2) and dict(c.consts) == {"BM": 128}


class _Props:
    major, minor, gcnArchName, multi_processor_count = 9, 4, "gfx942:sramecc+:xnack-", 304


def test_a_rocm_gpu_is_known_by_its_arch_and_has_no_tma(monkeypatch):
    """A ROCm torch reports an MI300X as a CUDA device of capability 9.4: it is gfx942, and
    not a GPU with TMA (a capability check alone took it for Hopper)."""
    import torch
    from tilesafe.backends.triton import targets, tma
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *_: _Props())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (9, 4))
    monkeypatch.setattr(torch.version, "hip", "6.4.0", raising=False)
    tma.available.cache_clear()
    try:
        assert targets.device_target() is targets.TARGETS["gfx942"]
        assert not tma.available()
        monkeypatch.setattr(torch.version, "hip", None)   # a CUDA torch on a Hopper GPU
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (9, 0))
        _Props.minor = 0
        tma.available.cache_clear()
        assert targets.device_target() is targets.TARGETS["sm_90"] and tma.available()
    finally:
        _Props.minor = 4
        tma.available.cache_clear()


@pytest.mark.gpu
def test_a_launch_with_an_amd_hint_is_refused_on_an_nvidia_gpu():
    import numpy as np
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = ts.tensor(np.arange(4096, dtype=np.float32), device="cuda")
    z = ts.empty(4096, device="cuda")
    p = z.partition((1024,))
    with ts.backend("triton"), pytest.raises(ts.LaunchError) as ei:
        split_part(p, x, schedule=ts.schedule(waves_per_eu=2))  # E:amd-hint-on-gpu
    _assert_located(ei.value, "E:amd-hint-on-gpu", "schedule hint waves_per_eu=2 does not apply to target sm_")
    assert p.unpartition() is z
