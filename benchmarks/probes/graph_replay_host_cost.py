"""Probe (CPU, no GPU needed): host microseconds of `g.replay()` against the number of tensors
the graph touches, through the real `Graph` with only its device hooks stood in (no CUDA
graph, no stream): what is measured is tilesafe's bookkeeping — S10 ordering and S9
registration — not CUDA's graph launch. Also a replay after another stream's pending write
(the ordering then runs in full) and the first replay on a stream (the accesses registered).
    PYTHONPATH=src python3 benchmarks/probes/graph_replay_host_cost.py [100,400,1600]
"""
import contextlib
import json
import sys
import time

import tilesafe as ts
from tilesafe.runtime.future import Completion, device_synchronized
from tilesafe.runtime.graph import Graph, capturing

DEVICE, STREAM, OTHER = 13, 555, 777


class _Done:
    """A finished CUDA event."""
    def query(self):
        return True

    def synchronize(self):
        pass


class _Stream:
    device_index = DEVICE


class StandInGraph(Graph):
    backend = "reference"

    @contextlib.contextmanager
    def _capture_on_device(self):
        device_synchronized(DEVICE)
        yield

    def _on_capture_stream(self):
        return True

    def _on_capture_device(self, device):
        return True

    def _current_stream(self):
        return STREAM, _Stream

    def _launch(self, stream, stream_obj):
        return Completion(_Done(), stream, self._held, stream_obj)


def measure(n: int, reps: int = 2000) -> dict:
    tensors = [ts.zeros(64) for _ in range(n)]
    g = StandInGraph()
    with capturing(g):
        for i, t in enumerate(tensors):
            g.record(t, i % 4 == 0)                   # a quarter written (activations), the rest read
    t0 = time.perf_counter()
    g.replay()
    first = time.perf_counter() - t0
    for _ in range(20):
        g.replay()
    t0 = time.perf_counter()
    for _ in range(reps):
        g.replay()
    steady = (time.perf_counter() - t0) / reps
    w = tensors[1]
    w._state.record(w._byte_set(), True, Completion(_Done(), OTHER, (), _Stream))   # another stream's write
    t0 = time.perf_counter()
    g.replay()
    ordered = time.perf_counter() - t0
    return {"tensors": n, "first_replay_us": first * 1e6, "replay_us": steady * 1e6,
            "replay_after_other_stream_work_us": ordered * 1e6}


def main():
    sizes = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "100,400,1600").split(",")]
    print(json.dumps([measure(n) for n in sizes], indent=1))


if __name__ == "__main__":
    main()
