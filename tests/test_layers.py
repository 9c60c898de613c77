"""Imports flow one way (DESIGN §1, issue 16 part 3):

    errors/dtypes/settings -> lang -> backends -> runtime -> kernels | simt -> engine -> serve -> bench -> cli

Each layer imports only from the layers to its left (and from itself); `kernels` and `simt` stand
side by side and do not import each other. The walk reads every module under src/tilesafe with
`ast` — imports at module level and inside functions, relative and absolute, and
`importlib.import_module("tilesafe....")` with a literal name — so a lazy import cannot hide a
back-edge. The package face (`tilesafe/__init__.py`) sits just above the highest layer it
re-exports: `from tilesafe import X` below that layer is a back-edge too.

Within a layer, imports make no circle either (modules that import each other, directly or
round a ring: a lazy import only moves the circle into a function), and a module imports no
`_private` name of another: a name other modules use is public, or lives where it belongs; nor
calls another module's classes' `_private` methods (a ratchet: the known ones may only go).
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tilesafe"

# Rank of each layer (left to right); equal ranks are siblings that must not import each other.
LAYERS = {"base": 0, "lang": 1, "backends": 2, "runtime": 3, "kernels": 5, "simt": 5, "engine": 6, "serve": 7,
          "bench": 8, "cli": 9}
# What decides a module's layer: its top-level folder or file under src/tilesafe.
PLACES = {"errors.py": "base", "dtypes.py": "base", "settings.py": "base",
          "lang": "lang", "backends": "backends", "runtime": "runtime", "kernels": "kernels", "simt": "simt",
          "engine": "engine", "serve": "serve", "bench": "bench",
          # The command line and what only it runs: the demos, the example programs it shows.
          "cli.py": "cli", "cli_engine.py": "cli", "cli_serve.py": "cli", "__main__.py": "cli", "check_file.py": "cli",
          "check_target.py": "cli", "demo.py": "cli",
          "examples": "cli",
          # Imports nothing of tilesafe; both command lines (cli's and bench's) use it.
          "closed_pipe.py": "base"}
FACE = "face"   # tilesafe/__init__.py


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return FACE
    top = parts[1]
    place = PLACES.get(top) or PLACES.get(top + ".py")
    if place is None:
        raise AssertionError(f"tilesafe.{top} belongs to no layer: add it to PLACES in tests/test_layers.py")
    return place


def imports_of(module: str, path: Path, known, type_only: bool = True) -> list[tuple[int, str, str]]:
    """(line, imported tilesafe module, the import as written) for every import in the file;
    without `type_only`, not those under `if TYPE_CHECKING:` (for annotations: they never run)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    skipped = set() if type_only else _type_checking_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tilesafe":
                    found.append((node.lineno, alias.name, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] != "tilesafe":
                continue
            text = f"from {'.' * node.level}{node.module or ''} import {', '.join(a.name for a in node.names)}"
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if sub in known else base, text))
        elif isinstance(node, ast.Call) and _is_import_call(node.func) and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                and node.args[0].value.split(".")[0] == "tilesafe":
            found.append((node.lineno, node.args[0].value, f"import_module({node.args[0].value!r})"))
    return found


def _type_checking_nodes(tree) -> set[int]:
    """ids of the nodes inside `if TYPE_CHECKING:` blocks."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                inside.update(id(n) for n in ast.walk(stmt))
    return inside


def _is_import_call(func) -> bool:
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name in ("import_module", "__import__")


def rank(layer: str, face_rank: float) -> float:
    return face_rank if layer == FACE else LAYERS[layer]


def back_edges() -> list[str]:
    known = modules()
    edges = {name: imports_of(name, path, known) for name, path in known.items()}
    # The face re-exports: it sits just above the highest layer it imports.
    face_rank = max((LAYERS[layer_of(m)] for _, m, _ in edges["tilesafe"] if layer_of(m) != FACE), default=0) + 0.5
    bad = []
    for name, found in edges.items():
        here = layer_of(name)
        for line, target, text in sorted(set(found)):
            there = layer_of(target)
            if there == here:
                continue
            if rank(there, face_rank) >= rank(here, face_rank):
                where = known[name].relative_to(PACKAGE.parents[1])
                bad.append(f"{where}:{line}: {here} -> {there} ({text})")
    return bad


def test_every_module_has_a_layer():
    for name in modules():
        layer_of(name)


def test_imports_flow_one_way():
    bad = back_edges()
    assert not bad, "imports that run back up the layers:\n  " + "\n  ".join(bad)


def test_the_package_face_only_re_exports():
    """`tilesafe/__init__.py` imports and names the version; the work lives in the layers."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue   # the docstring
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] in (["__version__"], ["__all__"]):
            continue
        raise AssertionError(f"src/tilesafe/__init__.py:{node.lineno} does more than re-export: "
                             f"{ast.unparse(node).splitlines()[0]}")


def test_the_walk_sees_lazy_and_relative_imports(tmp_path):
    """The walk itself: a function-level relative import, an absolute one and import_module."""
    src = tmp_path / "mod.py"
    src.write_text("def f():\n    from ...runtime import kernel\n    import tilesafe.bench.cli\n"
                   "    importlib.import_module('tilesafe.serve')\n")
    known = {"tilesafe.runtime.kernel": None, "tilesafe.backends.triton.mod": None}
    found = imports_of("tilesafe.backends.triton.mod", src, known)
    assert sorted((line, target) for line, target, _ in found) == [
        (2, "tilesafe.runtime.kernel"), (3, "tilesafe.bench.cli"), (4, "tilesafe.serve")]


# --- circles ---------------------------------------------------------------------------------

# Circles left, each with why; the test fails when one is gone (take it off) or a new one appears.
KNOWN_CIRCLES: set[frozenset[str]] = set()


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(frozenset(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports at run time. A package's `__init__` only re-exports
    (every `import tilesafe as ts` would otherwise close a ring through the face): left out."""
    known = modules()
    inits = {name for name, path in known.items() if path.name == "__init__.py"}
    return {name: {target for _, target, _ in imports_of(name, path, known, type_only=False)
                   if target in known and target not in inits and target != name}
            for name, path in known.items() if name not in inits}


def test_no_import_circles():
    found = set(circles(import_graph()))
    new = [" <-> ".join(sorted(c)) for c in found - KNOWN_CIRCLES]
    gone = [" <-> ".join(sorted(c)) for c in KNOWN_CIRCLES - found]
    assert not new, "modules that import each other (move the shared piece to a module of its own):\n  " + \
        "\n  ".join(new)
    assert not gone, "these circles are gone: take them off KNOWN_CIRCLES:\n  " + "\n  ".join(gone)


def test_the_circle_finder_sees_rings_and_lazy_imports(tmp_path):
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert circles(edges) == [frozenset("abc")]
    src = tmp_path / "mod.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .tensor import Tensor\n"
                   "def f():\n    from .graph import g\n")
    known = {"tilesafe.runtime.tensor": None, "tilesafe.runtime.graph": None}
    found = imports_of("tilesafe.runtime.mod", src, known, type_only=False)
    assert [(line, target) for line, target, _ in found] == [(5, "tilesafe.runtime.graph")]


# --- private names ---------------------------------------------------------------------------

# Private names still imported by another module, each with why (the list may only shrink).
KNOWN_PRIVATE: set[tuple[str, str]] = set()


def private_imports(module: str, path: Path, known) -> list[tuple[int, str]]:
    """(line, "module._name") for each `_name` this module takes from another tilesafe module:
    `from m import _name`, or `m._name` where m names a tilesafe module."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    modules_named, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _is_import_call(node.value.func) \
                and node.value.args and isinstance(node.value.args[0], ast.Constant) \
                and str(node.value.args[0].value).startswith("tilesafe."):
            for target in node.targets:
                if isinstance(target, ast.Name):         # m = importlib.import_module("tilesafe....")
                    modules_named[target.id] = node.value.args[0].value
        if not isinstance(node, ast.ImportFrom):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "tilesafe" and alias.asname:
                        modules_named[alias.asname] = alias.name
            continue
        base = package.split(".")
        base = ".".join(base[:len(base) - (node.level - 1)] + ([node.module] if node.module else [])) \
            if node.level else node.module or ""
        if base.split(".")[0] != "tilesafe":
            continue
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if sub in known:
                modules_named[alias.asname or alias.name] = sub
            elif _private(alias.name) and base != module:
                found.append((node.lineno, sub))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
            other = modules_named.get(node.value.id)
            if other is not None and other != module:
                found.append((node.lineno, f"{other}.{node.attr}"))
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_another_modules_private_names():
    known = modules()
    found = {(name, what): line for name, path in known.items()
             for line, what in private_imports(name, path, known)}
    new = [f"{known[name].relative_to(PACKAGE.parents[1])}:{line}: {what}"
           for (name, what), line in sorted(found.items()) if (name, what) not in KNOWN_PRIVATE]
    gone = sorted(set(KNOWN_PRIVATE) - set(found))
    assert not new, "private names used by another module (make them public, or move them where they " \
        "belong):\n  " + "\n  ".join(new)
    assert not gone, f"no longer imported: take them off KNOWN_PRIVATE: {gone}"


def test_the_private_name_walk(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("from .paged_kv import _rows3, slot_rows\nfrom . import matmul as mm\nimport numpy as np\n"
                   "def f():\n    return mm._tf32, np._x, mm.linear\n"
                   "la = importlib.import_module('tilesafe.kernels.launch')\nw = la._with_pdl\n")
    known = {"tilesafe.kernels.paged_kv": None, "tilesafe.kernels.matmul": None, "tilesafe.kernels.launch": None}
    assert sorted(private_imports("tilesafe.kernels.mod", src, known)) == [
        (1, "tilesafe.kernels.paged_kv._rows3"), (5, "tilesafe.kernels.matmul._tf32"),
        (7, "tilesafe.kernels.launch._with_pdl")]


# --- private methods -------------------------------------------------------------------------

# Private methods of one module's classes that another module calls, by (calling module, name),
# each with why (the list may only shrink). The walk goes by name (it cannot know an object's
# class): `x._m` where x is not self/cls/torch and a class of another module defines `_m`, and
# the calling module neither defines `_m` nor assigns `x._m`.
_TENSOR_PROTOCOL = "the runtime's tensor protocol: its torch view and the checks every launcher runs"
KNOWN_PRIVATE_METHODS: dict[tuple[str, str], str] = {
    **{(m, "_torch"): _TENSOR_PROTOCOL for m in (
        "backends.reference.backend", "backends.triton.backend", "kernels.call_checks", "kernels.layout",
        "runtime.autotune", "runtime.binding", "runtime.constructors", "runtime.distributed", "runtime.execute",
        "runtime.graph", "runtime.ordering", "runtime.partition", "runtime.prepared_launch", "runtime.safety",
        "runtime.storage_state", "simt.binding", "simt.examples.block_sum", "simt.gpu_repeat",
        "simt.graph_capture", "simt.kernel", "simt.launch", "simt.launch_plans")},
    **{(m, "_check_usable"): _TENSOR_PROTOCOL for m in (
        "kernels.call_hits", "kernels.call_plans", "kernels.layout", "runtime.autotune", "runtime.binding",
        "runtime.constructors", "runtime.distributed", "runtime.freeze", "simt.gpu_repeat", "simt.launch_plans")},
    **{(m, "_byte_set"): _TENSOR_PROTOCOL for m in (
        "runtime.distributed", "runtime.execute", "runtime.graph", "runtime.graph_registry", "runtime.ordering",
        "runtime.prepared_launch", "runtime.safety", "simt.launch", "simt.launch_plans")},
    ("runtime.constructors", "_check_read"): _TENSOR_PROTOCOL,
    ("runtime.distributed", "_check_not_lent_elsewhere"): _TENSOR_PROTOCOL,
    ("runtime.distributed", "_check_not_frozen"): _TENSOR_PROTOCOL,
    ("kernels.launch", "_check_lendable"): _TENSOR_PROTOCOL,
    ("runtime.launch_plan", "_lent_to"): _TENSOR_PROTOCOL,
    ("runtime.binding", "_check_live"): "a partition's S8/S13 checks, run by the binder",
    ("runtime.binding", "_check_torch_untouched"): "a partition's S8/S13 checks, run by the binder",
    ("runtime.compile_ahead", "_check_preconditions"): "the kernel's preconditions, run before a compile",
    ("runtime.launch_cache", "_check_preconditions"): "the kernel's preconditions, run by a cached launch",
    ("serve.async_llm", "_sequences"): "the LLM's request check and tokenization, shared with serving",
}


def private_method_uses() -> dict[tuple[str, str], tuple[int, list[str]]]:
    """(calling module, method) -> (first line, the modules whose classes define it)."""
    known = modules()
    trees = {name: ast.parse(path.read_text(), str(path)) for name, path in known.items()}
    defined, owned = {}, {}
    for name, tree in trees.items():
        owned[name] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(item.name):
                        defined.setdefault(item.name, set()).add(name)
                        owned[name].add(item.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                owned[name].add(node.attr)                       # x._m = ...: this module's own
    found = {}
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr in defined and node.attr not in owned[name]):
                continue
            receiver = ast.unparse(node.value)
            if receiver in ("self", "cls") or receiver.split(".")[0] == "torch":
                continue
            key = (name.removeprefix("tilesafe."), node.attr)
            if key not in found or node.lineno < found[key][0]:
                found[key] = (node.lineno, sorted(defined[node.attr]))
    return found


def test_no_module_calls_another_modules_private_methods():
    found = private_method_uses()
    new = [f"tilesafe.{m}:{line}: {attr} (defined in {', '.join(where)})"
           for (m, attr), (line, where) in sorted(found.items()) if (m, attr) not in KNOWN_PRIVATE_METHODS]
    gone = sorted(set(KNOWN_PRIVATE_METHODS) - set(found))
    assert not new, "private methods called from another module (give them a public, documented name, " \
        "or move the use behind a public one):\n  " + "\n  ".join(new)
    assert not gone, f"no longer called from outside: take them off KNOWN_PRIVATE_METHODS: {gone}"
