"""`tilesafe check FILE.py`: report the errors of every kernel a file defines, without running any.

The file is executed with launching disabled, one top-level statement at a time, so a
launch (refused here) or a statement that fails because of it does not stop the kernels
defined after it. While it runs, `ts.kernel` is wrapped to record each definition's
KernelError and hand back a stand-in instead of raising, so one bad kernel does not hide the
next even inside a block. KernelErrors raised by a statement itself (e.g. `k.checks(...)`
specializing a kernel) are reported too. Other failures are the file's own business: they
are skipped, since a refused launch makes later host code fail for reasons that are not errors.

Errors a kernel can show only with launch facts (a Const parameter without a default) are
found at its first specialization, which a check cannot do without arguments.
"""
from __future__ import annotations

import __future__ as future
import ast
import contextlib
import io
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import tilesafe

from .errors import KernelError, TileSafeError
from .settings import launching_disabled_var

MODULE_NAME = "__tilesafe_check__"   # not "__main__": the file's `if __name__ == "__main__":` block stays off


@dataclass
class FileReport:
    path: str
    kernels: int = 0
    errors: list[TileSafeError] = field(default_factory=list)


class RefusedKernel:
    """Stands in for a kernel whose definition failed, so the rest of the file keeps running."""

    def __init__(self, name: str, error: KernelError):
        self.name, self.error = name, error

    def __call__(self, *args, **kwargs):
        raise self.error

    def __getattr__(self, attr):
        raise self.error


def run(paths: list[str]) -> int:
    kernels, errors, unreadable = 0, 0, 0
    for path in paths:
        report = check(path)
        if report is None:
            unreadable += 1
            continue
        kernels += report.kernels
        errors += len(report.errors)
        for e in report.errors:
            print(f"{e}\n")
    if errors or unreadable:
        print(f"{errors} error{_s(errors)} in {kernels} kernel{_s(kernels)} checked"
              + (f"; {unreadable} file{_s(unreadable)} could not be read" if unreadable else ""))
        return 1
    print(f"ok: {kernels} kernel{_s(kernels)} checked")
    return 0


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def check(path: str) -> FileReport | None:
    """Check one file; None (after printing why) when it cannot even be parsed."""
    file = Path(path)
    try:
        text = file.read_text()
        tree = ast.parse(text, filename=path)
    except (OSError, SyntaxError, ValueError) as e:
        print(f"error: cannot read {path}: {e}")
        return None
    report = FileReport(path)
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = str(file)
    quiet = io.StringIO()   # the file's own prints are not part of the report
    with _kernels_recorded(report), _importable(module, file), \
            contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        token = launching_disabled_var.set(True)
        try:
            _run_statements(tree, path, module, report)
        finally:
            launching_disabled_var.reset(token)
    return report


def _run_statements(tree: ast.Module, path: str, module: types.ModuleType, report: FileReport) -> None:
    flags = 0
    for stmt in tree.body:
        flags |= _future_flags(stmt)
        code = compile(ast.Module([stmt], type_ignores=[]), path, "exec", flags=flags, dont_inherit=True)
        try:
            exec(code, module.__dict__)
        except KernelError as e:
            if all(e is not seen for seen in report.errors):
                report.errors.append(e)
        except (Exception, SystemExit):   # a refused launch, or host code after one: not the check's business
            continue


def _future_flags(stmt: ast.stmt) -> int:
    """`from __future__ import x` must keep applying to the statements after it."""
    if not (isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"):
        return 0
    flags = 0
    for alias in stmt.names:
        feature = getattr(future, alias.name, None)
        flags |= getattr(feature, "compiler_flag", 0)
    return flags


@contextlib.contextmanager
def _kernels_recorded(report: FileReport):
    """Wrap `ts.kernel` so each definition is counted and its error recorded, not raised."""
    real = tilesafe.kernel

    def recording(fn=None, **options):
        def define(f):
            report.kernels += 1
            try:
                return real(f, **options)
            except KernelError as e:
                report.errors.append(e)
                return RefusedKernel(getattr(f, "__name__", "kernel"), e)
        return define(fn) if fn is not None else define

    tilesafe.kernel = recording
    try:
        yield
    finally:
        tilesafe.kernel = real


@contextlib.contextmanager
def _importable(module: types.ModuleType, file: Path):
    """Run as Python runs a script: its folder first on sys.path, the module registered."""
    sys.modules[MODULE_NAME] = module
    sys.path.insert(0, str(file.resolve().parent))
    try:
        yield
    finally:
        sys.path.remove(str(file.resolve().parent))
        sys.modules.pop(MODULE_NAME, None)
