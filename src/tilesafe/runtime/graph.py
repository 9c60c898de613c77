"""CUDA graphs (S12): capture launches once, replay them with almost no host cost.

Inside `with ts.graph() as g:` allocations and host synchronisation are refused (they
would be frozen into the graph or break the capture); library calls take `out=`. A launch
inside is recorded, not run: so it must be one the graph can replay — on the Triton GPU
backend and on the capture's stream — or it is refused (another stream would run it once
now and never again). The graph keeps every buffer a captured launch uses alive, and each
`g.replay()` is ordered after conflicting work of other streams and leaves those accesses
pending, so host reads and later launches are ordered after it (S9/S10). Both cost O(1) host
time per replay, whatever the number of tensors (graph_registry): the accesses stand in the
registries once per stream, and the ordering is skipped when no registry gained pending
work since the graph's last replay on the same stream (it was ordered after all of it).

Initialisation (S14) follows what really ran: a captured launch writes nothing until the
graph replays, so its outputs are marked written by the first replay, not at capture; a
capture that failed or was abandoned never marks them. Inside the capture, a later launch
may read what an earlier captured launch wrote (the graph runs them in order), which the
graph tracks on its own copy of the written bytes.

Run each kernel once eagerly before capturing, so compilation happens outside the capture.
"""
from __future__ import annotations

import contextlib
import copy

from ..errors import LaunchError, OwnershipError, caller_loc
from ..settings import graph_var, override_of_pdl, pdl_launches, pdl_var
from .future import Completion, Future, device_synchronized
from .graph_registry import Standing, merged_accesses
from .host_lock import LOCK, serialized
from .storage_state import StorageState, registry_changed, registry_version


# Graphs dropped while another capture runs (`with ts.graph() as g:` again rebinds `g` inside
# the new capture): destroying their CUDA graph and buffers then would invalidate the capture,
# so they are kept here until it ends.
_RELEASE_AFTER_CAPTURE: list = []
_captures_running = 0


class Graph:
    """Launches captured by `with ts.graph() as g:`; `g.replay()` runs them again."""
    backend = "triton"   # the backend whose launches a capture records

    def __del__(self):
        for standing in getattr(self, "_standing", {}).values():
            standing.live = False     # the registries drop its entries once its replays are done
        if _captures_running and getattr(self, "_graph", None) is not None:
            _RELEASE_AFTER_CAPTURE.append((self._graph, self._keep))

    def __init__(self):
        self._accesses: list = []      # (tensor, is_write), as captured
        self._merged: list = []        # (StorageState, ByteSet, is_write): _accesses merged per storage
        self._held: tuple = ()         # the captured buffers, held by each replay's Completion
        self._standing: dict = {}      # raw stream handle -> Standing: accesses registered on it
        self._ordered = None           # (stream handle, registry_version()) after the last replay
        self._streams: dict = {}       # raw stream handle -> its torch stream
        self._keep: list = []          # the captured buffers, alive as long as the graph
        self._seen: set = set()
        self._written: list = []       # (StorageState, view): written once the graph has run (S14)
        self._shadows: dict = {}       # id(state) -> its copy with this capture's writes marked
        self._complete = False         # the capture ended without an error
        self._graph = None             # the torch.cuda.CUDAGraph
        self._stream: int | None = None   # raw handle of the capturing stream
        self._device: int | None = None   # index of the GPU being captured
        self.pdl = False               # its launches use programmatic dependent launch (set by capturing)
        self._freezes = -1             # StorageState.freezes when its writes were last found unfrozen

    # -- what the launches inside the capture tell the graph -------------------------------

    def admit(self, kernel_name: str, backend: str) -> None:
        """Refuse a launch the graph could not replay: it would run once now, or not at all."""
        if backend != self.backend:
            raise LaunchError(f"`{kernel_name}` runs on the {backend} backend, which ts.graph() cannot capture: "
                              "it would run once now and never at g.replay()",
                              help=f"capture launches on the {self.backend} backend, or launch this one outside "
                                   "the `with ts.graph()` block")
        if not self._on_capture_stream():
            raise LaunchError(f"`{kernel_name}` is launched on another stream than the one ts.graph() captures: "
                              "it would run once now and never at g.replay()",
                              help="launch it on the capture's own stream inside ts.graph(), or outside the "
                                   "`with ts.graph()` block")

    def admit_arguments(self, kernel_name: str, bound) -> None:
        """Refuse a launch whose tensors live on another device than the capture's: it would
        run on that device's stream, once now and never at replay."""
        for name, f in bound.tensors.items():
            device = f.tensor._torch().device if f.tensor is not None else None
            if device is not None and not self._on_capture_device(device):
                raise LaunchError(f"argument `{name}` of `{kernel_name}` is on {device}, but ts.graph() captures "
                                  f"{self._device_name()}: the launch would run once now and never at g.replay()",
                                  help="capture launches on one device, in a `with ts.graph()` block entered "
                                       "with that device current (torch.cuda.device(...))")

    def record(self, tensor, is_write: bool) -> None:
        """Called by a launch during capture: the replay reads/writes this tensor."""
        key = (tensor._byte_set(), is_write)
        if key not in self._seen:     # 22 layers reuse a few buffers: register each once
            self._seen.add(key)
            self._accesses.append((tensor, is_write))
            self._keep.append(tensor._torch())

    def defer_written(self, state, view) -> None:
        """A captured launch writes every byte of `view`: true once the graph has run (S14)."""
        if state.init_mask is None:
            return                    # already all written: nothing to defer
        self._written.append((state, view))
        shadow = self._shadows.get(id(state))
        if shadow is None:            # a copy, so that the real state stays as it is
            shadow = copy.copy(state)
            shadow.init_mask = state.init_mask.clone()
            self._shadows[id(state)] = shadow
        shadow.mark_written(view)

    def is_written(self, state, view) -> bool:
        """S14 inside the capture: written before it, or by a launch captured before this one."""
        shadow = self._shadows.get(id(state))
        return (shadow if shadow is not None else state).is_written(view)

    # -- replay ----------------------------------------------------------------------------

    @serialized
    def replay(self) -> Future:
        """Run the captured work again on the current stream; returns a Future."""
        if graph_var.get() is not None:
            raise LaunchError("g.replay() is not allowed while capturing ts.graph()", loc=caller_loc(),
                              help="replay the graph before or after the `with ts.graph()` block")
        if not self._complete:
            raise LaunchError("this graph cannot be replayed: its capture did not complete", loc=caller_loc(),
                              help="fix the error raised inside the `with ts.graph()` block and capture again")
        if self._freezes != StorageState.freezes:   # bytes it writes may have been frozen since the capture
            self._refuse_frozen_writes()
        done = self._replay_on_device()
        if self._written:                    # the first replay writes what the capture recorded
            for state, view in self._written:
                state.mark_written(view)
            self._written, self._shadows = [], {}
        self._stand(done)
        return Future((), done)

    def _refuse_frozen_writes(self) -> None:
        """A replay writes again what the capture wrote: refused where ts.freeze froze those
        bytes since (a PDL launch may read frozen bytes before it waits, runtime/freeze.py)."""
        for state, byteset, is_write in self._merged:
            if is_write and state.frozen_meets(byteset):
                raise OwnershipError("this graph writes memory frozen (ts.freeze) since its capture, and frozen "
                                     "memory is never written again", loc=caller_loc(),
                                     help="capture the graph again with other output tensors, or freeze a copy")
        self._freezes = StorageState.freezes

    def _seal(self) -> None:
        """The capture completed: merge its accesses per storage, once."""
        self._merged = merged_accesses(self._accesses)
        self._held = tuple(self._keep)
        self._complete = True

    def _stand(self, done: Completion) -> None:
        """Leave the replay's accesses pending: registered once per stream, then O(1)."""
        standing = self._standing.get(done.stream)
        if standing is None:
            standing = self._standing[done.stream] = Standing(done.stream, done)
            for state, byteset, is_write in self._merged:
                state.stand(byteset, is_write, standing)
        standing.latest = done
        registry_changed()                   # other graphs' replays must order after this one
        self._ordered = (done.stream, registry_version())

    def _order_before(self, stream: int) -> None:
        """S10: make `stream` wait for conflicting pending work of other streams. Skipped when
        no registry gained pending work since this graph's last replay on `stream`: that
        replay was ordered after everything pending then, and this one follows it."""
        if self._ordered == (stream, registry_version()):
            return
        for state, byteset, is_write in self._merged:
            # A state whose pending work all runs on this stream is ordered by the stream: skipped
            # without a look at its entries (a weight holds one standing entry per graph, so
            # walking them made every replay after another graph's cost ~1 ms in serving).
            if state._pending and state.pending_stream != stream:
                state.order_device(byteset, is_write, stream)

    # -- the device: a CUDA graph (a test may stand in another) -----------------------------

    @contextlib.contextmanager
    def _capture_on_device(self):
        import torch
        self._device = torch.cuda.current_device()
        torch.cuda.synchronize()
        device_synchronized(self._device)   # launches issued before: done, no polling
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._stream = torch.cuda.current_stream().cuda_stream
            yield

    def _on_capture_stream(self) -> bool:
        import torch
        return torch.cuda.current_stream().cuda_stream == self._stream

    def _on_capture_device(self, device) -> bool:
        return device.type == "cuda" and (device.index if device.index is not None else 0) == self._device

    def _device_name(self) -> str:
        return f"cuda:{self._device}"

    def _replay_on_device(self) -> Completion:
        stream, stream_obj = self._current_stream()
        self._order_before(stream)
        return self._launch(stream, stream_obj)

    def _current_stream(self) -> tuple:
        """(raw handle, torch stream) of the stream a replay runs on: the current stream of
        the captured device (torch replays there)."""
        import torch
        handle = torch._C._cuda_getCurrentRawStream(self._device)
        stream_obj = self._streams.get(handle)
        if stream_obj is None:               # looked up once per stream
            stream_obj = self._streams[handle] = torch.cuda.current_stream(self._device)
        return handle, stream_obj

    def _launch(self, stream: int, stream_obj) -> Completion:
        """Replay the CUDA graph; its event is recorded only when something waits (as a launch's)."""
        self._graph.replay()
        return Completion(None, stream, self._held, stream_obj)


def graph(pdl: bool | None = None) -> contextlib.AbstractContextManager:
    """Capture the launches inside into a CUDA graph: `with ts.graph() as g: ...; g.replay()`.
    `pdl=True` captures them with programmatic dependent launch (None: as the launches around
    it, `ts.pdl()` or TILESAFE_PDL): each kernel's launch overlaps the end of the one before it."""
    import torch
    if not torch.cuda.is_available():
        raise LaunchError("ts.graph() needs a CUDA GPU", loc=caller_loc(), help="run eagerly on this machine")
    return capturing(Graph(), pdl)


def capturing(g: Graph, pdl: bool | None = None) -> contextlib.AbstractContextManager:
    """Make launches record into `g` for the body of the `with` block (`pdl`: as `graph`'s)."""
    if graph_var.get() is not None:
        raise LaunchError("ts.graph() captures cannot be nested", loc=caller_loc(),
                          help="end the outer capture first; replay several graphs one after the other")
    if pdl is not None and not isinstance(pdl, bool):
        raise LaunchError(f"ts.graph(pdl={pdl!r}): pdl must be True, False or None (TILESAFE_PDL decides)",
                          loc=caller_loc(), help="with ts.graph(pdl=True) as g: ...")
    g.pdl = pdl_launches() if pdl is None else pdl    # what its launches use (a bad TILESAFE_PDL raises here)
    return _capture(g)


@contextlib.contextmanager
def _capture(g: Graph):
    # The capture holds the runtime lock throughout: another thread's launches or host
    # waits would otherwise run eagerly in the middle of it (see host_lock).
    global _captures_running
    with LOCK:
        token = graph_var.set(g)
        pdl_token = pdl_var.set(override_of_pdl(g.pdl))
        _captures_running += 1
        try:
            with g._capture_on_device():
                yield g
            g._seal()
        finally:
            graph_var.reset(token)
            pdl_var.reset(pdl_token)
            _captures_running -= 1
            if not _captures_running:
                _RELEASE_AFTER_CAPTURE.clear()    # the capture has ended: free what was dropped in it


def refuse_in_capture(what: str) -> None:
    """S12: allocations and host syncs are errors while a graph is being captured."""
    if graph_var.get() is not None:
        raise OwnershipError(f"{what} is not allowed while capturing ts.graph()", loc=caller_loc(),
                             help="allocate buffers before the capture and pass them in (library "
                                  "functions take out=); read results after g.replay()")


def refuse_allocation(fn: str, name: str = "out") -> None:
    """S12 for library calls: a call that would allocate its output `name` inside a capture."""
    if graph_var.get() is not None:
        raise OwnershipError(f"{fn}: allocating its output `{name}` is not allowed while capturing ts.graph()",
                             loc=caller_loc(),
                             help=f"allocate the output before the capture and pass it as {name}=...")
