"""Config lookups ask for the current GPU's compile target once per device, not once per
process: a process that drives an H200 and an MI300 gets each one's defaults."""
import torch

from tilesafe.backends.triton import targets
from tilesafe.kernels import configs


def test_the_device_target_follows_the_current_device(monkeypatch):
    kinds = {0: targets.TARGETS["sm_90"], 1: targets.TARGETS["gfx942"]}
    asked = []

    def target_of(index=None):
        asked.append(index)
        return kinds[index]
    current = [0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])
    monkeypatch.setattr(targets, "device_target", target_of)
    configs._target_of.cache_clear()
    try:
        assert configs._device_target() is kinds[0]
        current[0] = 1
        assert configs._device_target() is kinds[1]
        current[0] = 0
        assert configs._device_target() is kinds[0]
        assert asked == [0, 1]                                    # one driver query per device
    finally:
        configs._target_of.cache_clear()


def test_no_gpu_has_no_device_target(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert configs._device_target() is None
