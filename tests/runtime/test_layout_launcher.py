"""prepared_launch.LayoutLauncher (a library call plan's launches on the GPU) on the CPU, with
stand-ins for the current CUDA stream: each launch starts the compiled kernel on the current
stream with the arguments of its own memory, marks what it wrote (S14) and registers its
reads and writes as pending (S9/S10), holding no tensor between launches."""
import numpy as np
import torch
from runtime_helpers import Stream, on_stream_7

import tilesafe as ts
from tilesafe.runtime import binding
from tilesafe.runtime.prepared_launch import LayoutLauncher


@ts.kernel
def double(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 2.0)


def test_each_launch_starts_on_the_current_stream_marks_and_registers(monkeypatch):
    on_stream_7(monkeypatch)
    started = []
    launcher, made = None, []
    for seed in range(2):                                        # new memory each launch, one layout
        x = ts.tensor(np.arange(8, dtype=np.float32) + seed)
        z = ts.empty(8)
        p = z.partition((4,))
        bound = binding.bind(double, (p, x), {}, None, False)
        if launcher is None:
            compiled = double.specializer.compiled(bound, "reference")
            launcher = LayoutLauncher(compiled, bound, lambda stream, args: started.append((stream, args)),
                                      lambda bound, views: tuple(v.data_ptr() for v in views.values()),
                                      torch.device("cuda", 0))
        future = launcher(bound)
        assert started[-1] == (7, (z._torch().data_ptr(), x._torch().data_ptr()))   # this launch's memory
        assert future.results() is p                              # the output, as a launch returns it
        assert z._state.is_written(z._torch())                    # S14: the launch wrote all of z
        writes = [(a.is_write, a.future.stream) for a in z._state._pending]
        reads = [(a.is_write, a.future.stream) for a in x._state._pending]
        assert writes[-1] == (True, 7) and reads[-1] == (False, 7)   # pending on the launch's stream
        made.append(z._state._pending[-1].future)
        p.unpartition()
    for done in made:                                             # the stand-in work is over
        done._finish()


@ts.kernel
def scale(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], k: int, B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * k)


def test_a_layout_gets_a_launcher_per_set_of_scalars_on_their_third_launch(monkeypatch):
    """Launches of a seen layout with new memory go through a LayoutLauncher from the third with
    the same runtime scalars (Triton specializes on an int's value: one launcher per set of
    values); a scalar that changes every launch never makes one."""
    from tilesafe.runtime import launch_cache
    from tilesafe.runtime.execute import execute
    made, used = [], []

    def prepare(compiled, bound):
        made.append(dict(bound.scalars))

        def launcher(b):
            used.append(dict(b.scalars))
            return execute(compiled, b)
        return launcher
    monkeypatch.setattr(launch_cache, "prepare_layout", prepare)
    x = torch.arange(8, dtype=torch.float32)

    def launch(k):
        z = torch.zeros(8)
        with ts.backend("reference"):
            p = ts.from_torch(z).partition((4,))
            scale(p, ts.from_torch(x), k).sync()
            p.unpartition()
        torch.testing.assert_close(z, x * k)
    for k in (5, 6, 7, 8):                                        # a new value every launch
        launch(k)
    assert made == [] and used == []
    for _ in range(5):                                            # one value: seen once, prepared, then launchers
        launch(3)
    assert made == [{"N": 8, "k": 3}] and used == [{"N": 8, "k": 3}] * 3


def test_a_gpu_launch_builds_each_byte_set_once(monkeypatch):
    """execute's GPU path orders the launch and then records it with the same byte sets
    (ordering.byte_sets), instead of building each tensor's twice."""
    from tilesafe.runtime import ordering
    from tilesafe.runtime.tensor import Tensor
    x, z = ts.tensor(np.arange(8, dtype=np.float32)), ts.empty(8)
    p = z.partition((4,))
    bound = binding.bind(double, (p, x), {}, None, False)
    built = []
    real = Tensor._byte_set
    monkeypatch.setattr(Tensor, "_byte_set", lambda self: (built.append(self), real(self))[1])
    sets = ordering.byte_sets(double, bound)
    stream = Stream()
    stream.cuda_stream = 7
    ordering.order_before(double, bound, stream, (), sets)
    future = ordering.record_after(double, bound, stream, (p,), (), sets)
    assert len(built) == 2                                        # z and x, once each
    assert [a.byteset for a in z._state._pending][-1] == sets[0]
    future.completion._finish()                                   # the stand-in work is over
    p.unpartition()


def test_a_launcher_keeps_an_arguments_byte_set_while_its_memory_stays(monkeypatch):
    """The same memory under new handles: the byte set registered is the last launch's own;
    other memory: a new one, that memory's."""
    from tilesafe.runtime.aliasing import byte_set
    on_stream_7(monkeypatch)
    x, other = torch.arange(8, dtype=torch.float32), torch.arange(8, dtype=torch.float32)
    launcher, seen, done = None, [], []
    for source in (x, x, other):
        z = ts.empty(8)
        p = z.partition((4,))
        xt = ts.from_torch(source.view(8))                        # a new handle every launch
        bound = binding.bind(double, (p, xt), {}, None, False)
        if launcher is None:
            compiled = double.specializer.compiled(bound, "reference")
            launcher = LayoutLauncher(compiled, bound, lambda stream, args: None,
                                      lambda bound, views: (), torch.device("cuda", 0))
        launcher(bound)
        access = xt._state._pending[-1]
        assert access.byteset == byte_set(source)
        seen.append(access.byteset)
        done.append(access.future)
        p.unpartition()
    assert seen[1] is seen[0] and seen[2] is not seen[1]
    for d in done:                                                # the stand-in work is over
        d._finish()
