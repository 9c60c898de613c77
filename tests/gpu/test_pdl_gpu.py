"""Programmatic dependent launch on a Hopper GPU: `ts.graph(pdl=True)` and `ts.pdl()`.

A chain of kernels in which every block reads a tile another block of the kernel before
wrote (the tile order reversed), and the last kernel overwrites the first one's input, is
captured with PDL and replayed many times: each replay must give exactly the NumPy oracle's
integers, as the same chain without PDL does. The engine's decode graph captured with PDL
gives the same tokens and log-probabilities as without.

Run on the H200: PYTHONPATH=src python -m pytest tests/gpu/test_pdl_gpu.py -m gpu -q
"""
import numpy as np
import pytest
import torch

import tilesafe as ts

pytestmark = pytest.mark.gpu
N, B = 1 << 20, 1024          # 1024 blocks a kernel: several waves on an H200
P = 65521                     # values stay below P: exact in i32
CHAIN = [(3, 1), (5, 2), (7, 3)]   # (m, c) of the kernels x0 -> x1 -> x2 -> x0
ROUNDS = 10                   # the chain ten times in one graph: 30 dependent kernels
REPLAYS = 40


@ts.kernel
def affine_reversed(z: ts.Mut[ts.i32, ("B",)], x: ts.Ref[ts.i32, ("N",)], B: ts.Const[int], N: int, m: int, c: int):
    """z's tile i = (x's tile n-1-i * m + c) mod P, n the number of tiles: each block reads
    what another block of the kernel before wrote (the last one, for block 0)."""
    t = ts.load(x, (ts.num_blocks(0) - 1 - ts.block_id(0),), shape=(B,))
    z.store((t * m + c) % P)


def oracle_step(x: np.ndarray, m: int, c: int) -> np.ndarray:
    tiles = x.reshape(-1, B)[::-1].reshape(-1).astype(np.int64)
    return ((tiles * m + c) % P).astype(np.int32)


def oracle_replay(x0: np.ndarray) -> list:
    xs = [x0, None, None]
    for _ in range(ROUNDS):
        for k, (m, c) in enumerate(CHAIN):
            xs[(k + 1) % 3] = oracle_step(xs[k], m, c)
    return xs


def chain(xs) -> None:
    for _ in range(ROUNDS):
        for k, (m, c) in enumerate(CHAIN):
            affine_reversed(xs[(k + 1) % 3].partition((B,)), xs[k], m=m, c=c)


def start_values(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, P, N, dtype=np.int32)


@pytest.mark.parametrize("pdl", [True, False])
def test_a_chain_of_dependent_kernels_replayed_with_pdl_gives_the_oracle_every_replay(pdl):
    with ts.pdl(pdl):                                  # compile outside the capture, as the capture will launch
        chain([ts.tensor(start_values(1), device="cuda"), ts.zeros(N, ts.i32, device="cuda"),
               ts.zeros(N, ts.i32, device="cuda")])
    torch.cuda.synchronize()
    x0 = start_values(0)
    xs = [ts.tensor(x0, device="cuda"), ts.zeros(N, ts.i32, device="cuda"), ts.zeros(N, ts.i32, device="cuda")]
    with ts.graph(pdl=pdl) as g:
        chain(xs)
    assert g.pdl is pdl
    compiled = affine_reversed.last_launch.compiled            # what the capture launched
    assert compiled.pdl is pdl and ("gdc_wait()" in compiled.source) is pdl
    assert compiled.options.get("launch_pdl", False) is pdl
    want = [x0, None, None]
    for r in range(REPLAYS):
        g.replay()
        want = oracle_replay(want[0])
        got = [x.numpy() for x in xs]                          # waits for the replay (S9)
        for i in range(3):
            assert np.array_equal(got[i], want[i]), f"replay {r}: x{i} differs at {np.flatnonzero(got[i] != want[i])[:8]}"


def test_eager_launches_under_ts_pdl_give_the_oracle():
    x0 = start_values(2)
    xs = [ts.tensor(x0, device="cuda"), ts.zeros(N, ts.i32, device="cuda"), ts.zeros(N, ts.i32, device="cuda")]
    with ts.pdl():
        for _ in range(5):
            chain(xs)
    want = [x0, None, None]
    for _ in range(5):
        want = oracle_replay(want[0])
    for i in range(3):
        assert np.array_equal(xs[i].numpy(), want[i])


def _graphs(steps) -> list:
    out = []
    for s in steps.steps.values():
        graphs = getattr(s, "graphs", None)
        out += [g for g in (graphs.values() if isinstance(graphs, dict) else [getattr(s, "graph", None)])
                if g is not None]
    return out


def test_the_engine_decode_graph_with_pdl_gives_the_same_tokens():
    from tilesafe.engine import LLM, SamplingParams, decode_step
    llm = LLM.from_random("0.6b", device="cuda", dtype="bfloat16", max_model_len=256, max_num_seqs=2, progress=False)
    prompts = [{"prompt_token_ids": [151, 2000, 30000, 7, 99, 1234, 5678, 42]}, {"prompt_token_ids": [77, 88]}]
    params = SamplingParams(temperature=0, max_tokens=24, logprobs=1)
    steps = llm.decode_steps
    # TILESAFE_PDL's choice when set, else the engine's default (on: decode_step.DECODE_PDL)
    assert steps.pdl is (ts.settings.pdl if ts.settings.pdl_text else decode_step.DECODE_PDL)
    steps.pdl, steps.steps = False, {}
    plain = llm.generate(prompts, params)
    assert _graphs(steps) and not any(g.pdl for g in _graphs(steps))
    steps.pdl, steps.steps = True, {}                          # capture again, with PDL
    with_pdl = llm.generate(prompts, params)
    assert _graphs(steps) and all(g.pdl for g in _graphs(steps))
    for p, q in zip(plain, with_pdl):
        assert p.outputs[0].token_ids == q.outputs[0].token_ids
        assert [next(iter(d.values())).logprob for d in p.outputs[0].logprobs] == \
               [next(iter(d.values())).logprob for d in q.outputs[0].logprobs]
    del llm
    torch.cuda.empty_cache()
