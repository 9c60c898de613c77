"""The backend registry: backends register by name, the runtime looks them up (issue 16 part 3)."""
import importlib

import numpy as np
import pytest

import tilesafe as ts
from tilesafe.backends import registry
from tilesafe.backends.reference.backend import ReferenceBackend
from tilesafe.runtime import binding
from tilesafe.runtime.execute import execute


@ts.kernel
def double(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 2.0)


def test_the_built_in_backends_are_registered_by_name():
    assert registry.backend_names()[:3] == ("reference", "triton", "triton-interpreter")
    assert isinstance(registry.backend_named("reference"), ReferenceBackend)
    assert registry.backend_named("reference") is registry.backend_named("reference")   # made once


def test_an_unknown_backend_is_refused_at_the_call_naming_the_known_ones():
    z, x = ts.empty(8).partition((4,)), ts.tensor(np.arange(8, dtype=np.float32))
    with pytest.raises(ts.LaunchError) as ei:
        double.compile(z, x, backend="nope")   # E:unknown
    e = ei.value
    assert e.message == "'nope' is not a backend"
    assert e.help.startswith("use one of reference, triton, triton-interpreter")
    assert e.loc.line == _line_of("# E:unknown")


def test_a_registered_backend_compiles_what_the_runtime_asks_for(monkeypatch):
    """A backend added by name is what the specializer uses for that name; the launch it
    returns is run by the runtime (ordering, S14 marks, the Future)."""
    made, compiled = [], []

    class Counting(ReferenceBackend):
        def compile(self, kernel, spec, masks, wide, bound, schedule=None):
            code = super().compile(kernel, spec, masks, wide, bound, schedule)
            compiled.append(kernel.name)
            return code

    def factory(name):
        made.append(name)
        return Counting()

    monkeypatch.setattr(registry, "_factories", dict(registry._factories))
    monkeypatch.setattr(registry, "_made", dict(registry._made))
    monkeypatch.setattr(importlib.import_module("tilesafe.settings"), "_NAMES",
                        dict(importlib.import_module("tilesafe.settings")._NAMES))
    registry.register_backend("counting", factory)
    z, x = ts.empty(8).partition((4,)), ts.tensor(np.arange(8, dtype=np.float32))
    code = double.compile(z, x, backend="counting")
    assert double.compile(z, x, backend="counting") is code
    assert made == ["counting"] and compiled == ["double"]   # the backend and its code are cached
    bound = binding.bind(double, (z, x), {}, None, False)
    out = execute(code, bound).sync()
    np.testing.assert_array_equal(out.unpartition().numpy(), np.arange(8, dtype=np.float32) * 2)


def test_a_registered_backend_is_chosen_by_name_like_a_built_in_one(monkeypatch):
    """`ts.backend(name)` and TILESAFE_BACKEND=name reach a backend registered under `name`
    (they knew only the built-in names before)."""
    settings = importlib.import_module("tilesafe.settings")   # (ts.settings is the Settings object)
    compiled = []

    class Counting(ReferenceBackend):
        def compile(self, kernel, spec, masks, wide, bound, schedule=None):
            compiled.append(kernel.name)
            return super().compile(kernel, spec, masks, wide, bound, schedule)

    monkeypatch.setattr(registry, "_factories", dict(registry._factories))
    monkeypatch.setattr(registry, "_made", dict(registry._made))
    monkeypatch.setattr(settings, "_NAMES", dict(settings._NAMES))
    registry.register_backend("counting-by-name", lambda name: Counting())
    x = ts.tensor(np.arange(8, dtype=np.float32))
    with ts.backend("counting-by-name"):
        out = double(ts.empty(8).partition((4,)), x).sync().unpartition()
    np.testing.assert_array_equal(out.numpy(), np.arange(8, dtype=np.float32) * 2)
    assert compiled == ["double"]
    monkeypatch.setattr(settings, "SETTINGS", settings.Settings.from_env({"TILESAFE_BACKEND": "counting-by-name"}))
    assert settings.current_backend() == "counting-by-name"


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line and "_line_of" not in line)


def test_the_triton_backends_are_kept_by_the_registry_alone():
    """TritonBackend.get answers from the registry (it kept a second cache of its own)."""
    from tilesafe.backends.triton.backend import TritonBackend
    assert TritonBackend.get("triton-interpreter") is registry.backend_named("triton-interpreter")
    assert not hasattr(TritonBackend, "_shared")
