"""The shared launch tail written out (pending_start.start_pending_source, with storage_state.
record_launch_source) does what `start_pending` does, step for step: the per-layout launchers
(planned_unrolled.py) run the lines, the other launchers the function, so the two must not
drift apart. Both run on stand-in states in the same situation — no pending work, the same
bytes pending on this stream (replaced in place), work of another stream (S10: ordered first),
a full registry (pruned) — and must leave the same order_device calls, start, mark, pending
entries, pending streams and change count."""
import torch

from tilesafe.runtime import future, storage_state
from tilesafe.runtime.future import Completion
from tilesafe.runtime.pending_start import start_pending, start_pending_source
from tilesafe.runtime.storage_state import PendingAccess

WRITES = (True, False, True)


class _State:
    def __init__(self, pending, stream):
        self._pending, self.pending_stream, self.ordered = list(pending), stream, []

    def order_device(self, byteset, write, stream):
        self.ordered.append((byteset, write, stream))


class _Earlier:
    """An earlier launch's future (`done`: finished, so pruning drops it)."""
    def __init__(self, stream, done):
        self.stream, self._done, self.live = stream, done, False

    def done(self):
        return self._done


class _Launcher:
    def __init__(self):
        self.started, self.streams = [], {}

    def start(self, stream, args):
        self.started.append((stream, args))


def _situation():
    """(states, byte sets): s0 nothing pending; s1 its bytes read on this stream (7) already;
    s2 written on stream 9 (another), with a registry of 32 entries, half of them finished."""
    sets = [("bytes", 0), ("bytes", 1), ("bytes", 2)]
    mine = _Earlier(7, False)
    s1 = _State([PendingAccess(("other",), False, mine), PendingAccess(sets[1], False, mine)], 7)
    s2 = _State([PendingAccess(("b", i), True, _Earlier(9, i % 2 == 0)) for i in range(32)], 9)
    return [_State([], None), s1, s2], sets


def _after(states, launcher, marks, done):
    """What a tail left behind, the new completion written as "done"."""
    entries = [[(p.byteset, p.is_write, "done" if p.future is done else (p.future.stream, p.future._done), p.standing)
                for p in s._pending] for s in states]
    return (entries, [s.pending_stream for s in states], [s.ordered for s in states], launcher.started, marks,
            (done.stream, done._keep, type(done.stream_obj).__name__), list(launcher.streams))


class _TorchStream:
    pass


def test_the_written_out_tail_does_what_start_pending_does(monkeypatch):
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _TorchStream())
    monkeypatch.setattr(future.HOLDING, "add", lambda completion: None)
    args, held = ("p0", "p1", "p2"), ("v0", "v1", "v2")

    states, sets = _situation()
    launcher, marks = _Launcher(), []
    before = storage_state.registry_version()
    done = start_pending(launcher.start, 7, args, states, sets, WRITES, held, launcher.streams, 0,
                         lambda: marks.append("marked"))
    assert storage_state.registry_version() == before + 1
    by_function = _after(states, launcher, marks, done)

    lines = start_pending_source(["s0", "s1", "s2"], "SETS", WRITES, "ARGS", "HELD", "MARK", "self.streams", "DEVICE")
    src = "\n".join(["def tail(self, s0, s1, s2, MARK):"] + ["    " + line for line in lines] + ["    return done"])
    states, sets = _situation()
    launcher, marks = _Launcher(), []
    ns = {"torch": torch, "Completion": Completion, **storage_state.record_launch_names(),
          "SETS": sets, "ARGS": args, "HELD": held, "DEVICE": 0}
    exec(compile(src, "<tail>", "exec"), ns)
    before = storage_state.registry_version()
    done = ns["tail"](launcher, *states, lambda: marks.append("marked"))
    assert storage_state.registry_version() == before + 1
    by_lines = _after(states, launcher, marks, done)

    assert by_lines == by_function
    entries, streams, ordered, started, marked, completion, _ = by_function
    # (the situation does what it is for: each case of the tail is taken)
    assert entries[0] == [(sets[0], True, "done", False)] and streams[0] == 7
    assert entries[1] == [(("other",), False, (7, False), False), (sets[1], False, "done", False)]
    assert len(entries[2]) == 17 and entries[2][-1] == (sets[2], True, "done", False) and streams[2] is None
    assert ordered == [[], [], [(sets[2], True, 7)]]
    assert started == [(7, args)] and marked == ["marked"] and completion == (7, held, "_TorchStream")
