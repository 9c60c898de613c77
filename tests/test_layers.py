"""Imports flow one way (DESIGN §1, issue 16 part 3):

    errors/dtypes/settings -> lang -> backends -> runtime -> kernels | simt -> engine -> serve -> bench -> cli

Each layer imports only from the layers to its left (and from itself); `kernels` and `simt` stand
side by side and do not import each other. The walk reads every module under src/tilesafe with
`ast` — imports at module level and inside functions, relative and absolute, and
`importlib.import_module("tilesafe....")` with a literal name — so a lazy import cannot hide a
back-edge. The package face (`tilesafe/__init__.py`) sits just above the highest layer it
re-exports: `from tilesafe import X` below that layer is a back-edge too.
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


def imports_of(module: str, path: Path, known) -> list[tuple[int, str, str]]:
    """(line, imported tilesafe module, the import as written) for every import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
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
