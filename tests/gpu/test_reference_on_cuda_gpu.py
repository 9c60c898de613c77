"""The reference backend over CUDA tensors: its write-back is the kernel's write, not torch's.

It copies each output back to the device after interpreting; that copy must not move torch's
version counter, or the S13 check takes it for torch writing lent memory (a warning on every
launch, a refusal when the whole storage is lent)."""
import warnings

import numpy as np
import pytest
import torch

import tilesafe as ts

from gpu_kernels import scale

pytestmark = pytest.mark.gpu


def test_reference_launches_on_cuda_memory_raise_no_torch_write_warning():
    x = torch.arange(300, dtype=torch.float32, device="cuda")
    z = torch.full((300,), float("nan"), device="cuda")
    zt = ts.from_torch(z)
    with ts.backend("reference"), warnings.catch_warnings():
        warnings.simplefilter("error")              # a false S13 warning fails the test
        p = zt.partition((128,))
        scale(p, ts.from_torch(x), a=2.0).sync()
        scale(p, ts.from_torch(x), a=3.0).sync()    # relaunch: the lent storage counts as untouched
        back = p.unpartition()
    np.testing.assert_array_equal(back.numpy(), 3.0 * np.arange(300, dtype=np.float32))
