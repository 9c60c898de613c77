"""prepared_launch.LayoutLauncher.direct (parameter -> object dictionaries) and the positional
form the written-out layouts call (`_direct`, in `names`' order) start the same launch: the
argument tuple of this launch's memory, the passed output as the future's result and S9's
pending registrations (CPU stand-ins for the CUDA stream)."""
import torch
from runtime_helpers import on_stream_7

import tilesafe as ts
from tilesafe.runtime import binding
from tilesafe.runtime.prepared_launch import LayoutLauncher


@ts.kernel
def copy_in(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) + 1.0)


def test_the_dictionary_and_the_positional_forms_start_the_same_launch(monkeypatch):
    on_stream_7(monkeypatch)
    started, made, launcher = [], [], None
    for form in ("dictionaries", "positional", "dictionaries"):
        # torch's memory (all written): `direct` takes tensors whose memory tracks no initialisation
        x = ts.from_torch(torch.arange(8, dtype=torch.float32))
        z = ts.from_torch(torch.empty(8))
        p = z.partition((4,))
        if launcher is None:
            bound = binding.bind(copy_in, (p, x), {}, None, False)
            launcher = LayoutLauncher(copy_in.specializer.compiled(bound, "reference"), bound,
                                      lambda stream, args: started.append((stream, args)),
                                      lambda bound, views: tuple(v.data_ptr() for v in views.values()),
                                      torch.device("cuda", 0))
        assert launcher.names == ("z", "x")
        ptrs = {"z": z._torch().data_ptr(), "x": x._torch().data_ptr()}
        if form == "dictionaries":
            future = launcher.direct({"z": z, "x": x}, {"z": p, "x": x}, ptrs)
        else:
            future = launcher._direct(launcher, z, x, p, x, ptrs["z"], ptrs["x"])
        assert started[-1] == (7, (ptrs["z"], ptrs["x"]))          # this launch's memory, in order
        assert future.results() is p                               # the passed output
        assert [(a.is_write, a.future.stream) for a in z._state._pending][-1] == (True, 7)
        assert [(a.is_write, a.future.stream) for a in x._state._pending][-1] == (False, 7)
        made.append(z._state._pending[-1].future)
        p.unpartition()
    for done in made:                                              # the stand-in work is over
        done._finish()
