"""The device scratch (kernels/scratch.py) holds defined values from the start, so a call
that writes a few of its bytes records that write in constant time: with the scratch made
by `ts.empty`, its per-byte S14 mask was never full, and every launch writing into it
scanned the whole 4 MiB mask — 1.5 ms of host time per vocabulary-wide softmax on the H200
(issue 16), against ~0.1 ms for the other library calls."""
import threading

import torch

import tilesafe.kernels as tk
from kernel_helpers import assert_close, randn
from tilesafe.kernels import scratch
from tilesafe.runtime.storage_state import StorageState


def _mask_scans(monkeypatch) -> list:
    """Count the whole-mask scans that recording a partial write makes."""
    seen = []
    original = StorageState._drop_mask_when_full

    def counted(self):
        seen.append(self.nbytes)
        return original(self)

    monkeypatch.setattr(StorageState, "_drop_mask_when_full", counted)
    return seen


def test_a_new_scratch_buffer_counts_as_written_and_reads_zeros():
    found = {}

    def body():                                                  # a fresh thread: a fresh buffer
        view, = scratch.views("cpu", (3, 5))
        buf = scratch.buffers()["cpu"]
        found["mask"] = buf._state.init_mask
        found["values"] = view._torch().clone()

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert found["mask"] is None, "the scratch keeps a per-byte S14 mask: writes into it scan it whole"
    assert torch.equal(found["values"], torch.zeros(3, 5))


def test_a_long_row_softmax_scans_no_init_mask(backend, device, monkeypatch):
    """The second call of a layout (its plan) and the first (full path) write the scratch
    statistics without scanning a mask, and still compute torch's softmax."""
    scans = _mask_scans(monkeypatch)
    x = randn((2, 3000), "f32", 11, device, scale=3.0)           # longer than CPU row_max: two kernels
    first = tk.softmax(x)
    second = tk.softmax(x[:])                                    # a fresh view: the recorded plan
    assert scans == [], f"mask scans of {scans} bytes per long-row softmax"
    want = torch.softmax(x.double(), -1)
    assert_close(first, want, "f32")
    assert_close(second, want, "f32")
