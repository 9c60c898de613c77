"""Every Python example in docs/kernels.md runs (on the reference interpreter)."""
import re
from pathlib import Path

import pytest

import tilesafe as ts

DOC = Path(__file__).resolve().parents[2] / "docs" / "kernels.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_doc_example_runs(code):
    with ts.backend("reference"):
        exec(compile(code, str(DOC), "exec"), {})
