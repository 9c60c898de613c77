"""The GEMM model's one-launch split-K (`one_kernel`, matmul.split_k_last_kernel): it changes
nothing without a split, and with one it trades the second launch and the partials' trip
through HBM for the last block's ticket and its walk over the partial tiles."""
import pytest

from tilesafe.kernels import config_model as cm
from tilesafe.kernels import gemm_model as gm

BASE = {"block_m": 128, "block_n": 128, "block_k": 64, "group": 8, "persistent": False, "min_blocks": 132,
        "num_warps": 8, "num_stages": 3}


def predicted(shape, **cfg):
    return gm.matmul_us(shape, dict(BASE, **cfg), cm.H200)[0]


def test_without_a_split_one_kernel_changes_nothing():
    shape = cm.Gemm(4096, 4096, 4096, "bf16")
    assert predicted(shape, split_k=1, tail_split=False, one_kernel=True) == \
        predicted(shape, split_k=1, tail_split=False, one_kernel=False)


@pytest.mark.parametrize("shape, cfg", [
    (cm.Gemm(128, 2048, 8192, "bf16"), {"split_k": 4, "tail_split": False}),     # 16 tiles split in 4
    (cm.Gemm(2048, 2560, 4096, "bf16"), {"split_k": 1, "tail_split": True}),     # 260 tiles, then 60 split
])
def test_a_split_saves_the_second_launch_less_the_last_blocks_walk(shape, cfg):
    two, one = predicted(shape, **cfg, one_kernel=False), predicted(shape, **cfg, one_kernel=True)
    assert one < two
    # never more than a launch and the partials' HBM round trip saved
    assert two - one <= gm.SPLIT_LAUNCH_US + 2 * 4 * shape.m * shape.n * 4 / cm.H200.hbm_bytes_per_s * 1e6
