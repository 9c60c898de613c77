"""Reduction and lookup workloads: `sum` over rows, `argmax` over a vocabulary and
`embedding` (a gather of table rows), each beside torch and a copy of the same bytes."""
from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

import tilesafe.kernels as tk

from ..twins.reductions import argmax_twin, embedding_twin, sum_twin
from ..workload import BANDWIDTH, TILESAFE, TORCH, TWIN, Impl, Setup, Workload, element_bytes, empty, randn
from . import baselines
from .qwen3 import MODELS, VOCAB
from .rows import TOKENS

_reduce = importlib.import_module("tilesafe.kernels.reduce")
_lookup = importlib.import_module("tilesafe.kernels.rope")      # embedding and argmax live with rope


def sum_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:   # ragged columns (100 = 3 tiles of 32 and a part), then ragged rows too
        return [_sum(10, 100, "f32", setup), _sum(7, 45, "f32", setup)]
    shapes = [(8192, 4096)] if setup.size == "quick" else [(8192, 4096), (32768, 1024)]
    return [_sum(m, n, "bf16", setup) for m, n in shapes]


def argmax_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:   # 47 chunks of 64 columns per row, the last tile ragged
        return [_argmax(3, 3000, "f32", setup)]
    # greedy decoding over fp32 logits: one sequence, and a batch of 64; the full set also
    # takes the lm_head's bf16 output as it is
    out = [_argmax(1, VOCAB, "f32", setup), _argmax(64, VOCAB, "f32", setup)]
    if setup.size != "quick":
        out.append(_argmax(64, VOCAB, "bf16", setup))
    return out


def embedding_workloads(setup: Setup) -> list[Workload]:
    if setup.tiny:
        return [_embedding(50, 40, 7, "f32", setup)]
    models = ("8B",) if setup.size == "quick" else ("4B", "8B", "32B")
    return [_embedding(VOCAB, MODELS[m].hidden, TOKENS, "bf16", setup) for m in models]


def _sum(m: int, n: int, dtype: str, setup: Setup) -> Workload:
    dev = setup.device
    nbytes = (m * n + m) * element_bytes(dtype)

    def make(seed):
        return {"x": randn((m, n), dtype, seed, dev), "out": empty((m,), dtype, dev)}

    def twin(seen):
        run = sum_twin(seen)
        return Impl("twin", TWIN, lambda b: run(b["out"], b["x"]))
    return Workload(
        "sum", f"sum {dtype} {m}x{n}", {"rows": m, "n": n}, dtype, BANDWIDTH, nbytes, 0.0, make,
        lambda b: b["x"].float().sum(-1),
        [Impl("tilesafe", TILESAFE, lambda b: tk.sum(b["x"], out=b["out"]), capture="tilesafe"),
         Impl("torch.sum", TORCH, lambda b: b["x"].sum(-1)),
         baselines.copy(nbytes, dev)],
        observe=(_reduce.reduce_kernel,), twin=twin)


def _argmax(m: int, n: int, dtype: str, setup: Setup) -> Workload:
    dev = setup.device
    nbytes = m * n * element_bytes(dtype) + 4 * m             # logits read, i32 indices written
    workspaces: dict = {}                                     # scratch, made once at the first (eager) call

    def make(seed):
        return {"x": randn((m, n), dtype, seed, dev, scale=4.0), "out": torch.empty((m,), dtype=torch.int32, device=dev)}

    def tilesafe_call(b):
        if "tilesafe" not in workspaces:
            workspaces["tilesafe"] = tk.argmax_workspace(b["x"])
        return tk.argmax(b["x"], out=b["out"], workspace=workspaces["tilesafe"])

    def twin(seen):
        workspace, run = argmax_twin(seen)

        def call(b):
            if "twin" not in workspaces:
                workspaces["twin"] = workspace(b["x"])
            return run(b["out"], b["x"], workspaces["twin"])
        return Impl("twin", TWIN, call)
    return Workload(
        "argmax", f"argmax {dtype} {m}x{n}", {"rows": m, "n": n}, dtype, BANDWIDTH, nbytes, 0.0, make,
        lambda b: b["x"].float().argmax(-1),
        [Impl("tilesafe", TILESAFE, tilesafe_call, capture="tilesafe"),
         Impl("torch.argmax", TORCH, lambda b: b["x"].argmax(-1)),
         baselines.copy(nbytes, dev)],
        observe=(_lookup.argmax_partial_kernel, _lookup.argmax_final_kernel), twin=twin,
        # indices, compared exactly (as floats, exact below 2^24): every implementation takes
        # the first of tied maxima, as the fp32 oracle does
        tolerance=0.0)


def _embedding(vocab: int, d: int, tokens: int, dtype: str, setup: Setup) -> Workload:
    dev = setup.device
    nbytes = 2 * tokens * d * element_bytes(dtype) + 8 * tokens     # rows read and written, int64 ids read

    def make(seed):
        g = torch.Generator(device=dev).manual_seed(seed + 2000)
        return {"table": randn((vocab, d), dtype, seed, dev), "out": empty((tokens, d), dtype, dev),
                "ids": torch.randint(0, vocab, (tokens,), generator=g, device=dev)}

    def twin(seen):
        run = embedding_twin(seen)
        return Impl("twin", TWIN, lambda b: run(b["out"], b["ids"], b["table"]))
    return Workload(
        "embedding", f"embedding {dtype} {vocab}x{d} ids={tokens}", {"vocab": vocab, "dim": d, "tokens": tokens},
        dtype, BANDWIDTH, nbytes, 0.0, make, lambda b: b["table"].float()[b["ids"]],
        [Impl("tilesafe", TILESAFE, lambda b: tk.embedding(b["ids"], b["table"], out=b["out"]), capture="tilesafe"),
         Impl("F.embedding", TORCH, lambda b: F.embedding(b["ids"], b["table"])),
         baselines.copy(nbytes, dev)],
        observe=(_lookup.embedding_kernel,), twin=twin)
