"""Call plans' fast form (kernels/call_hits.py, runtime/planned_launch.py): from the third call
of a layout a library call borrows known memory without `from_torch`, checks S7 once per call
and starts each launch from the roots; every refusal a fresh call makes is still made —
class, message, the user's line, nothing written — when only the memory's facts change
between calls of one layout: two storages over the same bytes, bytes lent through another
handle, unwritten memory, another alignment class. On a GPU a launch takes the call's
addresses in a prebuilt argument tuple and registers each access as pending (CPU stand-ins)."""
import pytest
import torch

import tilesafe as ts
import tilesafe.kernels as tk
from call_helpers import assert_located, assert_unchanged, marker_line, snapshot
from tilesafe.kernels import call_plans
from tilesafe.runtime import future, planned_launch
from tilesafe.runtime.planned_launch import PlannedLaunch
from tilesafe.runtime.storage_state import StorageState

HERE = __file__


def _rand(shape, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) * 2 - 1).to(device)


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _on_the_cpu(backend) -> None:
    """These build their memory facts with numpy views of CPU storage; the GPU form has its own
    refusal tests (tests/gpu/test_call_hits_gpu.py)."""
    if backend == "triton":
        pytest.skip("CPU storage facts (numpy views); the GPU form: tests/gpu/test_call_hits_gpu.py")


def test_a_hit_borrows_known_memory_and_launches_from_its_roots(backend, device, counted):
    from tilesafe.bench.observe import Observer
    w, x, o = _rand((32,), 1, device), torch.empty(2, 32, device=device), torch.empty(2, 32, device=device)
    for seed in range(5):                                         # record, redo, then the fast form
        x.copy_(_rand((2, 32), seed, device))
        got = tk.rms_norm(x.view(2, 32), w.view(32), out=o.view(2, 32))   # new objects, same memory
        torch.testing.assert_close(got, _rms(x, w), rtol=2e-4, atol=2e-5)
        if seed == 2:
            counted[:] = [0, 0]
    assert counted == [0, 2]                                      # no borrow: the storages' states were known
    kernel = next(p for p in tk.rms_norm.plans.plans.values() if p.hit).steps[-1].kernel
    with Observer([kernel]) as seen:
        tk.rms_norm(x, w, out=o)
    assert kernel.name in seen                                    # the launch is on record (bench/observe)
    y = tk.rms_norm(x, w)                                         # the eager form: a new result each call
    for _ in range(3):
        z = tk.rms_norm(x, w)
        assert z.data_ptr() != y.data_ptr()                       # y is alive: new memory, not y's
        torch.testing.assert_close(z, _rms(x, w), rtol=2e-4, atol=2e-5)


def test_two_storages_over_the_same_bytes_are_refused_as_a_first_call_is(backend):
    """The key sees two storages; their memory overlaps, so the views meet unlike in the
    recorded call: the whole-call check runs and refuses."""
    _on_the_cpu(backend)
    w = _rand((32,), 1)
    for seed in range(3):
        tk.rms_norm(_rand((1, 32), seed), w, out=torch.zeros(1, 32))
    base = _rand((64,), 9)
    x = base[0:32].view(1, 32)
    out = torch.from_numpy(base.numpy()[16:48]).view(1, 32)      # another storage, half over x
    assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    before = snapshot(base, w)
    with pytest.raises(ts.AliasError) as e:
        tk.rms_norm(x, w, out=out)  # hit-two-storages
    assert e.value.message == "rms_norm: `out` shares memory with the input `x`"
    assert_located(e.value, HERE, "hit-two-storages")
    assert_unchanged(before, base, w)


def test_an_out_lent_through_another_handle_is_refused_as_a_first_call_is(backend):
    _on_the_cpu(backend)
    w, x = _rand((32,), 1), _rand((2, 32), 2)
    for _ in range(3):
        tk.rms_norm(x, w, out=torch.zeros(2, 32))
    out = torch.full((2, 32), 7.0)
    lent = ts.from_torch(out).partition((1, 32))  # hit-lent-here
    with pytest.raises(ts.OwnershipError) as e:
        tk.rms_norm(x, w, out=out)  # hit-lent-call
    assert e.value.message == (f"cannot partition this tensor: its bytes are lent to a partition "
                               f"(lent at {HERE}:{marker_line(HERE, 'hit-lent-here')})")
    assert_located(e.value, HERE, "hit-lent-call")
    assert (out == 7.0).all()
    lent.unpartition()
    torch.testing.assert_close(tk.rms_norm(x, w, out=out), _rms(x, w), rtol=2e-4, atol=2e-5)


def test_the_gpu_form_refuses_a_frozen_out_and_reads_a_frozen_input(monkeypatch, gpu_form_launching_nothing,
                                                                     stand_in_stream):
    """S18 on the GPU form (stand-ins): an `out=` in memory frozen after the plan was made is
    refused as a first call refuses it; a frozen input is read as before."""
    tk.rms_norm.plans.plans.clear()
    launched = []
    real_run = PlannedLaunch.run

    def finish(*tensors):                                          # the stand-in work is over
        for t in tensors:
            for access in StorageState.of(t)._pending:
                getattr(access.future, "_finish", lambda: None)()
    monkeypatch.setattr(PlannedLaunch, "run", lambda self, roots: launched.append(real_run(self, roots)) or
                        launched[-1])
    with ts.backend("reference"):
        w, x, outs = _rand((32,), 1), _rand((2, 32), 2), [torch.zeros(2, 32) for _ in range(4)]
        for out in outs[:3]:
            tk.rms_norm(x, w, out=out)
            finish(x, w, out)                                       # (each call's, before the next replaces it)
        assert launched[-1] is True                                 # the GPU form ran
        ts.freeze(w)
        tk.rms_norm(x, w, out=outs[3])
        finish(x, w, outs[3])
        assert launched[-1] is True                                 # a frozen input: still the GPU form
        frozen = ts.freeze(torch.full((2, 32), 7.0))
        with pytest.raises(ts.OwnershipError) as e:
            tk.rms_norm(x, w, out=frozen)  # hit-frozen
        assert launched[-1] is False                                # the plan's launch declined it
    assert "its bytes are frozen (ts.freeze)" in e.value.message
    assert_located(e.value, HERE, "hit-frozen")
    assert (frozen == 7.0).all()
    tk.rms_norm.plans.plans.clear()                               # no later test meets a stand-in's plan


def test_unwritten_memory_handed_to_torch_is_refused_by_a_hit(backend):
    _on_the_cpu(backend)
    w = _rand((32,), 1)
    for seed in range(3):
        tk.add(_rand((2, 32), seed), w.expand(2, 32).contiguous())
    handed = ts.empty((2, 32)).to_torch()                         # unwritten, handed to torch
    with pytest.raises(ts.OwnershipError) as e:
        tk.add(handed, w.expand(2, 32).contiguous())  # hit-unwritten
    assert "came from ts.empty and has not been written" in e.value.message
    assert_located(e.value, HERE, "hit-unwritten")
    handed.fill_(0.25)                                            # torch writes it: its counter moves
    torch.testing.assert_close(tk.add(handed, w.expand(2, 32)), handed + w)


def test_another_alignment_class_takes_the_full_step_and_computes_right(backend, counted):
    _on_the_cpu(backend)
    w, base = _rand((48,), 1), _rand((145,), 2)                  # a layout no other test launches
    for _ in range(4):
        tk.rms_norm(base[0:144].view(3, 48), w)
    counted[:] = [0, 0]
    shifted = base[1:145].view(3, 48)                             # 4 bytes on: another 16-byte class
    torch.testing.assert_close(tk.rms_norm(shifted, w), _rms(shifted, w), rtol=2e-4, atol=2e-5)
    assert counted[1] == 0                                        # not launched on the aligned verdicts


def test_a_two_launch_call_with_a_workspace_computes_right_every_call(backend):
    _on_the_cpu(backend)
    for seed in range(5):
        x = _rand((3, 70), seed)
        assert torch.equal(tk.argmax(x), x.argmax(-1).to(torch.int32))


def test_a_workspace_the_call_allocates_itself_is_kept_for_its_next_calls(backend):
    """A workspace only the call's own launches see (decode_attention without `workspace=`) is
    allocated by the fast form's first call and used again by the next ones, as a caller's
    `workspace=` is; every call still computes its own result."""
    _on_the_cpu(backend)
    k, v = _rand((2, 16, 8), 1), _rand((2, 16, 8), 2)
    tk.decode_attention.plans.plans.clear()                       # only this backend's plan below
    seen = []
    for seed in range(6):
        q = _rand((4, 8), 10 + seed)
        got = tk.decode_attention(q, k, v, torch.tensor([11], dtype=torch.int32))
        scores = torch.einsum("hd,hsd->hs", q, k.repeat_interleave(2, 0)[:, :11]) / 8 ** 0.5
        want = torch.einsum("hs,hsd->hd", scores.softmax(-1), v.repeat_interleave(2, 0)[:, :11])
        torch.testing.assert_close(got, want, rtol=2e-4, atol=2e-5)
        kept = [root[2] for p in tk.decode_attention.plans.plans.values() if p.hit for root in p.hit.kept.values()]
        if kept:
            seen.append(kept)
    assert len(seen) >= 3 and all(s == seen[0] for s in seen)      # the same workspace addresses every call


def test_the_gpu_form_starts_with_the_call_addresses_and_registers_each_access(monkeypatch, no_sweeps,
                                                                               stand_in_stream):
    """On a GPU a fast launch fills the call's addresses into the layout's argument tuple and
    registers each argument's bytes as pending on the current stream (S9/S10), with byte sets
    made again when the memory moved. Stand-ins for the stream and Triton's launcher."""
    started = []

    def prepare(self, bound):              # what TritonLaunch.layout_slots gives: a slot per address
        self.start = lambda stream, args: started.append((stream, args))
        self.values = (None,) * len(self.access) + ("a fact of the layout",)
        self.pointers = tuple((k, k) for k in range(len(self.access)))
        self.descriptors, self.device_index = (), 0
        return planned_launch._GPU
    monkeypatch.setattr(PlannedLaunch, "_prepare", prepare)
    tk.rms_norm.plans.plans.clear()                               # plans made here, with the stand-ins
    done = []
    with ts.backend("reference"):
        w = _rand((32,), 1)
        for seed in range(5):
            x, out = _rand((2, 32), seed), torch.zeros(2, 32)
            tk.rms_norm(x, w, out=out)
            if not started:
                continue
            stream, args = started.pop()
            assert stream == 7 and args[-1] == "a fact of the layout"
            assert sorted(args[:-1]) == sorted([x.data_ptr(), w.data_ptr(), out.data_ptr()])
            for t, write in ((x, False), (w, False), (out, True)):
                access = StorageState.of(t)._pending[-1]
                assert (access.is_write, access.future.stream) == (write, 7)
                assert (access.byteset.start, access.byteset.end) == (t.data_ptr(), t.data_ptr() + t.nbytes)
                done.append(access.future)
        assert len(done) == 3 * 3                                  # calls 3, 4 and 5 took the GPU form
    for d in done:                                                 # the stand-in work is over
        d._finish()
    tk.rms_norm.plans.plans.clear()                               # no later test meets a stand-in's plan


class _Pending:
    """A stand-in launch on raw stream `stream` that is still running."""
    def __init__(self, stream):
        self.stream, self.event = stream, ("event of stream", stream)

    def done(self):
        return False

    def ready_event(self):
        return self.event


def test_the_gpu_form_orders_after_other_streams_work_only(monkeypatch, gpu_form_launching_nothing):
    """S10 on the GPU form: a pending write of another stream to an argument's bytes makes the
    launch's stream wait for it; pending work all on the launch's own stream needs no ordering
    (the stream runs it first), so none is looked for."""
    waited, ordered = [], []

    class Stream:                              # a stand-in stream that records what it waits for
        device_index = None

        def wait_event(self, event):
            waited.append(event)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    real_order = StorageState.order_device
    monkeypatch.setattr(StorageState, "order_device",
                        lambda self, *a: (ordered.append(a[2]), real_order(self, *a))[1])

    tk.rms_norm.plans.plans.clear()

    def finish(*tensors):                                          # the stand-in work is over
        for t in tensors:
            for access in StorageState.of(t)._pending:
                getattr(access.future, "_finish", lambda: None)()
    with ts.backend("reference"):
        w = _rand((32,), 1)
        for seed in range(3):                                      # the third call takes the GPU form
            x, out = _rand((2, 32), seed), torch.zeros(2, 32)
            tk.rms_norm(x, w, out=out)
            finish(x, out)
        for stream, waits in ((9, [("event of stream", 9)]), (7, [])):
            x, out = _rand((2, 32), 5), torch.zeros(2, 32)
            ts.from_torch(x)._state.record(ts.from_torch(x)._byte_set(), True, _Pending(stream))
            waited.clear(), ordered.clear()
            tk.rms_norm(x, w, out=out)
            assert waited == waits
            assert 7 in ordered if waits else ordered == []
            finish(x, out)
        finish(w)
    tk.rms_norm.plans.plans.clear()


def test_the_argument_tuple_of_a_layout_leaves_out_the_launch_memory(monkeypatch):
    """TritonLaunch.layout_slots: the addresses (and descriptors) are the call's, everything
    else is the launch's own values; the tuple keeps no tensor of the launch alive."""
    from tilesafe.backends.triton.backend import TritonLaunch, launch_values
    from tilesafe.runtime import binding

    @ts.kernel
    def double(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
        z.store(ts.load_tile_like(x, z) * 2.0)
    monkeypatch.setattr(TritonLaunch, "direct", lambda self, counters=None: (
        "start", tuple(launch_values(self.gen, self.bound, self.tensors, self.grid, None))))
    x, z = ts.tensor(torch.arange(8, dtype=torch.float32)), ts.empty(8)
    p = z.partition((4,))
    bound = binding.bind(double, (p, x), {}, None, False)
    call = double.specializer.compiled(bound, "triton-interpreter").launch(bound)
    start, values, pointers, descriptors = call.layout_slots()
    full = launch_values(call.gen, bound, call.tensors, call.grid, None)
    assert start == "start" and descriptors == ()
    assert sorted(param for _, param in pointers) == ["x", "z"]
    for i, param in pointers:
        assert values[i] is None and full[i] is call.tensors[param]
    assert all(v == full[i] for i, v in enumerate(values) if i not in dict(pointers))
    assert not any(isinstance(v, torch.Tensor) for v in values)
    _, fill = call.relauncher()                                   # the launch cache's LayoutLauncher fills it
    filled = fill(bound, call.tensors)
    assert [filled[i] for i, _ in pointers] == [call.tensors[param].data_ptr() for _, param in pointers]
    assert all(v == full[i] for i, v in enumerate(filled) if i not in dict(pointers))
    p.unpartition()


@pytest.mark.parametrize("transposed", [False, True], ids=["rows", "columns"])
def test_a_layout_descriptor_is_what_the_full_path_describes(transposed):
    """The GPU form builds a TMA descriptor from its layout's template at the call's address
    (tma.LayoutDescriptor); Triton's launcher must read from it exactly what it reads from the
    full path's `TensorDescriptor`, with and without the descriptor's lowering metadata."""
    pytest.importorskip("triton")
    from triton.backends.nvidia.driver import make_tensordesc_arg
    from tilesafe.backends.triton import tma
    base = torch.zeros(64 * 96 + 8)
    view = base[8:].as_strided((64, 48), (1, 128) if transposed else (96, 1))   # a view inside its storage
    box = (16, 32)
    full = tma.host_descriptor(view, box, transposed)
    shape, strides, block = tma.layout_descriptor(view.shape, view.stride(), box, transposed)
    fast = tma.LayoutDescriptor(tma.Address(view.data_ptr()), shape, strides, block, "zero")
    assert (fast.base.data_ptr(), fast.shape, fast.strides, fast.block_shape, fast.padding) == \
        (full.base.data_ptr(), full.shape, full.strides, full.block_shape, full.padding)
    unlowered = make_tensordesc_arg(fast, None)                    # the base goes in as a pointer
    assert unlowered[0] == view.data_ptr() and unlowered[1:] == make_tensordesc_arg(full, None)[1:]


def test_the_direct_launcher_calls_triton_s_c_launch_as_its_launcher_would():
    """adapter.direct_launcher skips CudaLauncher.__call__ for a kernel without scratch memory:
    the C launch must get exactly the arguments that call gives it (Triton 3.6's order); with
    scratch memory, or launch hooks installed, it goes through the launcher itself."""
    pytest.importorskip("triton")
    from triton import knobs
    from tilesafe.backends.triton import adapter
    calls = []

    class CudaLauncher:              # Triton 3.6's __call__, minus the allocator
        launch_cooperative_grid, launch_pdl = False, True

        def __init__(self, scratch):
            self.global_scratch_size, self.profile_scratch_size = scratch, 0

        def launch(self, *args):
            calls.append(("c", args))

        def __call__(self, gx, gy, gz, stream, function, *args):
            calls.append(("py", None))
            scratch = "scratch" if self.global_scratch_size else None
            self.launch(gx, gy, gz, stream, function, self.launch_cooperative_grid, self.launch_pdl, scratch, None,
                        *args)

    class Kernel:
        function, packed_metadata = 77, (4, 1, 0)

        def __init__(self, scratch):
            self.run = CudaLauncher(scratch)

        def launch_metadata(self, grid, stream, *args):
            return "metadata"

    for scratch in (0, 128):
        start = adapter.direct_launcher(Kernel(scratch), (3, 2, 1))
        start(5, (10, 11))
        through = [kind for kind, _ in calls]
        assert through == (["c"] if not scratch else ["py", "c"])
        assert calls[-1][1] == (3, 2, 1, 5, 77, False, True, "scratch" if scratch else None, None, (4, 1, 0),
                                None, None, None, 10, 11)
        calls.clear()
    hook = lambda metadata: None                                   # noqa: E731 - a profiler's hook
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        adapter.direct_launcher(Kernel(0), (1, 1, 1))(5, (10,))
        assert [kind for kind, _ in calls] == ["py", "c"] and calls[-1][1][10] == "metadata"
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)


def test_loops_of_gpu_form_calls_leave_the_gc_young_count_flat(monkeypatch, gpu_form_launching_nothing,
                                                                stand_in_stream):
    """Python's young-generation count grows with the containers a call leaves alive (and by
    one per tuple(map(...)) or tuple(generator), a CPython quirk); a loop of calls whose count
    keeps growing runs collections. On the GPU form (stand-ins for the stream and Triton's
    launcher, each launch done at once) `out=` calls leave it flat, and eager calls bounded by
    the memory map's queue of weak references (no state kept alive there)."""
    from gc_counts import young_growth
    from tilesafe.runtime import memory_map
    monkeypatch.setattr(future.HOLDING, "add", lambda completion: completion._finish())

    tk.rms_norm.plans.plans.clear()
    with ts.backend("reference"):
        x, w, out = _rand((2, 32), 1), _rand((32,), 2), torch.zeros(2, 32)
        for form, bound, call in (("out=", 5, lambda: tk.rms_norm(x.view(2, 32), w, out=out)),
                                  ("eager", memory_map.PLACE_BATCH, lambda: tk.rms_norm(x.view(2, 32), w))):
            for _ in range(20):
                call()
            grown = young_growth(call, 600, warm=100)
            assert grown <= bound, f"{form}: the young count grew by {grown} over 600 calls"
    tk.rms_norm.plans.plans.clear()


@pytest.mark.parametrize("calls_before", [1, 3])     # the second call (redo) and a hit
def test_a_tensor_handed_over_after_the_key_was_read_is_refused(backend, monkeypatch, calls_before):
    """Another thread may hand a tilesafe tensor to torch between call_key reading its layout
    and the plan launching it: the plan refuses it as the full path does."""
    _on_the_cpu(backend)
    w = _rand((2, 32), 1)
    x = ts.from_torch(_rand((2, 32), 2))
    for _ in range(calls_before):
        tk.add(x, w)
    real = call_plans.call_key

    def racing(*args, **kwargs):
        found = real(*args, **kwargs)
        x.to_torch()                                   # the other thread's hand-over, just after
        return found

    monkeypatch.setattr(call_plans, "call_key", racing)
    with pytest.raises(ts.OwnershipError) as e:
        tk.add(x, w)  # raced-call
    assert e.value.message.startswith("cannot use `dtype`: this tensor was handed to torch at ")
    assert_located(e.value, HERE, "raced-call")
