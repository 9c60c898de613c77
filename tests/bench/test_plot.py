"""PNGs from a results JSON on any machine; a clear error without matplotlib."""
import sys

import pytest

from fakes import document
from tilesafe.bench import cli, report


def test_plot_renders_one_png_per_family(tmp_path):
    pytest.importorskip("matplotlib")
    path = report.write(document(), tmp_path, "run.json")
    assert cli.main(["--plot", str(path)]) == 0
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["run-add.png", "run-flash.png", "run-gemm.png", "run-gemv.png"]
    assert (tmp_path / "run-gemm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)       # import matplotlib -> ImportError
    path = report.write(document(), tmp_path, "run.json")
    assert cli.main(["--plot", str(path)]) == 2
    err = capsys.readouterr().err
    assert "plotting needs matplotlib" in err and "pip install matplotlib" in err
    assert not list(tmp_path.glob("*.png"))


def test_plot_of_a_missing_file_is_an_error(tmp_path, capsys):
    assert cli.main(["--plot", str(tmp_path / "nope.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
