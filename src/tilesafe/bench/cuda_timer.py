"""The CUDA clock: event pairs on the current stream, eager or around graph replays.

Eager launches are queued behind `torch.cuda._sleep`, long enough for the host to enqueue
them all, so each event pair brackets the kernel alone and not the host's time to launch it
(a safe launch does more host work than a raw one; DESIGN §6 times the GPU). Graphs are
captured with `ts.graph()` for tilesafe launches and `torch.cuda.graph` for the rest, warmed
up once, then replayed behind the same sleep.
"""
from __future__ import annotations

import time

import torch

SLEEP_MARGIN = 2.0            # the sleep covers this many times the host's enqueue time
MAX_SLEEP_US = 500_000.0
BOOST_MHZ = 2000.0            # about the H100/H200 boost clock: cycles per microsecond


class CudaTimer:
    def __init__(self):
        self.cycles_per_us = self._calibrate()
        self.note = ""                # set by `eager` when the host may have been timed too

    def eager(self, launch, reps: int) -> list[float]:
        self.note = ""
        sleep_us = self._host_us(launch) * reps * SLEEP_MARGIN + 200.0
        for attempt in range(2):
            events, enqueue_us = self._eager_once(launch, reps, sleep_us)
            if enqueue_us < sleep_us or sleep_us >= MAX_SLEEP_US:
                break
            if attempt == 1:
                self.note = (f"the host took {enqueue_us:.0f} us to enqueue {reps} launches, longer than the "
                             f"{sleep_us:.0f} us sleep ahead of them: host time may be counted")
            sleep_us = min(enqueue_us * SLEEP_MARGIN, MAX_SLEEP_US)        # the queue ran dry: once more
        return [start.elapsed_time(stop) * 1000.0 for start, stop in events]

    def _eager_once(self, launch, reps: int, sleep_us: float):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        torch.cuda.synchronize()
        self._sleep(sleep_us)
        t0 = time.perf_counter()
        for i, (start, stop) in enumerate(events):
            start.record()
            launch(i)
            stop.record()
        enqueue_us = (time.perf_counter() - t0) * 1e6
        torch.cuda.synchronize()
        return events, enqueue_us

    def graph(self, launch, per_graph: int, reps: int, capture: str) -> list[float]:
        replay, keep = self._capture(launch, per_graph, capture)
        replay()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        replay()
        host_us = (time.perf_counter() - t0) * 1e6
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        self._sleep(reps * host_us * SLEEP_MARGIN + 200.0)
        for start, stop in events:
            start.record()
            replay()
            stop.record()
        torch.cuda.synchronize()
        del keep
        return [start.elapsed_time(stop) * 1000.0 / per_graph for start, stop in events]

    def _capture(self, launch, per_graph: int, capture: str):
        if capture == "tilesafe":
            import tilesafe as ts
            with ts.graph() as g:
                for i in range(per_graph):
                    launch(i)
            return g.replay, g
        g = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):                 # torch's rule: warm up on a side stream
            launch(0)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(g):
            for i in range(per_graph):
                launch(i)
        return g.replay, g

    def _host_us(self, launch) -> float:
        """The host's time to enqueue one launch (the most of three, GPU queue not full)."""
        worst = 0.0
        for i in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            launch(i)
            worst = max(worst, (time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
        return worst

    def _sleep(self, us: float) -> None:
        torch.cuda._sleep(int(min(us, MAX_SLEEP_US) * self.cycles_per_us))

    @staticmethod
    def _calibrate() -> float:
        """GPU clock cycles per microsecond, as `torch.cuda._sleep` counts them: the fastest of a
        few tries, and at least the boost clock (an idle GPU clocks low, and a sleep sized at
        a low clock would end too soon; one too long only costs a little GPU time)."""
        cycles, best = 20_000_000, 0.0
        for _ in range(3):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            stop.record()
            torch.cuda.synchronize()
            best = max(best, cycles / max(start.elapsed_time(stop) * 1000.0, 1.0))
        return max(best, BOOST_MHZ)
