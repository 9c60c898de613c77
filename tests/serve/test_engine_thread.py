"""EngineThread.call, the server's way to read the engine between steps: a call that does
not come back in time, or one made after the thread stopped, is a located RequestError
(old code: a bare queue.Empty, and a RuntimeError)."""
import threading
from types import SimpleNamespace

import pytest

import tilesafe as ts
from tilesafe.engine import RequestError
from tilesafe.serve.engine_thread import EngineThread

HERE = __file__


def line_of(marker: str) -> int:
    with open(HERE) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


def idle_core():
    """Only what the loop reads from a core that never has work."""
    return SimpleNamespace(llm=SimpleNamespace(device="cpu"), has_work=lambda: False,
                           abort_all=lambda: None, fail_all=lambda e: None)


def test_a_call_returns_its_result_from_the_engine_thread():
    t = EngineThread(idle_core())
    try:
        assert t.call(lambda core: threading.current_thread().name) == "tilesafe-engine"
    finally:
        t.stop()


def test_a_call_that_times_out_is_a_located_request_error():
    t = EngineThread(idle_core())
    release = threading.Event()
    try:
        with pytest.raises(RequestError, match=r"did not answer within 0\.05 s") as e:
            t.call(lambda core: release.wait(5), timeout=0.05)  # slow-call
        assert isinstance(e.value, ts.TileSafeError) and e.value.loc.line == line_of("slow-call")
        assert "busy" in e.value.help
    finally:
        release.set()
        t.stop()


def test_a_call_after_stop_is_a_located_request_error():
    t = EngineThread(idle_core())
    t.stop()
    with pytest.raises(RequestError, match="engine thread is not running") as e:
        t.call(lambda core: None)  # stopped-call
    assert e.value.loc.line == line_of("stopped-call")
