"""Row reductions and softmax against torch in float64: every axis, ragged rows, rows with
-inf, short rows (one tile) and long rows (statistics kernel + elementwise pass)."""
import importlib

import numpy as np
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from kernel_helpers import assert_close, f64, poisoned, randn

REDUCE = {"sum": (tk.sum, lambda x, a: x.sum(a)), "max": (tk.max, lambda x, a: x.amax(a)),
          "mean": (tk.mean, lambda x, a: x.mean(a))}


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("op", list(REDUCE))
def test_reduce_last_axis(backend, device, op, dtype):
    x = randn((5, 77), dtype, 1, device, scale=2.0)
    out = poisoned((5,), dtype, device)
    got = REDUCE[op][0](x, out=out)
    assert got is out
    assert_close(got, REDUCE[op][1](torch.as_tensor(f64(x)), -1), dtype, atol=5e-2 if dtype != "f32" else None)


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("op", list(REDUCE))
def test_reduce_any_axis_of_a_3d_tensor(backend, device, op, axis):
    x = randn((3, 6, 40), "f32", 2, device)
    assert_close(REDUCE[op][0](x, axis=axis), REDUCE[op][1](torch.as_tensor(f64(x)), axis), "f32")


def test_reduce_1d_and_strided(backend, device):
    v = randn((100,), "f32", 3, device)
    got = tk.sum(v)
    assert got.shape == ()
    assert_close(got, torch.as_tensor(f64(v)).sum(), "f32")
    x = randn((40, 30), "f32", 4, device)[::3]           # every third row
    assert_close(tk.max(x), torch.as_tensor(f64(x)).amax(-1), "f32")


def softmax_ref(x, log):
    x = torch.as_tensor(f64(x))
    return torch.log_softmax(x, -1) if log else torch.softmax(x, -1)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("long", [False, True], ids=["one_tile", "long_rows"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax(backend, device, log, long, dtype):
    x = randn((2, 3, 100), dtype, 5, device, scale=3.0)
    x[0, 1, 7] = float("-inf")                                   # a masked score
    out = poisoned((2, 3, 100), dtype, device)
    config = {"row_max": 32, "sub": 32} if long else None
    got = (tk.log_softmax if log else tk.softmax)(x, out=out, config=config)
    want = softmax_ref(x, log)
    if log:
        assert torch.isneginf(got[0, 1, 7])
        got, want = got.clone(), want.clone()
        got[0, 1, 7] = want[0, 1, 7] = 0.0
    assert_close(got, want, dtype)


def test_softmax_tilesafe_tensors(backend, device):
    x = ts.tensor(np.linspace(-4, 4, 3 * 50, dtype=np.float32).reshape(3, 50), device=device)
    got = tk.softmax(x)
    assert isinstance(got, ts.Tensor)
    e = np.exp(x.numpy() - x.numpy().max(-1, keepdims=True))
    np.testing.assert_allclose(got.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.reference_only
def test_errors(backend, device):
    x = randn((4, 5), "f32", 6, device)
    with pytest.raises(ts.LaunchError, match="axis 2 is out of range"):
        tk.sum(x, axis=2)
    with pytest.raises(ts.LaunchError, match="`out` has shape"):
        tk.softmax(x, out=torch.empty((4, 6)))
    with pytest.raises(ts.LaunchError, match="at least one axis"):
        tk.mean(torch.tensor(1.0))


@pytest.mark.parametrize("reverse", [True, False], ids=["pass_reversed", "pass_in_order"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_few_long_rows_split_into_column_chunks(backend, device, monkeypatch, log, reverse):
    """Two rows of 1000 (a vocabulary, scaled down): the statistics run per chunk of column
    tiles, so few rows still make many blocks; chunks wholly -inf combine to nothing. The pass
    walks the tiles back from the far end (reverse_pass) or in order: the same result."""
    red = importlib.import_module("tilesafe.kernels.reduce")
    x = randn((2, 1000), "f32", 8, device, scale=3.0)
    x[0, :400] = float("-inf")                                   # row 0's first chunks are all -inf
    launched = []
    real = red.launch
    monkeypatch.setattr(red, "launch", lambda kernel, outputs, **kw: (launched.append((kernel.name, outputs, kw)),
                                                                        real(kernel, outputs, **kw))[1])
    out = poisoned((2, 1000), "f32", device)
    config = {"row_max": 32, "sub": 32, "max_chunks": 8, "target_blocks": 6, "reverse_pass": reverse}
    got = (tk.log_softmax if log else tk.softmax)(x, out=out, config=config)
    (name, outputs, kw), (apply_name, _, apply_kw) = launched
    chunks = min(32, 8, 6)                                       # 32 column tiles, 1 block of 2 rows
    per = -(-32 // chunks)
    assert (name, apply_name) == ("row_stats_kernel", "softmax_apply_kernel")
    assert outputs["mx"][0].shape == (1, 2, -(-32 // per)) and kw["PER"] == per and apply_kw["CP"] >= chunks
    assert "reverse_blocks" not in kw["cfg"]
    assert apply_kw["cfg"].get("reverse_blocks") == ((1, 2) if reverse else None)
    want = softmax_ref(x, log)
    if log:                                                      # -inf where the input is -inf
        assert torch.isneginf(got[0, :400]).all()
        got, want = got[:, 400:], want[:, 400:]
    assert_close(got, want, "f32")


def test_long_rows_reuse_the_device_scratch_and_stay_ordered(backend, device):
    """Two long-row softmaxes back to back share the scratch statistics: the second waits for
    nothing on the host and still reads its own rows (the runtime orders the reuse)."""
    from tilesafe.kernels import scratch
    config = {"row_max": 32, "sub": 32}
    a, b = randn((4, 100), "f32", 6, device, scale=3.0), randn((4, 100), "f32", 7, device, scale=3.0)
    first = tk.softmax(a, config=config)
    before = dict(scratch.buffers())                             # keyed by the library's device name
    second = tk.softmax(b, config=config)
    assert scratch.buffers() == before and all(scratch.buffers()[k] is v for k, v in before.items())   # no allocation
    assert_close(first, softmax_ref(a, False), "f32")
    assert_close(second, softmax_ref(b, False), "f32")


def test_scratch_views_sit_side_by_side_and_grow():
    from tilesafe.kernels import scratch
    x, y = scratch.views("cpu", (2, 3), (4,))
    assert (x.shape, x.strides, y.shape) == ((2, 3), (3, 1), (4,))
    assert y._torch().data_ptr() == x._torch().data_ptr() + 6 * 4   # right after x
    want = scratch.buffers()["cpu"].numel + 1                    # other tests may have grown it already
    big, = scratch.views("cpu", (want,))
    assert scratch.buffers()["cpu"].numel == want and big.shape == (want,)


def test_scratch_is_per_thread_and_freed_with_its_thread():
    """Each thread has its own scratch (another thread's call between a call's two launches
    must not take its bytes), and a thread's scratch goes when the thread ends: keyed by
    thread id in a module dict, it stayed allocated for the life of the process."""
    import gc
    import threading
    import weakref

    from tilesafe.kernels import scratch
    mine, = scratch.views("cpu", (4,))
    seen = {}

    def body():
        theirs, = scratch.views("cpu", (4,))
        seen["ptr"] = theirs._torch().data_ptr()
        seen["buffer"] = weakref.ref(scratch.buffers()["cpu"])

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen["ptr"] != mine._torch().data_ptr()               # not this thread's bytes
    gc.collect()
    assert seen["buffer"]() is None, "a finished thread's scratch stays allocated"
