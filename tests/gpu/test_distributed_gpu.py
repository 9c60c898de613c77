"""`ts.distributed` on two GPUs (NCCL): a collective between launches is ordered like a launch
(a host read waits for it; a launch on another stream waits for it), and the same launches
and all-reduce captured in `ts.graph()` replay to the eager result.

Needs two GPUs (skipped otherwise). Run on nvidia-h200-x2:
    PYTHONPATH=src python -m pytest tests/gpu/test_distributed_gpu.py -m gpu -q
"""
import datetime
import socket
import traceback

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                 reason="needs two GPUs")]


def _rank(rank: int, init: str, results) -> None:
    import torch.distributed as dist

    import tilesafe as ts
    import tilesafe.kernels as tk
    try:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=init, rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=120))
        n = 1 << 20
        g = torch.Generator(device="cuda").manual_seed(rank)
        x = torch.randn(n, device="cuda", generator=g)
        y = torch.empty(n, device="cuda")
        z = torch.empty(n, device="cuda")
        # Eager: scale, all-reduce, scale again; the host read waits for all of it.
        tk.mul(x, 2.0, out=y)
        ts.distributed.all_reduce(y)
        tk.mul(y, 3.0, out=z)
        eager = ts.from_torch(z).numpy().copy()
        # A launch on another stream reads the all-reduced bytes only after the collective.
        side = torch.empty(n, device="cuda")
        tk.mul(x, 2.0, out=y)
        ts.distributed.all_reduce(y)
        with ts.stream():
            tk.mul(y, 3.0, out=side)
        other_stream = ts.from_torch(side).numpy().copy()
        # Captured: the same three steps in one graph, replayed twice.
        torch.cuda.synchronize()
        with ts.graph() as graph:
            tk.mul(x, 2.0, out=y)
            ts.distributed.all_reduce(y)
            tk.mul(y, 3.0, out=z)
        z.fill_(float("nan"))
        graph.replay()
        graph.replay()
        replayed = ts.from_torch(z).numpy().copy()
        gathered = ts.distributed.all_gather(x[:4].contiguous()).sync().cpu()
        results.put((rank, {"eager": eager, "other_stream": other_stream, "replayed": replayed,
                            "x": x.cpu().numpy(), "gathered": gathered.numpy()}))
    except BaseException:
        results.put((rank, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_collectives_are_ordered_and_captured_on_two_gpus():
    import numpy as np
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        init = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    procs = [ctx.Process(target=_rank, args=(r, init, results)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict(results.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    for r in range(2):
        assert isinstance(got[r], dict), got[r]
    want = 6.0 * (got[0]["x"].astype(np.float64) + got[1]["x"])                  # 3 * (2 x0 + 2 x1)
    for r in range(2):
        for key in ("eager", "other_stream", "replayed"):
            np.testing.assert_allclose(got[r][key], want, rtol=1e-5, atol=1e-5, err_msg=f"rank {r} {key}")
        np.testing.assert_array_equal(got[r]["gathered"], np.concatenate([got[0]["x"][:4], got[1]["x"][:4]]))
