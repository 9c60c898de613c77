"""The benchmark's kernel families, in the order they run (the GEMMs, most numerous, last):
name -> workloads(setup)."""
from .attention import decode_workloads, flash_workloads
from .elementwise import add_workloads, silu_mul_workloads
from .gemm import gemm_workloads, gemv_workloads
from .rows import rms_norm_workloads, rope_workloads, softmax_workloads

FAMILIES = {
    "add": add_workloads,
    "softmax": softmax_workloads,
    "rms_norm": rms_norm_workloads,
    "rope": rope_workloads,
    "silu_mul": silu_mul_workloads,
    "gemv": gemv_workloads,
    "decode": decode_workloads,
    "flash": flash_workloads,
    "gemm": gemm_workloads,
}
