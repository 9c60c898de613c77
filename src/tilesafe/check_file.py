"""`tilesafe check FILE.py`: report the errors of every kernel a file defines, without running any.

The file is executed with launching disabled, one top-level statement at a time, so a
launch (refused here) or a statement that fails because of it does not stop the kernels
defined after it. While it runs, `ts.kernel` is wrapped to record each definition's
KernelError and hand back a stand-in instead of raising, so one bad kernel does not hide the
next even inside a block. KernelErrors raised by a statement itself (e.g. `k.checks(...)`
specializing a kernel) are reported too.

A check never says "ok" for what it could not see:
  * a statement that fails before any launch was refused means the file does not import
    (a missing module, a name error in an annotation): "could not check", exit 1. After a
    refused launch, failures are skipped, since host code after a launch that did not run
    fails for reasons that are not errors;
  * a kernel whose definition fails with something other than a KernelError could not be
    built or specialized: "could not check" that kernel, exit 1;
  * a kernel with a ts.Const parameter without a default cannot be specialized without
    launch facts, so only its signature is checked (its body at its first launch, or by a
    `k.checks(ts.spec(...))` the file makes): such kernels are listed.
"""
from __future__ import annotations

import __future__ as future
import ast
import contextlib
import inspect
import io
import linecache
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import tilesafe

from . import check_target
from .errors import KernelError, LaunchError, Loc, TileSafeError, render
from .lang.annotations import CONST
from .settings import launching_disabled_var

MODULE_NAME = "__tilesafe_check__"   # not "__main__": the file's `if __name__ == "__main__":` block stays off


@dataclass
class FileReport:
    path: str
    kernels: int = 0
    errors: list[TileSafeError] = field(default_factory=list)
    unchecked: list[tuple[str, str]] = field(default_factory=list)   # ("file" or "kernel", rendered diagnostic)
    defined: list = field(default_factory=list)              # the kernels built, to see what was specialized
    compiled: int = 0                                         # --target: launches compiled for it
    not_compiled: list[str] = field(default_factory=list)     # --target: kernels never launched at import

    def signature_only(self) -> list[str]:
        """One line per kernel whose body was never built: it needs ts.Const values nobody gave."""
        lines = []
        for k in self.defined:
            needs = [p.name for p in k.params if p.kind == CONST and p.default is inspect.Parameter.empty]
            if needs and not k.specializer.specs:
                lines.append(check_target.kernel_line(k, f" needs ts.Const {', '.join(needs)}"))
        return lines


class RefusedKernel:
    """Stands in for a kernel whose definition failed, so the rest of the file keeps running."""

    def __init__(self, name: str, error: Exception):
        self.name, self.error = name, error

    def __call__(self, *args, **kwargs):
        raise self.error

    def __getattr__(self, attr):
        raise self.error


def run(paths: list[str], target: str | None = None) -> int:
    if target is not None and (bad := _unknown_target(target)):
        print(bad, file=sys.stderr)
        return 2
    kernels, errors, unchecked, unreadable, partial = 0, 0, [], 0, []
    compiled, not_compiled = 0, []
    for path in paths:
        report = check(path, target)
        if report is None:
            unreadable += 1
            continue
        kernels += report.kernels
        errors += len(report.errors)
        unchecked += [what for what, _ in report.unchecked]
        for text in [text for _, text in report.unchecked] + [str(e) for e in report.errors]:   # why first
            print(f"{text}\n")
        partial += report.signature_only()
        compiled, not_compiled = compiled + report.compiled, not_compiled + report.not_compiled
    if partial:
        print("checked by signature only (the body is checked at the first launch, or by "
              "`KERNEL.checks(ts.spec(...))` with values for its ts.Const parameters):\n" + "\n".join(partial) + "\n")
    if not_compiled:
        print(f"not compiled for {target} (no launch made when the file is imported gives their shapes; "
              f"`KERNEL.compile(ts.spec(...), target=\"{target}\")` compiles one):\n" + "\n".join(not_compiled) + "\n")
    counted = f"{kernels} kernel{_s(kernels)} checked" + (f", {len(partial)} by signature only" if partial else "")
    if target is not None:
        counted += f"; {compiled} launch{'' if compiled == 1 else 'es'} compiled for {target}"
    if errors or unchecked or unreadable:
        skipped = [f"{n} {what}{_s(n)}" for what in ("file", "kernel") if (n := unchecked.count(what))]
        print(f"{errors} error{_s(errors)} in {counted}"
              + (f"; could not check {' and '.join(skipped)}" if skipped else "")
              + (f"; {unreadable} file{_s(unreadable)} could not be read" if unreadable else ""))
        return 1
    print(f"ok: {counted}")
    return 0


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def check(path: str, target: str | None = None) -> FileReport | None:
    """Check one file; None (after printing why) when it cannot even be parsed. With a
    `target`, also compile each launch the file makes for it (check_target.py)."""
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
    with _kernels_recorded(report), _importable(module, file), check_target.recording(target) as launches, \
            contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        token = launching_disabled_var.set(True)
        try:
            _run_statements(tree, path, module, report)
        finally:
            launching_disabled_var.reset(token)
        if launches is not None:
            report.compiled = check_target.compile_all(launches, target, report)
            report.not_compiled = check_target.never_launched(report.defined, launches)
    return report


def _unknown_target(target: str) -> str | None:
    from .backends.triton.targets import resolve
    try:
        resolve(target)
    except TileSafeError as e:
        return render(e.message, None, e.help)
    return None


def _run_statements(tree: ast.Module, path: str, module: types.ModuleType, report: FileReport) -> None:
    # excused: a launch was refused (or the file already failed), so later failures may follow from that
    flags, excused = 0, False
    for stmt in tree.body:
        flags |= _future_flags(stmt)
        code = compile(ast.Module([stmt], type_ignores=[]), path, "exec", flags=flags, dont_inherit=True)
        try:
            exec(code, module.__dict__)
        except KernelError as e:
            if all(e is not seen for seen in report.errors):
                report.errors.append(e)
        except LaunchError:
            excused = True
        except (Exception, SystemExit) as e:
            if not excused:   # the file itself does not import
                report.unchecked.append(("file", _could_not_check(path, e)))
                excused = True


def _could_not_check(path: str, e: BaseException, kernel: str | None = None, line: int | None = None) -> str:
    """A diagnostic at the file's line the failure came from: `line`, else the deepest frame in the file."""
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    what = f"`{kernel}` in {path}" if kernel else path
    reason = e.message if isinstance(e, TileSafeError) else (str(e).splitlines() or [""])[0]
    text = linecache.getline(path, line) if line else ""
    loc = Loc(path, line, len(text) - len(text.lstrip()) + 1, max(1, len(text.strip()))) if line else None
    help = (f"tilesafe could not build this kernel; `python {path}` shows the full error" if kernel else
            f"kernels are checked by importing the file, which must work: `python {path}` shows the full error")
    return render(f"could not check {what}: {type(e).__name__}: {reason}".rstrip(": "), loc, help)


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
    """Wrap `ts.kernel` and `simt.kernel` so each definition is counted and its error recorded,
    not raised. SIMT kernels are fully checked when defined, so they are not listed in
    `report.defined` (which the tile-kernel specialization reports read)."""
    from . import simt
    real, real_simt = tilesafe.kernel, simt.kernel
    tilesafe.kernel = _recording(report, real, defined=True)
    simt.kernel = _recording(report, real_simt, defined=False)
    try:
        yield
    finally:
        tilesafe.kernel, simt.kernel = real, real_simt


def _recording(report: FileReport, real, defined: bool):
    def recording(fn=None, **options):
        def define(f):
            report.kernels += 1
            name = getattr(f, "__name__", "kernel")
            try:
                k = real(f, **options)
            except KernelError as e:
                report.errors.append(e)
                return RefusedKernel(name, e)
            except Exception as e:   # not a rule the kernel breaks: tilesafe could not build or specialize it
                line = getattr(getattr(f, "__code__", None), "co_firstlineno", None)
                report.unchecked.append(("kernel", _could_not_check(report.path, e, name, line)))
                return RefusedKernel(name, e)
            if defined:
                report.defined.append(k)
            return k
        return define(fn) if fn is not None else define
    return recording


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
