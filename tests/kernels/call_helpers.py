"""Checks shared by the tests of whole library calls: where an error points, and that a
refused call wrote nothing. Nothing here imports tilesafe internals."""
import pytest
import torch


def marker_line(path: str, marker: str) -> int:
    """The line of `path` that ends with the comment `# <marker>` (exactly one must)."""
    with open(path) as f:
        hits = [i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, f"marker {marker!r} found on lines {hits}"
    return hits[0]


def assert_at_call(e, path: str, marker: str, *fragments: str) -> None:
    """A located error about the caller's arguments: its message holds every fragment, it
    points at the marked line (the user's call), it has a help line and names no kernel
    internals (kernel names, kernel parameters, tilesafe's own files)."""
    text = str(e)
    for fragment in fragments:
        assert fragment in e.message, text
    assert e.loc is not None and e.loc.file == path and e.loc.line == marker_line(path, marker), text
    assert text.startswith("error: ") and text.count("error:") == 1, text
    assert "= help: " in text, text
    for internal in ("_kernel", "`z`", "`y1`", "`acc_o`", "unpartition", "src/tilesafe", "Traceback"):
        assert internal not in text, f"{internal!r} leaks into:\n{text}"


def assert_located(e, path: str, marker: str) -> None:
    """An error that points at the marked line of `path` and has a help line (the ownership
    errors say what to unpartition, so `assert_at_call`'s list of internal words does not fit)."""
    text = str(e)
    assert e.loc is not None and e.loc.file == path and e.loc.line == marker_line(path, marker), text
    assert text.startswith("error: ") and "= help: " in text, text


def snapshot(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """Host copies of the tensors' bytes (uint8), to compare after a refused call."""
    return [_bytes(t) for t in tensors]


def assert_unchanged(before: list[torch.Tensor], *tensors: torch.Tensor) -> None:
    for i, (b, t) in enumerate(zip(before, tensors)):
        assert torch.equal(b, _bytes(t)), f"argument {i} was written by a refused call"


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu").contiguous().view(torch.uint8).clone()


def refused_twice(call, error, path: str, marker: str, library) -> str:
    """The error of `call()` on a warm plan's written-out hit, then of the same call with the
    library function's plans forgotten (a fresh call's full path): the same class, message and
    line; returns the message."""
    messages = []
    for _ in range(2):
        with pytest.raises(error) as e:
            call()
        assert_located(e.value, path, marker)
        messages.append(e.value.message)
        library.plans.plans.clear()
    assert messages[0] == messages[1]
    return messages[0]
