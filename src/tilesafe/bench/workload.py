"""What one benchmark is: a workload (shapes, bytes and FLOPs, a way to make a set of
input buffers, an fp32 oracle) and the implementations timed on it side by side.

Roles: `tilesafe` (the library call), `torch` (PyTorch's best: cuBLAS, SDPA backends,
eager ops), `twin` (raw Triton with the tilesafe launch's tiling, built from what that
launch used, see `observe.py`) and `baseline` (a copy or a read of the same bytes, the
bandwidth ceiling measured in the same run). Every implementation is a `call(buffers)`
that launches once and returns its result; tilesafe and twin calls write `buffers["out"]`
(or another preallocated output), so they can be captured in a CUDA graph.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

TILESAFE, TORCH, TWIN, BASELINE = "tilesafe", "torch", "twin", "baseline"
ROLES = (TILESAFE, TORCH, TWIN, BASELINE)
BANDWIDTH, FLOPS = "bandwidth", "flops"

# Relative L2 error allowed against the fp32 oracle, by the dtype the kernel computes in.
TOLERANCE = {"f32": 1e-4, "f16": 1e-2, "bf16": 2e-2}
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

Buffers = dict                     # name -> torch.Tensor (one rotation set)


@dataclass(frozen=True, slots=True)
class Impl:
    name: str                              # "tilesafe", "torch.add", "sdpa-cudnn", "twin", "copy", ...
    role: str
    call: Callable[[Buffers], object]      # one launch on one buffer set; returns the result
    capture: str = "torch"                 # how a graph captures it: "tilesafe" (ts.graph) or "torch"
    make: Callable[[int], Buffers] | None = None       # own buffers (baselines); None: the workload's
    check: Callable[[Buffers, object], float] | None = None   # own check (baselines): relative error
    bytes: int | None = None               # bytes it moves when not the workload's (a read of the weight)


@dataclass(slots=True)
class Workload:
    family: str                            # "add", "gemm", "gemv", "softmax", ... (the CLI's KERNEL names)
    name: str                              # "add bf16 512MiB": unique, human-readable
    params: dict                           # shapes and options, for the JSON
    dtype: str                             # "bf16", "f32", ...
    metric: str                            # BANDWIDTH (TB/s) or FLOPS (TFLOP/s)
    bytes: int                             # bytes a kernel must move at least
    flops: float                           # 0 for bandwidth kernels
    make: Callable[[int], Buffers]         # make(seed) -> one set of random buffers on the device
    reference: Callable[[Buffers], torch.Tensor]     # the fp32 oracle of the result on a set
    impls: list[Impl]
    observe: tuple = ()                    # library kernels whose launches the twin mirrors
    twin: Callable[[dict], Impl] | None = None       # builds the twin from the observed launches
    output: str = "out"                    # the buffer that tilesafe/twin results are written to
    tolerance: float | None = None         # None: TOLERANCE[dtype]
    notes: str = ""

    def tol(self) -> float:
        return self.tolerance if self.tolerance is not None else TOLERANCE[self.dtype]


@dataclass(frozen=True, slots=True)
class Setup:
    """Where workloads are made: the device, and the sizes (full, quick, or tiny for --dry-run)."""
    device: str = "cuda"
    size: str = "quick"                    # "full" | "quick" | "tiny"
    sms: int = 132                         # persistent grids of the twins

    @property
    def tiny(self) -> bool:
        return self.size == "tiny"


def randn(shape, dtype: str, seed: int, device: str, scale: float = 1.0) -> torch.Tensor:
    """Seeded normal values (never zeros or ones), made on the device."""
    g = torch.Generator(device=device).manual_seed(seed)
    t = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
    if scale != 1.0:
        t.mul_(scale)
    return t.to(DTYPES[dtype])


def empty(shape, dtype: str, device: str) -> torch.Tensor:
    return torch.empty(shape, dtype=DTYPES[dtype], device=device)


def rel_error(got, want: torch.Tensor) -> float:
    """||got - want|| / ||want|| in fp32 (inf when got has a NaN or the wrong shape)."""
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
        return float("inf")
    g, w = got.float(), want.float()
    if not bool(torch.isfinite(g).all()):
        return float("inf")
    return float(torch.linalg.vector_norm(g - w) / torch.linalg.vector_norm(w).clamp_min(1e-30))


def element_bytes(dtype: str) -> int:
    return torch.empty((), dtype=DTYPES[dtype]).element_size()
