"""Every Python example in docs/serving.md that is followed by a ```text block runs (on the
reference interpreter) and prints it. (The server's examples need a model and a server, and
show no output.)"""
import contextlib
import io
import re
from pathlib import Path

import pytest

import tilesafe as ts

DOC = Path(__file__).resolve().parents[2] / "docs" / "serving.md"
PAIRS = re.findall(r"```python\n((?:(?!```).)*)```\n\n```text\n(.*?)```", DOC.read_text(), re.S)


def test_the_page_has_examples():
    assert len(PAIRS) == 3


@pytest.mark.parametrize("code,printed", PAIRS, ids=[f"block{i}" for i in range(len(PAIRS))])
def test_doc_example_prints_what_the_page_shows(code, printed):
    out = io.StringIO()
    with ts.backend("reference"), contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {})
    assert out.getvalue() == printed
