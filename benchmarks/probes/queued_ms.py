"""GPU milliseconds per call of a function, its calls queued behind a GPU sleep so that the
host's cost of issuing them is hidden (the probes' shared timed loop)."""
import torch


def queued_ms(fn, n: int = 20, warm: int = 2, sleep_cycles: int = 60_000_000) -> float:
    """GPU ms per call of `fn` over n calls, after `warm` untimed ones; the GPU sleeps
    sleep_cycles first (60M: ~30 ms on an H200) while the host queues the timed calls."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(sleep_cycles)
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n
