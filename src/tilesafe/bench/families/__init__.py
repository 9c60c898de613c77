"""The benchmark's kernel families, in the order they run (the GEMMs, most numerous, last):
name -> workloads(setup)."""
from .attention import decode_workloads, flash_workloads
from .elementwise import add_workloads, silu_mul_workloads
from .gemm import bmm_workloads, gemm_workloads, gemv_workloads
from .reductions import argmax_workloads, embedding_workloads, sum_workloads
from .rows import layer_norm_workloads, log_softmax_workloads, rms_norm_workloads, rope_workloads, softmax_workloads

FAMILIES = {
    "add": add_workloads,
    "softmax": softmax_workloads,
    "log_softmax": log_softmax_workloads,
    "rms_norm": rms_norm_workloads,
    "layer_norm": layer_norm_workloads,
    "rope": rope_workloads,
    "silu_mul": silu_mul_workloads,
    "sum": sum_workloads,
    "argmax": argmax_workloads,
    "embedding": embedding_workloads,
    "gemv": gemv_workloads,
    "decode": decode_workloads,
    "flash": flash_workloads,
    "bmm": bmm_workloads,
    "gemm": gemm_workloads,
}
