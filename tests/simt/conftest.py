"""Fixtures of the SIMT tests."""
import types

import pytest
import torch
from simt_helpers import StubEvent

from tilesafe.simt import gpu_launch
from tilesafe.simt import launch as simt_launch


@pytest.fixture
def stubbed_gpu(monkeypatch):
    """CUDA as a launch sees it, stubbed: a capability-9.0 device 0 whose current stream is 7 and
    whose events are always done. Tests stub the compile and the launch themselves."""
    stream = types.SimpleNamespace(cuda_stream=7, device_index=0)
    monkeypatch.setattr(simt_launch, "_is_gpu", lambda device: device is not None)
    monkeypatch.setattr(simt_launch, "_capability", lambda index: (9, 0))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream)
    monkeypatch.setattr(torch.cuda, "Event", StubEvent)
    monkeypatch.setattr(gpu_launch, "current_device", lambda: 0)
    monkeypatch.setattr(gpu_launch, "current_stream", lambda index: stream.cuda_stream)
    return stream
