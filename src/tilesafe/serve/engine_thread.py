"""`EngineThread`: the engine's step loop on one background thread.

Every device operation of serving — prefill, decode, graph capture — happens on this
thread; other threads (the asyncio server) only post commands (add a request, abort one,
stop) to its queue. The loop applies every posted command between steps, so an abort frees
the request's capacity before the next step, then runs a step while there is work and sleeps
on the queue when there is none. An exception in a step goes to every request in flight
(each caller sees it) and the loop keeps serving.
"""
from __future__ import annotations

import logging
import queue
import threading

from ..engine.errors import request_error
from .engine_core import EngineCore
from .request import Request

log = logging.getLogger("tilesafe.serve")


class EngineThread:
    def __init__(self, core: EngineCore):
        self.core = core
        self._inbox: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="tilesafe-engine", daemon=True)
        self._stopped = threading.Event()
        self._died: BaseException | None = None
        self._thread.start()

    def add(self, req: Request) -> None:
        self._inbox.put(("add", req))
        if self._died is not None:          # nobody would ever answer: the caller hears why at once
            self._drain(self._died)

    def abort(self, request_id: str) -> None:
        self._inbox.put(("abort", request_id))

    def call(self, fn, timeout: float = 60.0):
        """Run fn(core) on the engine thread between steps; returns its result (blocking)."""
        if not self.alive:
            raise request_error("serve: the engine thread is not running",
                                help="the engine was shut down (or its loop failed: see the log); start a new one")
        done = queue.Queue(maxsize=1)
        self._inbox.put(("call", (fn, done)))
        try:
            ok, value = done.get(timeout=timeout)
        except queue.Empty:     # the call still runs later; its answer goes to a queue nobody reads
            raise request_error(f"serve: the engine thread did not answer within {timeout} s",
                                help="the engine is busy with a long step (or a compile); "
                                     "retry, or give a longer timeout") from None
        if not ok:
            raise value
        return value

    def stop(self, timeout: float | None = 30.0) -> None:
        """Cancel what is in flight (each request gets a final output, finish_reason 'abort')
        and end the loop."""
        if self._thread.is_alive():
            self._inbox.put(("stop", None))
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as e:          # the loop itself broke: fail what waits rather than hang it
            log.exception("engine thread stopped")
            self._died = e
            self.core.fail_all(e)
            self._drain(e)

    def _drain(self, error: BaseException) -> None:
        """Answer every posted command with `error` (the loop is gone)."""
        while True:
            try:
                cmd, arg = self._inbox.get_nowait()
            except queue.Empty:
                return
            if cmd == "add":
                arg.sink(error)
            elif cmd == "call":
                arg[1].put((False, error))

    def _serve(self) -> None:
        core = self.core
        if core.llm.device.startswith("cuda"):      # the current device is per thread: the model's
            import torch
            device = torch.device(core.llm.device)
            if device.index is not None:             # plain "cuda" is the current device already
                torch.cuda.set_device(device)
        while True:
            try:
                cmd, arg = self._inbox.get(block=not core.has_work())
            except queue.Empty:
                cmd = None
            while cmd is not None:
                if cmd == "stop":
                    core.abort_all()
                    return
                self._apply(cmd, arg)
                try:
                    cmd, arg = self._inbox.get_nowait()
                except queue.Empty:
                    cmd = None
            if core.has_work():
                try:
                    core.step()
                except Exception as e:   # a kernel or device failure: every request in flight hears of it
                    log.exception("engine step failed")
                    core.fail_all(e)

    def _apply(self, cmd: str, arg) -> None:
        if cmd == "add":
            try:
                self.core.add(arg)
            except Exception as e:
                try:
                    arg.sink(e)
                except Exception:     # its receiver is gone too
                    pass
        elif cmd == "abort":
            self.core.abort(arg)
        elif cmd == "call":
            fn, done = arg
            try:
                done.put((True, fn(self.core)))
            except Exception as e:
                done.put((False, e))
