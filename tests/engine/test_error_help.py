"""A ratchet: every error the engine raises carries a help line (what to do instead).

The walk reads each module of src/tilesafe/engine with `ast`. Every call of an error factory
(`request_error`, `checkpoint_error`, ...) or of a `TileSafeError` class must pass a help that
is not None; every `raise` must raise one of those, or be one of the few internal raises listed
in `INTERNAL` with the reason a user never sees it. A new refusal without a help line, or a new
kind of raise, fails here. The serving layer's RequestErrors (src/tilesafe/serve) are walked
too.
"""
from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import tilesafe as ts
import tilesafe.engine

ENGINE = Path(tilesafe.engine.__file__).parent
# Where each factory takes its help, by position (or keyword `help=`).
FACTORIES = {"request_error": 1, "checkpoint_error": 1, "tp_error": 1, "input_error": 1, "file_error": 2}
CLASS_HELP = 2          # TileSafeError(message, loc, help)
# Raises that never reach a user as themselves, by (module, what is called).
INTERNAL = {
    ("chat_template.py", "_Refused"): "the template's raise_exception; render() turns it into a TextInputError",
    ("llm.py", "SystemExit"): "a tensor-parallel worker process's exit status",
    ("llm.py", "failure"): "RankGroup.failure returns a tp_error (checked as a factory call)",
    ("tp_group.py", "failure"): "RankGroup.failure returns a tp_error (checked as a factory call)",
    ("sampler.py", "ValueError"): "an internal invariant: the LLM never asks for more rows than max_num_seqs",
    ("prefill_graphs.py", "ValueError"): "an internal invariant: callers check fits() first",
}


def error_classes() -> set[str]:
    """The names of the TileSafeError classes the engine can construct."""
    names = set()
    for info in pkgutil.iter_modules([str(ENGINE)]):
        module = importlib.import_module(f"tilesafe.engine.{info.name}")
        names |= {n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, ts.TileSafeError)}
    return names | {n for n, v in vars(ts).items() if isinstance(v, type) and issubclass(v, ts.TileSafeError)}


def called(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ast.unparse(f)


def help_of(call: ast.Call, index: int):
    """The help argument's node, or None when the call passes none (or a literal None)."""
    node = next((k.value for k in call.keywords if k.arg == "help"), None)
    if node is None and len(call.args) > index:
        node = call.args[index]
    return None if node is None or isinstance(node, ast.Constant) and node.value in (None, "") else node


def sites():
    """(module, line, what is called, problem or None) of each error call and raise."""
    classes = error_classes()
    for path in sorted(ENGINE.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and called(node) in FACTORIES.keys() | classes:
                name = called(node)
                missing = help_of(node, FACTORIES.get(name, CLASS_HELP)) is None
                yield path.name, node.lineno, name, "no help line" if missing else None
            elif isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc
                if not isinstance(exc, ast.Call):
                    yield path.name, node.lineno, ast.unparse(exc), "raises a prebuilt error: build it in the raise"
                    continue
                name = called(exc)
                if name not in FACTORIES.keys() | classes and (path.name, name) not in INTERNAL:
                    yield path.name, node.lineno, name, "not a TileSafeError factory nor a listed internal raise"


def test_every_engine_error_has_a_help_line():
    found = list(sites())
    bad = [f"{m}:{line}: {name}: {problem}" for m, line, name, problem in found if problem]
    assert not bad, "\n".join(bad)
    assert sum(name in FACTORIES for _, _, name, _ in found) >= 80, "the walk found too few error calls"


def test_every_request_error_of_the_server_has_a_help_line():
    """The serving layer (src/tilesafe/serve) raises the engine's RequestError for a bad
    EngineCore / AsyncLLM call: those carry a help line too (its HTTP errors are ApiErrors, and
    its internal raises are not walked here)."""
    serve = ENGINE.parent / "serve"
    calls = [(path.name, node.lineno) for path in sorted(serve.glob("*.py"))
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
             and called(node) in FACTORIES and help_of(node, FACTORIES[called(node)]) is None]
    assert not calls, calls
    assert "request_error(" in (serve / "engine_core.py").read_text()      # the walk reads the right folder


def test_the_listed_internal_raises_still_exist():
    """A listed raise that is gone leaves a stale entry that would let a new one in unseen."""
    raised = set()
    for path in ENGINE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                raised.add((path.name, called(node.exc)))
    assert set(INTERNAL) <= raised, set(INTERNAL) - raised


def test_the_walk_sees_a_missing_help(tmp_path, monkeypatch):
    """The checker itself: a refusal written without help is reported."""
    (tmp_path / "bad.py").write_text('from .errors import request_error\n'
                                     'def f(x):\n'
                                     '    raise request_error(f"x is {x}")\n'
                                     'def g(x):\n'
                                     '    raise request_error("fine", help="do this")\n'
                                     'def h():\n'
                                     '    raise KeyError("k")\n')
    monkeypatch.setattr(pkgutil, "iter_modules", lambda paths: [])
    monkeypatch.setitem(globals(), "ENGINE", tmp_path)
    problems = sorted((line, problem) for _, line, _, problem in sites() if problem)
    assert problems == [(3, "no help line"), (7, "not a TileSafeError factory nor a listed internal raise")]
