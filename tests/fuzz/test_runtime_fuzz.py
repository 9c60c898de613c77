"""The host-side runtime fuzzer (issue 15): random sequences of tensor creation, views,
partition/unpartition, launches (on the current or another stream), host reads and writes,
torch hand-overs and DLPack round trips, each checked against runtime_model.Model.

Every step either must be accepted — and then the values read equal the model's — or must
be refused with one of the error classes the model names, changing nothing.
"""
import gc
import weakref

import numpy as np
import pytest
import torch
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import tilesafe as ts

from fuzz_profiles import fuzz_settings
from runtime_model import Model

# Torch writing the unlent bytes of a storage that also has lent bytes is ordinary interop that
# the version counter cannot tell from a write to lent bytes: a warning, by design (S13).
pytestmark = pytest.mark.filterwarnings("ignore:torch modified the storage:RuntimeWarning")

SIZES = st.integers(0, 12)
TILES = st.sampled_from((1, 2, 4, 8))
# Nonzero eighths in [-8, 8]: exact in f32, never the zeros a fresh tensor holds.
VALUES = st.tuples(st.integers(1, 64), st.sampled_from((1.0, -1.0))).map(lambda t: t[0] / 8 * t[1])


@ts.kernel
def twice_plus_one(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 2.0 + 1.0)


@ts.kernel
def plus_one(z: ts.Mut[ts.f32, ("B",)], B: ts.Const[int]):
    z.store(z.load() + 1.0)


def _refused(step, allowed: set[str]):
    """Run `step`; it must raise one of `allowed` (a TileSafeError) or, when `allowed` is empty,
    return normally. Returns (accepted, result)."""
    try:
        result = step()
    except ts.TileSafeError as e:
        assert type(e).__name__ in allowed, f"refused with {type(e).__name__} ({e.message}); model allows {allowed}"
        assert str(e).startswith("error: ") and "help:" in str(e), str(e)
        return False, None
    assert not allowed, f"accepted; the model expected one of {allowed}"
    return True, result


class RuntimeFuzz(RuleBasedStateMachine):
    """The CPU machine. tests/gpu/test_runtime_fuzz_gpu.py runs the same rules on CUDA tensors
    through the hooks below (device, streams, DLPack, torch writes) and adds GPU-only rules."""
    DEVICE = "cpu"

    def __init__(self):
        super().__init__()
        self.model = Model()
        self.handles: list[ts.Tensor] = []           # parallel to model.handles
        self.parts: list[ts.Partition | None] = []   # parallel to model.parts (None: dropped)
        self.torch: list[torch.Tensor] = []          # parallel to model.torch

    # -- helpers ------------------------------------------------------------------------------
    def _add_handle(self, real: ts.Tensor, index: int) -> None:
        assert index == len(self.handles)
        self.handles.append(real)

    def _pick(self, data, n: int, label: str) -> int:
        return data.draw(st.integers(0, n - 1), label=label)

    # -- hooks: what differs on a GPU -------------------------------------------------------------
    def _torch_tensor(self, values: np.ndarray) -> torch.Tensor:
        """A torch tensor of `values` on DEVICE, made by torch (not tilesafe)."""
        return torch.from_numpy(values.copy())

    def _launch_stream(self, on_stream: bool, data):
        """Where a launch runs: the current stream, or another one."""
        return ts.stream() if on_stream else _nothing()

    def _host_copy(self, t: torch.Tensor) -> np.ndarray:
        return t.numpy()

    def _strict_read(self, real: ts.Tensor) -> np.ndarray:
        """A read inside ts.strict_sync(): on CPU nothing is pending, so it needs no implicit wait."""
        with ts.strict_sync():
            return real.numpy()

    def _dlpack(self, t: torch.Tensor, how: str) -> torch.Tensor:
        return torch.from_dlpack(t) if how == "torch" else torch.from_numpy(np.from_dlpack(t))

    def _torch_fill(self, t: torch.Tensor, value: float, data) -> None:
        t.fill_(value)

    # -- making tensors -------------------------------------------------------------------------
    @initialize(n=st.integers(1, 12))
    def first_tensor(self, n):
        """Start with a written tensor, so every rule that needs one is enabled at once."""
        values = (np.arange(n, dtype=np.float32) + 1) / 4
        self._add_handle(ts.tensor(values, device=self.DEVICE), self.model.new_storage(values, written=True))

    @rule(n=SIZES, kind=st.sampled_from(("zeros", "empty", "tensor", "torch")), data=st.data())
    def create(self, n, kind, data):
        if kind in ("tensor", "torch"):
            values = np.array(data.draw(st.lists(VALUES, min_size=n, max_size=n)), np.float32)
            if kind == "torch":        # torch's memory, borrowed; the torch tensor stays usable
                t = self._torch_tensor(values)
                index = self.model.new_storage(values, written=True)
                self._add_torch(t, self.model.handles[index].storage, self.model.handles[index].elems)
                self._add_handle(ts.from_torch(t), index)
                return
            real = ts.tensor(values, device=self.DEVICE)
        elif kind == "zeros":
            values, real = np.zeros(n, np.float32), ts.zeros(n, device=self.DEVICE)
        else:
            values, real = np.zeros(n, np.float32), ts.empty(n, device=self.DEVICE)
        self._add_handle(real, self.model.new_storage(values, written=kind != "empty"))

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), start=st.integers(0, 6), length=st.integers(0, 10), step=st.integers(1, 3))
    def view(self, data, start, length, step):
        h = self._pick(data, len(self.handles), "handle")
        stop = start + length
        ok, real = _refused(lambda: self.handles[h][start:stop:step], self.model.check_view(h))
        if ok:
            elems = self.model.handles[h].elems[start:stop:step]
            self._add_handle(real, self.model.new_handle(self.model.handles[h].storage, elems))

    # -- partitions -----------------------------------------------------------------------------
    @precondition(lambda self: self.handles)
    @rule(data=st.data(), tile=TILES)
    def partition(self, data, tile):
        h = self._pick(data, len(self.handles), "handle")
        ok, real = _refused(lambda: self.handles[h].partition((tile,)), self.model.check_partition(h))
        if ok:
            assert self.model.partition(h, tile) == len(self.parts)
            self.parts.append(real)

    @precondition(lambda self: any(p is not None for p in self.parts))
    @rule(data=st.data())
    def unpartition(self, data):
        p = data.draw(st.sampled_from([i for i, q in enumerate(self.parts) if q is not None]), label="partition")
        ok, back = _refused(self.parts[p].unpartition, self.model.check_unpartition(p))
        if ok:
            assert back is self.handles[self.model.parts[p].handle]
            self.model.end_lending(p)

    @precondition(lambda self: any(p is not None for p in self.parts))
    @rule(data=st.data())
    def drop_partition(self, data):
        """Dropping the last reference to a partition ends its lending (docs/runtime.md)."""
        p = data.draw(st.sampled_from([i for i, q in enumerate(self.parts) if q is not None]), label="partition")
        ref = weakref.ref(self.parts[p])
        self.parts[p] = None
        if ref() is not None:    # a reference cycle holds it: collect (a full collection is slow)
            gc.collect(0)
            if ref() is not None:
                gc.collect()
        assert ref() is None, "a dropped partition stays alive"
        self.model.end_lending(p)

    # -- launches -------------------------------------------------------------------------------
    @precondition(lambda self: any(p is not None for p in self.parts))
    @rule(data=st.data(), with_input=st.booleans(), on_stream=st.booleans(), wait=st.booleans())
    def launch(self, data, with_input, on_stream, wait):
        p = data.draw(st.sampled_from([i for i, q in enumerate(self.parts) if q is not None]), label="partition")
        x = self._pick(data, len(self.handles), "input") if with_input else None
        allowed = self.model.check_launch(p, x, reads_output=x is None)

        def step():
            with self._launch_stream(on_stream, data):
                fut = twice_plus_one(self.parts[p], self.handles[x]) if x is not None else plus_one(self.parts[p])
            return fut.sync() if wait else fut.results()

        ok, out = _refused(step, allowed)
        if ok:
            assert out is self.parts[p]
            self.model.launch(p, x)

    # -- host reads and writes ------------------------------------------------------------------
    @precondition(lambda self: self.handles)
    @rule(data=st.data(), how=st.sampled_from(("numpy", "copy", "strict")))
    def read(self, data, how):
        h = self._pick(data, len(self.handles), "handle")
        real = self.handles[h]

        def step():
            if how == "copy":
                return self._host_copy(real.to_torch(copy=True))
            if how == "strict":
                return self._strict_read(real)
            return real.numpy()

        ok, got = _refused(step, self.model.check_read(h))
        if ok:
            np.testing.assert_array_equal(got, self.model.values(h))

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), value=VALUES, whole=st.booleans())
    def write(self, data, value, whole):
        h = self._pick(data, len(self.handles), "handle")
        handle = self.model.handles[h]
        n = handle.elems.size
        values = np.array(data.draw(st.lists(VALUES, min_size=n, max_size=n)), np.float32) if whole else value

        def step():
            self.handles[h][...] = values

        ok, _ = _refused(step, self.model.check_write(h))
        if ok:
            self.model.write(handle.storage, handle.elems, values)

    # -- torch interop --------------------------------------------------------------------------
    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def hand_to_torch(self, data):
        h = self._pick(data, len(self.handles), "handle")
        ok, t = _refused(lambda: self.handles[h].to_torch(), self.model.check_hand_to_torch(h))
        if ok:
            handle = self.model.handles[h]
            handle.handed = True
            self._add_torch(t, handle.storage, handle.elems)

    @precondition(lambda self: self.torch)
    @rule(data=st.data(), how=st.sampled_from(("torch", "numpy")))
    def dlpack_alias(self, data, how):
        """Another torch tensor over the same memory: DLPack through torch or through NumPy."""
        i = self._pick(data, len(self.torch), "torch tensor")
        t = self.torch[i]
        alias = self._dlpack(t, how)
        a = self.model.torch[i]
        self._add_torch(alias, a.storage, a.elems)

    @precondition(lambda self: self.torch)
    @rule(data=st.data())
    def from_torch(self, data):
        i = self._pick(data, len(self.torch), "torch tensor")
        a = self.model.torch[i]
        self._add_handle(ts.from_torch(self.torch[i]), self.model.new_handle(a.storage, a.elems))

    @precondition(lambda self: self.torch)
    @rule(data=st.data(), value=VALUES)
    def torch_write(self, data, value):
        """Torch writes elements nothing lends, that tilesafe saw written: a legal write whose
        values every later read must show. (Torch writes to lent bytes are detected on a
        best-effort basis through version counters, S13, so the model does not make them.)"""
        i = self._pick(data, len(self.torch), "torch tensor")
        a = self.model.torch[i]
        storage = self.model.storages[a.storage]
        if not a.elems.size or self.model.touches_lent(a.storage, a.elems) or not storage.written[a.elems].all():
            return
        self._torch_fill(self.torch[i], value, data)
        self.model.write(a.storage, a.elems, np.full(a.elems.size, value, np.float32))

    def _add_torch(self, t: torch.Tensor, storage: int, elems: np.ndarray) -> None:
        from runtime_model import TorchAlias
        self.torch.append(t)
        self.model.torch.append(TorchAlias(storage, elems))

    # -- invariants -----------------------------------------------------------------------------
    @invariant()
    def every_readable_handle_shows_the_models_values(self):
        """Accepted steps wrote what the model wrote, and refused steps wrote nothing."""
        self._check_all_values()

    def _check_all_values(self):
        for h, real in enumerate(self.handles):
            if not self.model.check_read(h):
                np.testing.assert_array_equal(real.numpy(), self.model.values(h))

    @invariant()
    def lent_handles_refuse_use(self):
        for h, handle in enumerate(self.model.handles):
            if handle.lent_to is not None or handle.handed:
                _refused(lambda: self.handles[h].shape, {"OwnershipError"})


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


TestRuntimeFuzz = RuntimeFuzz.TestCase
TestRuntimeFuzz.settings = fuzz_settings(60, stateful_step_count=30)
