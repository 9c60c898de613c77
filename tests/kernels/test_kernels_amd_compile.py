"""Every library kernel and every example compiles for AMD GPUs — gfx942 (MI300X) and gfx950
(MI355X) — beside Hopper (sm_90), on any machine (issue 21). The GEMM, attention and bmm
kernels use the matrix cores (`v_mfma`), no AMD kernel holds NVIDIA-only code, and each fits
its target's shared memory (LDS: 64 KiB on gfx942).

Library kernels run as the public functions launch them on a GPU, with the configs of the
target (`targets.compiling_for`): each launch is replaced by `compile_ahead` on `ts.spec`s
of the same views (as in test_kernels_hopper_compile.py, whose sm_90 checks these mirror).
Examples run once (on this machine's backend) with their launches recorded; each recorded
launch is then compiled as shipped (ragged sizes) and with its extents rounded up to
multiples of 64 (aligned: the maskless specializations). Compiles are cached per
(kernel, specs, schedule, target) in this module, so each compiles once.
"""
import functools
import importlib
import os
import re
import sys

import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from tilesafe.backends.triton import targets
from tilesafe.kernels import configs
from tilesafe.runtime.compile_ahead import compile_ahead
from tilesafe.runtime.kernel import Kernel

from compile_launches import compile_launches

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                                reason="TRITON_INTERPRET=1 makes Triton's own library interpreted, so it cannot compile")

AMD = ["gfx942", "gfx950"]
MODULES = ["elementwise", "reduce", "norms", "matmul", "attention", "rope"]
BF = torch.bfloat16
NVIDIA_ONLY = re.compile(r"ttng\.|nvvm|nvgpu|wgmma|cp\.async|griddepcontrol|mma\.sync|tensordesc")
_COMPILED: dict = {}   # (kernel name, specs, schedule, target) -> Triton's compiled kernel


def _compile(kernel, target: str, schedule=None, grid=None, **specs):
    key = (kernel.name, repr(sorted(specs.items(), key=lambda kv: kv[0])), schedule, target, grid)
    if key not in _COMPILED:
        _COMPILED[key] = compile_ahead(kernel, **specs, target=target, descriptors=None, schedule=schedule,
                                       grid=grid)
    return _COMPILED[key]


def _check_amd(name: str, k, target: str) -> None:
    t = targets.resolve(target)
    assert not NVIDIA_ONLY.search(k.asm["ttgir"] + k.asm["llir"] + k.asm["amdgcn"]), name
    assert f"amdgcn-amd-amdhsa--{target}" in k.asm["amdgcn"], name
    assert k.metadata.warp_size == 64, name
    assert k.metadata.shared <= t.shared_bytes, (name, k.metadata.shared)


# --- the kernel library -------------------------------------------------------------------------
@pytest.fixture
def compiled(monkeypatch, request):
    """Run public functions with the target's GPU configs; collect (kernel name, compiled)."""
    target = request.node.callspec.params["target"]
    out = compile_launches(monkeypatch, MODULES, lambda kernel, specs, schedule: _compile(
        kernel, target, schedule, **specs))
    with targets.compiling_for(target):
        yield out


def e(*shape, dtype=BF):
    return torch.empty(shape, dtype=dtype)


# Every library kernel at least once; realistic LLM shapes (aligned) and ragged ones.
CALLS = {
    "add_bias_row": lambda: tk.add(e(4096, 2560), e(2560)),
    "silu_mul_ragged": lambda: tk.silu_mul(e(1000, 9720), e(1000, 9720)),
    "residual_add_in_place": lambda: (lambda h: tk.residual_add(h, e(4096, 2560), out=h))(e(4096, 2560)),
    "softmax_vocab": lambda: tk.softmax(e(4, 151936, dtype=torch.float32)),
    "softmax_rows_ragged": lambda: tk.softmax(e(32, 1000, 1000)),
    "sum": lambda: tk.sum(e(4096, 2560)),
    "rms_norm_residual": lambda: tk.rms_norm(e(4096, 2560), e(2560), residual=e(4096, 2560)),
    "rms_norm_residual_in_place": lambda: (lambda r: tk.rms_norm(e(1, 2560), e(2560), residual=r, residual_out=r))(
        e(1, 2560)),
    "layer_norm_ragged": lambda: tk.layer_norm(e(1000, 5000), e(5000), e(5000)),
    "matmul": lambda: tk.matmul(e(4096, 4096), e(4096, 4096)),
    "matmul_ragged": lambda: tk.matmul(e(1000, 1000), e(1000, 1000)),
    "matmul_tiled_bias_silu": lambda: tk.matmul(e(512, 1024), e(1024, 512), bias=e(512), activation="silu"),
    "linear_gemv": lambda: tk.linear(e(1, 2560), e(9728, 2560)),
    "linear_m16": lambda: tk.linear(e(16, 2560), e(9728, 2560)),
    "linear_gemv_split_k": lambda: tk.linear(e(1, 9728), e(2560, 9728)),     # few outputs: K split
    "linear_m128_split_k": lambda: tk.linear(e(128, 4096), e(2560, 4096), config={"split_k": 4}),
    "bmm": lambda: tk.bmm(e(8, 1024, 512), e(8, 512, 1024)),
    "bmm_ragged": lambda: tk.bmm(e(3, 300, 200), e(3, 200, 100)),
    "flash_causal_gqa": lambda: tk.flash_attention(e(1, 32, 2048, 128), e(1, 8, 2048, 128), e(1, 8, 2048, 128), True),
    "flash_ragged": lambda: tk.flash_attention(e(2, 8, 1000, 64), e(2, 8, 1000, 64), e(2, 8, 1000, 64), False),
    "decode_gqa": lambda: tk.decode_attention(e(32, 128), e(8, 4096, 128), e(8, 4096, 128), 1000,
                                              config={"one_kernel": False}),
    "decode_gqa_one_kernel": lambda: tk.decode_attention(e(32, 128), e(8, 4096, 128), e(8, 4096, 128), 1000,
                                                         config={"one_kernel": True}),
    "rope": lambda: tk.rope(e(2048, 32, 128), torch.zeros(2048, dtype=torch.int64)),
    "embedding": lambda: tk.embedding(torch.zeros(2048, dtype=torch.int64), e(8192, 2560)),
    "argmax_vocab": lambda: tk.argmax(e(1, 151936)),
}
MATRIX_CORES = {"matmul", "matmul_ragged", "matmul_tiled_bias_silu", "linear_m16", "linear_m128_split_k", "bmm",
                "bmm_ragged", "flash_causal_gqa", "flash_ragged", "decode_gqa", "decode_gqa_one_kernel"}
NO_PRODUCT = ("split_sum_kernel", "decode_combine_kernel")   # the small kernels finishing a split computation


@pytest.mark.parametrize("target", AMD)
@pytest.mark.parametrize("call", list(CALLS))
def test_library_kernel_compiles_for_amd(compiled, call, target):
    CALLS[call]()
    assert compiled, "no kernel was launched"
    for name, k in compiled:
        _check_amd(name, k, target)
        if call in MATRIX_CORES and name not in NO_PRODUCT:
            assert "v_mfma_f32" in k.asm["amdgcn"], name
        if name.endswith("_last_kernel"):   # S16: one acquire-release ticket per block, an atomic on AMD too
            assert "global_atomic_add" in k.asm["amdgcn"], name


@pytest.mark.parametrize("target", AMD)
def test_amd_configs_count_wavefronts_and_keep_threads_per_block(compiled, target):
    """matmul's H200 config is 8 warps of 32: on AMD 4 wavefronts of 64, two stages (64 KiB
    of LDS on gfx942), two waves per SIMD, and one block per CU at least (304 or 256)."""
    tk.matmul(e(4096, 4096), e(4096, 4096))
    (name, k), = compiled
    t = targets.resolve(target)
    assert k.metadata.num_warps * k.metadata.warp_size == configs.GPU_DEFAULTS["matmul"]["num_warps"] * 32
    assert (k.metadata.num_stages, k.metadata.waves_per_eu) == (2, 2)
    cfg = configs.lookup("matmul", "bf16/4096/4096/4096")
    assert cfg["min_blocks"] == t.units and "tma" not in cfg


@pytest.mark.parametrize("target", AMD)
def test_a_tma_config_is_refused_on_amd(compiled, target):
    with pytest.raises(ts.LaunchError, match=f"tma=True does not apply to target {target}"):
        tk.bmm(e(8, 1024, 512), e(8, 512, 1024), config={"tma": True})


def test_a_call_plan_made_on_the_cpu_is_not_reused_for_a_target(monkeypatch):
    """Elementwise calls keep a plan (tile and config) per argument layout: a plan made on
    the reference backend must not give its CPU config to a compile for a GPU target."""
    x, b = torch.randn(64, 256).to(BF), torch.randn(256).to(BF)
    with ts.backend("reference"):
        tk.add(x, b)                                  # a plan for this layout: block 256
    cfgs = []
    monkeypatch.setattr(configs, "current_backend", lambda: "triton")
    monkeypatch.setattr(sys.modules["tilesafe.kernels.elementwise"], "launch",
                        lambda kernel, outputs, grid=None, cfg=None, pdl=False, **args: cfgs.append(cfg))
    for target in AMD:
        with targets.compiling_for(target):
            tk.add(x, b)
    assert cfgs == [configs.gpu_defaults("elementwise", targets.resolve(t)) for t in AMD]
    assert cfgs[0]["num_warps"] == 2                  # the H200's 4 warps of 32, as wavefronts of 64


def test_without_a_compile_target_the_h200_table_is_unchanged():
    assert targets.compile_target() is None
    for family in configs.GPU_DEFAULTS:
        assert configs.gpu_defaults(family, targets.resolve("sm_90")) == configs.GPU_DEFAULTS[family]


# --- the examples -------------------------------------------------------------------------------
EXAMPLES = ["hello_world", "vector_add", "saxpy_2d", "ragged_sizes", "masked_fill", "softmax", "rms_norm", "matmul",
            "mixed_precision_matmul", "batched_matmul", "persistent_matmul", "flash_attention", "unsafe_race"]
EXAMPLE_MATRIX_CORES = {"matmul", "mixed_precision_matmul", "batched_matmul", "persistent_matmul", "flash_attention"}
# The examples multiply IEEE fp32 tiles, which NVIDIA runs on its CUDA cores (tf32 is opt-in)
# and CDNA3/4 on the matrix cores (`v_mfma_f32_*_f32`); only the half-precision one uses
# the tensor cores on sm_90.
EXAMPLE_TENSOR_CORES_SM90 = {"mixed_precision_matmul"}


def test_every_example_is_compiled_here():
    from tilesafe.demo import EXAMPLES as FOLDER
    shipped = {p.stem for p in FOLDER.glob("*.py") if not p.stem.startswith("_")} - {"refused_kernels"}
    assert shipped == set(EXAMPLES)


def _as_spec(value, aligned: bool):
    """A recorded launch argument as a ts.spec (extents rounded up to 64 when aligned)."""
    from tilesafe.runtime.partition import Partition
    if isinstance(value, (Partition, ts.Tensor)):
        shape = tuple(-(-n // 64) * 64 if aligned and n >= 48 else n for n in value.shape)
        tile = value.tile if isinstance(value, Partition) else None
        strides = None if aligned or isinstance(value, Partition) else value.strides
        return ts.spec(shape, value.dtype, strides, tile=tile)
    return value


@functools.lru_cache(maxsize=None)
def example_launches(name: str) -> tuple:
    """(kernel, {"ragged": (specs, kwargs), "aligned": ...}, schedule, grid) of each launch
    the example's main() makes (its arguments read as specs before the launch runs)."""
    real = Kernel._launch_in_full   # every launch that is checked in full passes here
    recorded = []

    def record(self, args, kwargs, grid, unsafe, *rest):
        forms = {shapes: ([_as_spec(a, shapes == "aligned") for a in args],
                          {n: _as_spec(v, shapes == "aligned") for n, v in kwargs.items() if n != "schedule"})
                 for shapes in ("ragged", "aligned")}
        recorded.append((self, forms, kwargs.get("schedule"), grid))
        return real(self, args, kwargs, grid, unsafe, *rest)

    module = importlib.import_module(f"tilesafe.examples.{name}")
    Kernel._launch_in_full = record
    try:
        module.main()      # on this machine's backend (the reference interpreter without a GPU)
    finally:
        Kernel._launch_in_full = real
    return tuple(recorded)


@pytest.mark.parametrize("shapes", ["ragged", "aligned"])
@pytest.mark.parametrize("target", ["sm_90", *AMD])
@pytest.mark.parametrize("example", EXAMPLES)
def test_example_compiles(example, target, shapes, capsys):
    launches = example_launches(example)
    capsys.readouterr()                      # the example's own output
    assert launches, "the example launched nothing"
    for kernel, forms, schedule, grid in launches:
        specs, named = forms[shapes]
        k = compile_ahead(kernel, *specs, target=target, descriptors=None, grid=grid, schedule=schedule, **named)
        if target == "sm_90":
            assert k.metadata.shared <= targets.resolve("sm_90").shared_bytes
            if example in EXAMPLE_TENSOR_CORES_SM90:
                assert re.search(r"wgmma|mma\.sync", k.asm["ptx"]), kernel.name
            continue
        _check_amd(kernel.name, k, target)
        if example in EXAMPLE_MATRIX_CORES:
            assert "v_mfma_f32" in k.asm["amdgcn"], kernel.name
