"""Programmatic dependent launch as a launch mode: `ts.pdl()`, `ts.graph(pdl=True)`, TILESAFE_PDL.

PDL itself needs a Hopper GPU (tests/gpu/test_pdl_gpu.py runs it); what is tested here is
host-side: the choice is part of the specialization key (a PDL launch never runs plain code
or the reverse, whatever cached plan exists), a choice other than the environment's takes
the full launch path, results do not change, the CPU backends ignore it, and bad switches
are refused at the user's line. The generated code's wait is checked in tests/triton/test_pdl_ptx.py.
"""
import contextlib
import sys

import numpy as np
import pytest

import tilesafe as ts
from tilesafe.runtime.future import Completion
from tilesafe.runtime.graph import Graph, capturing
from tilesafe.settings import Settings, pdl_var

settings = sys.modules["tilesafe.settings"]   # the module: `tilesafe.settings` is the Settings object
N, B = 100, 32            # ragged: the last tile is partly outside


def fresh_scale():
    """A new kernel each test: no specialization or plan of an earlier test serves it."""
    @ts.kernel
    def scale(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int, a: float):
        z.store(ts.load_tile_like(x, z) * a)
    return scale


@pytest.fixture
def scale():
    return fresh_scale()


def here() -> int:
    return sys._getframe(1).f_lineno


def env(**values) -> Settings:
    return Settings.from_env({"TILESAFE_CACHE_DIR": str(settings.SETTINGS.cache_dir), **values})


def inputs(seed=0):
    values = np.random.default_rng(seed).standard_normal(N).astype(np.float32)
    return ts.tensor(values), values


def poisoned():
    return ts.full((N,), np.nan)


def spy_codes(kernel, monkeypatch) -> list:
    """Wrap the launch of every compiled specialization of `kernel`: the list gets, per
    launch, whether the code that ran was specialized for PDL (its key's schedule)."""
    ran = []
    for key, code in kernel.specializer.code.items():
        pdl = key[-1] is not None and key[-1].pdl
        real = code.launch
        monkeypatch.setattr(code, "launch", lambda bound, real=real, pdl=pdl: (ran.append(pdl), real(bound))[1])
    return ran


def run(scale, x, a=2.0):
    z = poisoned()
    scale(z.partition((B,)), x, a=a).sync()
    return z


class StandInGraph(Graph):
    """A `Graph` whose device part is a stand-in (as in test_graph_capture.py): launches run
    on a CPU backend at once, on the capture's stream and device."""

    def __init__(self, backend: str):
        super().__init__()
        self.backend = backend

    @contextlib.contextmanager
    def _capture_on_device(self):
        yield

    def _on_capture_stream(self) -> bool:
        return True

    def _on_capture_device(self, device) -> bool:
        return True

    def _replay_on_device(self) -> Completion:
        return Completion()


# -- the switch ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, value", [("", False), ("0", False), ("off", False), ("1", True), ("yes", True)])
def test_tilesafe_pdl_is_an_on_off_switch(text, value):
    assert env(TILESAFE_PDL=text).pdl is value


def test_a_bad_tilesafe_pdl_is_an_error_at_the_first_launch(monkeypatch, backend, scale):
    monkeypatch.setattr(settings, "SETTINGS", env(TILESAFE_PDL="sometimes"))
    x, _ = inputs()
    z = poisoned()
    line = here() + 2
    with pytest.raises(ts.LaunchError) as info:
        scale(z.partition((B,)), x, a=1.0)
    assert info.value.message == "the environment variable TILESAFE_PDL='sometimes' is not an on/off switch"
    assert info.value.loc.file == __file__ and info.value.loc.line == line
    assert "TILESAFE_PDL=1" in info.value.help


def test_ts_pdl_and_graph_pdl_refuse_a_non_bool(backend):
    line = here() + 2
    with pytest.raises(ts.LaunchError) as info:
        with ts.pdl("yes"):
            pass
    assert info.value.message == "ts.pdl('yes'): the switch must be True or False"
    assert info.value.loc.file == __file__ and info.value.loc.line == line
    line = here() + 2
    with pytest.raises(ts.LaunchError) as info:
        capturing(StandInGraph(backend), pdl=1)
    assert info.value.message == "ts.graph(pdl=1): pdl must be True, False or None (TILESAFE_PDL decides)"
    assert info.value.loc.file == __file__ and info.value.loc.line == line
    assert pdl_var.get() is None


# -- the choice is in the key; results unchanged -----------------------------------------------
def test_a_pdl_launch_runs_pdl_code_and_a_plain_launch_plain_code_whatever_was_cached(backend, monkeypatch, scale):
    x, values = inputs()
    for _ in range(2):                         # plain: the fast paths now hold plain plans
        np.testing.assert_array_equal(run(scale, x).numpy(), values * 2.0)
    with ts.pdl():
        assert pdl_var.get() is True
        np.testing.assert_array_equal(run(scale, x).numpy(), values * 2.0)
    assert pdl_var.get() is None
    keys = [key[-1] for key in scale.specializer.code if key[1] == backend]
    assert any(s is not None and s.pdl for s in keys) and any(s is None or not s.pdl for s in keys)
    ran = spy_codes(scale, monkeypatch)
    z = poisoned()
    part = z.partition((B,))
    scale(part, x, a=3.0).sync()              # the same objects twice: the repeat takes the fast path
    scale(part, x, a=3.0).sync()
    assert ran and not any(ran)
    ran.clear()
    with ts.pdl():
        scale(part, x, a=3.0).sync()          # the same objects again: a cached plain plan must not serve it
        scale(part, x, a=3.0).sync()
        y = run(scale, inputs(1)[0], a=0.5)   # a new layout's objects: PDL too
    assert ran == [True, True, True]
    ran.clear()
    scale(part, x, a=3.0).sync()               # plain again, not the PDL launch's code
    assert ran and not any(ran)
    np.testing.assert_array_equal(part.unpartition().numpy(), values * 3.0)
    np.testing.assert_array_equal(y.numpy(), inputs(1)[1] * 0.5)


def test_the_cpu_backends_ignore_pdl(backend, scale):
    x, values = inputs()
    z = poisoned()
    with ts.pdl():
        compiled = scale.compile(z.partition((B,)), x, a=1.0, schedule=ts.schedule(pdl=True))
        np.testing.assert_array_equal(run(scale, x, a=-1.0).numpy(), -values)
    if backend == "triton-interpreter":       # the interpreter has no grid dependency control: a plain launch
        assert not compiled.pdl and "launch_pdl" not in compiled.options and "gdc_" not in compiled.source


def test_under_tilesafe_pdl_launches_keep_their_fast_paths(backend, monkeypatch, binds, scale):
    monkeypatch.setattr(settings, "SETTINGS", env(TILESAFE_PDL="1"))
    x, values = inputs()
    for _ in range(3):
        np.testing.assert_array_equal(run(scale, x).numpy(), values * 2.0)
    assert binds[0] == 1                       # checked in full once: the layout cache took the others
    with ts.pdl():                             # the environment's own choice: nothing overridden
        assert pdl_var.get() is None
        run(scale, x)
    assert binds[0] == 1
    with ts.pdl(False):                        # another choice: the full path, its plan not kept
        assert pdl_var.get() is False
        run(scale, x)
        run(scale, x)
    assert binds[0] == 3
    run(scale, x)
    assert binds[0] == 3                       # the environment's plans were kept
    schedules = [key[-1] for key in scale.specializer.code if key[1] == backend]
    assert any(s is not None and s.pdl for s in schedules)


# -- captures ---------------------------------------------------------------------------------
def test_a_capture_with_pdl_specializes_its_launches_for_pdl_and_ends_with_it(backend, monkeypatch, scale):
    x, values = inputs()
    run(scale, x)
    with ts.pdl():
        run(scale, x)                                # the warm-up compiles the PDL code
    ran = spy_codes(scale, monkeypatch)
    z = poisoned()
    with capturing(StandInGraph(backend), pdl=True) as g:
        scale(z.partition((B,)), x, a=2.0)
    assert g.pdl and pdl_var.get() is None and ran == [True]
    with capturing(StandInGraph(backend)) as g:              # None: as the launches around it
        scale(z.partition((B,)), x, a=2.0)
    assert not g.pdl and ran == [True, False]
    with ts.pdl():
        with capturing(StandInGraph(backend)) as g:
            scale(z.partition((B,)), x, a=2.0)
        with capturing(StandInGraph(backend), pdl=False) as g2:
            scale(z.partition((B,)), x, a=2.0)
    assert g.pdl and not g2.pdl and ran == [True, False, True, False]
    np.testing.assert_array_equal(z.numpy(), values * 2.0)   # the stand-in ran them at capture
