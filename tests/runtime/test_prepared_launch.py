"""prepared_launch.PreparedLaunch (a repeated launch with the same argument objects on the GPU)
on the CPU, with stand-ins for the current CUDA stream and Triton's launcher: each repeat
starts the compiled kernel with its prebuilt arguments on the current stream, marks what it
wrote (S14) and registers its reads and writes as pending (S9/S10) — the tail every GPU fast
launch shares (runtime/pending_start.py)."""
import numpy as np
import torch
from runtime_helpers import on_stream_7

import tilesafe as ts
from tilesafe.runtime import binding
from tilesafe.runtime.prepared_launch import PreparedLaunch


@ts.kernel
def double(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 2.0)


def test_each_repeat_starts_its_arguments_marks_and_registers(monkeypatch):
    on_stream_7(monkeypatch)
    started = []
    x = ts.tensor(np.arange(8, dtype=np.float32))
    z = ts.empty(8)                                             # unwritten: S14 tracks it
    p = z.partition((4,))
    bound = binding.bind(double, (p, x), {}, None, False)
    compiled = double.specializer.compiled(bound, "reference")
    repeat = PreparedLaunch(compiled, bound, lambda stream, args: started.append((stream, args)),
                            ("the prebuilt", "arguments"), torch.device("cuda", 0))
    assert not z._state.is_written(z._torch())                 # so the first repeat's mark is seen
    made = []
    for _ in range(2):
        future = repeat()
        assert started[-1] == (7, ("the prebuilt", "arguments"))
        assert future.results() is p                            # the output, as a launch returns it
        assert z._state.is_written(z._torch())                 # S14: the launch wrote all of z
        write, read = z._state._pending[-1], x._state._pending[-1]
        assert (write.is_write, write.future.stream) == (True, 7)
        assert (read.is_write, read.future.stream) == (False, 7)
        assert write.byteset == z._byte_set() and read.byteset == x._byte_set()
        assert len(z._state._pending) == 1                      # the repeat's entry replaced the first's
        made.append(write.future)
    p.unpartition()
    for done in made:                                           # the stand-in work is over
        done._finish()
