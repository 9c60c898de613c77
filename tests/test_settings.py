"""Settings: read from the environment at import without failing, checked where first used.

A bad TILESAFE_* value must not break `import tilesafe` (nor `tilesafe --version`, see
tests/test_cli.py); the first launch that needs it raises a LaunchError at the user's line,
with help. Context overrides (`with ts.backend(...)`) never consult the environment.
"""
import os
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest

import tilesafe as ts
from tilesafe.settings import Settings

settings = sys.modules["tilesafe.settings"]   # the module: `tilesafe.settings` is the Settings object

SRC = Path(__file__).resolve().parents[1] / "src"


@ts.kernel
def double(z: ts.Mut[ts.f32, ("B",)], x: ts.Ref[ts.f32, ("N",)], B: ts.Const[int], N: int):
    z.store(ts.load_tile_like(x, z) * 2.0)


def env(**values) -> Settings:
    return Settings.from_env({"TILESAFE_CACHE_DIR": "/tmp/tilesafe-settings-test", **values})


def test_reading_a_bad_environment_does_not_fail():
    s = env(TILESAFE_BACKEND="bogus", TILESAFE_DUMP="maybe", TILESAFE_SANITIZE="2")
    assert (s.backend_text, s.dump_text, s.sanitize_text) == ("bogus", "maybe", "2")


def test_import_with_a_bad_backend_works():
    run = subprocess.run([sys.executable, "-c", "import tilesafe; print(tilesafe.__version__)"],
                         env=dict(os.environ, PYTHONPATH=str(SRC), TILESAFE_BACKEND="bogus"),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == ts.__version__


@pytest.mark.parametrize("text, value", [("", None), ("reference", "reference"), ("triton-interpreter",
                                                                                  "triton-interpreter")])
def test_a_good_backend(text, value):
    assert env(TILESAFE_BACKEND=text).backend == value


@pytest.mark.parametrize("text, value", [("", False), ("0", False), ("off", False), ("false", False),
                                         ("1", True), ("yes", True), ("TRUE", True), (" on ", True)])
def test_switches(text, value):
    s = env(TILESAFE_DUMP=text, TILESAFE_SANITIZE=text)
    assert s.dump is value and s.sanitize is value


def test_a_bad_switch_is_an_error_with_help():
    with pytest.raises(ts.LaunchError) as info:
        env(TILESAFE_SANITIZE="maybe").sanitize
    assert info.value.message == "the environment variable TILESAFE_SANITIZE='maybe' is not an on/off switch"
    assert info.value.help == "set TILESAFE_SANITIZE=1 to turn it on, or 0 (or unset it) for off"


def test_the_first_launch_reports_a_bad_backend_at_the_users_line(monkeypatch):
    monkeypatch.setattr(settings, "SETTINGS", env(TILESAFE_BACKEND="bogus"))
    z, x = ts.empty(100), ts.tensor(np.arange(100, dtype=np.float32))
    with pytest.raises(ts.LaunchError) as info:
        double(z.partition((32,)), x)
    line = sys._getframe().f_lineno - 1
    e = info.value
    assert e.message == "the environment variable TILESAFE_BACKEND='bogus' is not a backend"
    assert e.help == "set it to one of reference, triton, triton-interpreter, or unset it to choose by the machine"
    assert (e.loc.file, e.loc.line) == (__file__, line)
    assert str(e).startswith(f"error: {e.message}\n  --> {__file__}:{line}:")
    assert "Traceback" not in str(e) and "tilesafe/" not in str(e).split("\n")[0]
    ours = [fr.f_code.co_filename for fr, _ in traceback.walk_tb(e.__traceback__)
            if "src/tilesafe" in fr.f_code.co_filename]
    assert len(ours) <= 1, ours      # only the call the user made: no settings/runtime internals


def test_a_context_backend_does_not_consult_the_environment(monkeypatch):
    monkeypatch.setattr(settings, "SETTINGS", env(TILESAFE_BACKEND="bogus"))
    x = ts.tensor(np.arange(100, dtype=np.float32))
    with ts.backend("reference"):
        out = double(ts.empty(100).partition((32,)), x).sync().unpartition()
    np.testing.assert_array_equal(out.numpy(), np.arange(100, dtype=np.float32) * 2)


def test_a_bad_sanitize_setting_stops_the_launch_that_reads_it(monkeypatch):
    monkeypatch.setattr(settings, "SETTINGS", env(TILESAFE_SANITIZE="maybe"))
    from tilesafe.backends.reference import backend as reference
    monkeypatch.setattr(reference, "SETTINGS", settings.SETTINGS)
    x = ts.tensor(np.arange(100, dtype=np.float32))
    z = ts.full(100, -1.0)
    with ts.backend("reference"), pytest.raises(ts.LaunchError) as info:
        double(z.partition((32,)), x)
    assert "TILESAFE_SANITIZE='maybe' is not an on/off switch" in info.value.message
    assert info.value.loc.file == __file__


def test_the_environment_backend_is_worked_out_once_per_value(monkeypatch):
    """Every launch asks for the current backend: TILESAFE_BACKEND is checked once per
    value, not at each launch (a bad value still raises at each launch that needs it)."""
    monkeypatch.setattr(settings, "SETTINGS", env(TILESAFE_BACKEND="reference"))
    settings._environment_backend.cache_clear()
    for _ in range(3):
        assert settings.current_backend() == "reference"
    info = settings._environment_backend.cache_info()
    assert (info.misses, info.hits) == (1, 0)        # the later launches know it by the settings' identity
    monkeypatch.setattr(settings, "SETTINGS", env(TILESAFE_BACKEND="bogus"))
    for _ in range(2):
        with pytest.raises(ts.LaunchError):
            settings.current_backend()
