"""docs/language.md is checked against the code, so the reference cannot drift.

Snippets: every ```python block of the page is a program, run here on the reference backend
with `np` (NumPy) and `ts` (tilesafe) already imported. A block whose first line is
`# raises: <ErrorClass>` must raise that class; a block whose first line is
`# requires: cuda` runs only on a GPU (`pytest -m gpu`). A ```text block right after a
python block is what the block prints, or, for a raising block, the error exactly as
tilesafe renders it, with the block's file shown as `example.py`.

Drift: the names the language offers are read from the code (the op registry, the
parameter kinds, the methods of tensors, tiles and partitions, the kernel options, the
dtypes, the operators and statements the frontend lowers, the safety rules of the README)
and each must have an entry in the page: a heading or a table row whose code span names it.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import gc
import inspect
import io
import re
import runpy
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import tilesafe as ts

ROOT = Path(__file__).resolve().parents[1]
DOC_PATH = ROOT / "docs" / "language.md"
DOC = DOC_PATH.read_text()
SHOWN_FILE = "example.py"


# --- the page's code blocks ---------------------------------------------------------------------
@dataclass(frozen=True)
class Snippet:
    line: int            # where the block starts in the page
    code: str
    shown: str | None    # the text block that follows it, if any

    @property
    def headers(self) -> list[str]:
        """The block's leading `# raises: ...` / `# requires: ...` lines."""
        out = []
        for line in self.code.split("\n"):
            if not line.startswith(("# raises", "# requires")):
                break
            out.append(line.strip())
        return out

    @property
    def raises(self) -> str | None:
        found = [m.group(1) for h in self.headers if (m := re.fullmatch(r"# raises: (\w+)", h))]
        return found[0] if found else None

    @property
    def needs_cuda(self) -> bool:
        return "# requires: cuda" in self.headers


def fenced_blocks(text: str) -> list[tuple[int, str, str, int]]:
    """(language, body, start line, end line) of every fenced block, in order."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = re.fullmatch(r"```(\w*)", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while lines[j] != "```":
            j += 1
        out.append((m.group(1), "\n".join(lines[i + 1:j]) + "\n", i + 1, j + 1))
        i = j + 1
    return out


def snippets(text: str) -> list[Snippet]:
    blocks, lines, out = fenced_blocks(text), text.split("\n"), []
    for k, (lang, body, start, end) in enumerate(blocks):
        if lang != "python":
            continue
        shown = None
        if k + 1 < len(blocks) and blocks[k + 1][0] == "text":
            between = lines[end:blocks[k + 1][2] - 1]
            if all(not s.strip() for s in between):
                shown = blocks[k + 1][1]
        out.append(Snippet(start, body, shown))
    return out


SNIPPETS = snippets(DOC)


def run_snippet(snippet: Snippet, tmp_path: Path) -> tuple[str, BaseException | None]:
    """Run one block as a file of its own; return what it printed and what it raised."""
    path = tmp_path / SHOWN_FILE          # a fresh directory per block: no stale source cache
    path.write_text(snippet.code)
    out, error = io.StringIO(), None
    if snippet.needs_cuda:
        # Free earlier tests' garbage now: a CUDA graph freed while another is being captured
        # breaks that capture (the S12 example captures).
        gc.collect()
    with ts.backend("triton" if snippet.needs_cuda else "reference"), contextlib.redirect_stdout(out):
        try:
            runpy.run_path(str(path), init_globals={"np": np, "ts": ts}, run_name="language_doc_example")
        except Exception as e:   # noqa: BLE001 (the test says what was expected)
            error = e
    return out.getvalue().replace(str(path), SHOWN_FILE), error


def _marks(s: Snippet):
    return [pytest.mark.gpu] if s.needs_cuda else []


@pytest.mark.parametrize("snippet", [pytest.param(s, id=f"line{s.line}", marks=_marks(s)) for s in SNIPPETS])
def test_snippet_runs_as_the_page_says(snippet: Snippet, tmp_path):
    printed, error = run_snippet(snippet, tmp_path)
    where = f"docs/language.md:{snippet.line}"
    if snippet.raises is None:
        assert error is None, f"{where} raised {type(error).__name__}: {error}"
        if snippet.shown is not None:
            assert printed == snippet.shown, f"{where} printed:\n{printed}"
        return
    expected = getattr(ts, snippet.raises)
    assert error is not None, f"{where} should raise {snippet.raises} but ran"
    assert isinstance(error, expected), f"{where} raised {type(error).__name__}, not {snippet.raises}: {error}"
    assert snippet.shown is not None, f"{where}: a refused example shows its error in a text block"
    rendered, message = (text.replace(str(tmp_path / SHOWN_FILE), SHOWN_FILE) for text in (str(error), error.message))
    assert message in snippet.shown, f"{where}: the page does not show the message {message!r}"
    assert printed + rendered + "\n" == snippet.shown, f"{where} printed and raised:\n{printed}{rendered}"


def test_the_page_has_snippets_of_every_kind():
    assert len(SNIPPETS) >= 40
    assert any(s.raises == "KernelError" for s in SNIPPETS) and any(s.raises == "LaunchError" for s in SNIPPETS)
    for s in SNIPPETS:   # a misspelt header must not silently turn a refusal into a plain run
        for h in s.headers:
            ok = h == "# requires: cuda" or (h.startswith("# raises: ") and h[10:] in vars(ts)
                                             and isinstance(getattr(ts, h[10:]), type))
            assert ok, f"docs/language.md:{s.line}: bad header {h!r}"


# --- drift: every public name has an entry -------------------------------------------------------
def entry_spans(text: str) -> list[str]:
    """The code spans of the page's headings and table rows: where an entry names something."""
    spans = []
    for line in text.split("\n"):
        if line.startswith(("#", "|")):
            spans += re.findall(r"`([^`]+)`", line.replace("\\|", "|"))   # `a \| b` in a table is `a | b`
    return spans


SPANS = entry_spans(DOC)


def missing(names, pattern) -> list[str]:
    """`names` without an entry; `pattern` turns a name into the regex a span must contain."""
    return sorted(n for n in names if not any(re.search(pattern(n), s) for s in SPANS))


def _ts_name(n):
    return rf"(^|[^\w.])ts\.{re.escape(n)}\b"


def _member(n):
    return rf"\b(?!ts\b)\w+\.{re.escape(n)}\b"   # `z.load()`, `t.max(...)`: not `ts.load`


def public_device_ops() -> set[str]:
    """Every `ts.*` callable the frontend lowers: the stubs and the host constructors that
    double as device ops (`ts.zeros`, `ts.full`, `ts.arange`)."""
    from tilesafe.lang import calls
    names = set()
    for name, value in vars(ts).items():
        if name.startswith("_"):
            continue
        try:
            if value in calls.REGISTRY or getattr(value, "__tilesafe_stub__", None):
                names.add(name)
        except TypeError:   # unhashable
            pass
    return names


def allowed_builtins() -> set[str]:
    from tilesafe.lang.expressions import ALLOWED_BUILTINS
    return {n for n in ALLOWED_BUILTINS if callable(getattr(builtins, n, None))}


def parameter_kinds() -> set[str]:
    from tilesafe.lang.annotations import _Subscriptable
    return {n for n, v in vars(ts).items() if isinstance(v, _Subscriptable)}


def attribute_names() -> set[str]:
    """The methods and attributes a kernel can use on tensors, partitions and tiles: the
    methods tables, and every name `attribute_of` compares `attr` with."""
    from tilesafe.lang import methods
    names = set(methods.TENSOR_METHODS) | set(methods.TILE_METHODS)
    for node in ast.walk(ast.parse(inspect.getsource(methods))):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "attr":
            for c in node.comparators:
                for k in ast.walk(c):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        names.add(k.value)
    return names


def kernel_options() -> set[str]:
    return {n for n, p in inspect.signature(ts.kernel).parameters.items() if p.kind == p.KEYWORD_ONLY}


def kernel_methods() -> set[str]:
    return {n for n, v in vars(ts.Kernel).items() if not n.startswith("_") and callable(v) and n != "param"}


def dtype_names() -> set[str]:
    return {n for n, v in vars(ts).items() if isinstance(v, ts.DType)}


def operators() -> set[str]:
    from tilesafe.lang.expressions import BINOPS, CMPOPS
    return {"**" if op == "pow" else op for op in (*BINOPS.values(), *CMPOPS.values())} | {"-x", "~x", "not"}


STATEMENT_WORDS = {"Assign": "=", "AugAssign": "+=", "Expr": None, "Pass": "pass", "For": "for", "While": "while",
                   "If": "if", "Return": "return"}


def statements() -> set[str]:
    from tilesafe.lang.statements import _HANDLERS
    names = {k.__name__ for k in _HANDLERS}
    unknown = names - set(STATEMENT_WORDS)
    assert not unknown, f"the frontend lowers new statements {unknown}: document them and add them here"
    return {STATEMENT_WORDS[n] for n in names if STATEMENT_WORDS[n]}


def readme_rules() -> set[str]:
    """The rule numbers of the README's table, ranges such as S5–S7 expanded."""
    table = re.search(r"### The rules, in brief\n(.*?)\n\n", (ROOT / "README.md").read_text(), re.S).group(1)
    rules = set()
    for row in table.split("\n")[2:]:
        first = row.split("|")[1]
        for a, b in re.findall(r"S(\d+)(?:[–-]S(\d+))?", first):
            rules |= {f"S{i}" for i in range(int(a), int(b or a) + 1)}
    return rules


CHECKS = [
    ("device-side op", public_device_ops, _ts_name),
    ("builtin usable in a kernel", allowed_builtins, lambda n: rf"(^|[^\w.]){n}\("),
    ("parameter kind", parameter_kinds, _ts_name),
    ("method or attribute", attribute_names, _member),
    ("kernel option", kernel_options, lambda n: rf"(^|\W){n}="),
    ("kernel method", kernel_methods, _member),
    ("dtype", dtype_names, _ts_name),
    ("operator", operators, lambda n: rf"(^|[^`]*\s){re.escape(n)}(\s|$)"),
    ("statement", statements, lambda n: rf"(^|\W){re.escape(n)}(\W|$)"),
]


@pytest.mark.parametrize("what,names,pattern", CHECKS, ids=[c[0] for c in CHECKS])
def test_every_public_name_has_an_entry(what, names, pattern):
    found = names()
    assert found, f"no {what} found in the code: the test reads the wrong place"
    gone = missing(found, pattern)
    assert not gone, (f"docs/language.md has no entry (a heading or table row naming it in a code span) for "
                      f"these {what}s: {gone}; checked: {sorted(found)}")


def test_the_drift_check_sees_the_names_it_must():
    # The enumerations find what the language is known to offer, so a change in how the code
    # registers names cannot make the drift test vacuous.
    assert {"exp", "mma", "load", "gather", "valid", "zeros", "full", "arange", "last_arrival",
            "atomic_cas", "static_assert", "print"} <= public_device_ops()
    assert {"store", "load", "partition", "tiles", "subtiles", "members", "astype", "tile_shape", "extent",
            "T", "shape", "dtype"} <= attribute_names()
    assert {"Mut", "Ref", "MutTiles", "MutLast", "Ptr", "Const"} == parameter_kinds()
    assert {"preconditions", "unsafe", "deny_kernel_checks"} <= kernel_options()
    assert {"launch", "unsafe_launch", "ir", "checks", "compile", "source"} <= kernel_methods()
    assert {"S1", "S8", "S14", "S16"} <= readme_rules()
    assert missing({"no_such_op"}, _ts_name) == ["no_such_op"]


def test_a_name_added_without_an_entry_fails_the_drift_check(monkeypatch):
    from tilesafe.lang import methods

    def fresh_op(x):
        """A device-side operation added to the language but not to the page."""
    fresh_op.__tilesafe_stub__ = "fresh_op"
    monkeypatch.setattr(ts, "fresh_op", fresh_op, raising=False)
    monkeypatch.setattr(methods, "TENSOR_METHODS", (*methods.TENSOR_METHODS, "fresh_walk"))
    assert missing(public_device_ops(), _ts_name) == ["fresh_op"]
    assert missing(attribute_names(), _member) == ["fresh_walk"]


def test_every_rule_of_the_readme_has_a_section_with_a_refused_example():
    sections = re.split(r"^### ", DOC, flags=re.M)
    for rule in sorted(readme_rules(), key=lambda r: int(r[1:])):
        body = next((s for s in sections if re.match(rf"{rule}\b", s)), None)
        assert body is not None, f"docs/language.md has no `### {rule} ...` section"
        # A guarantee that refuses nothing (S10 ordering, S15 barriers) says so and shows it instead.
        assert "# raises: " in body or body.split("\n\n")[1].startswith("No refusal:"), \
            f"the {rule} section shows no refused example"
