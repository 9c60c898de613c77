"""`tilesafe check --target gfx942 FILE.py`: also compile, for that GPU, each launch the file makes.

`tilesafe check` imports a file with launching disabled, so every launch is refused; with
a target, each refused launch is first recorded — its tensors and partitions read as
`ts.spec`s at that moment — and after the file has run, compiled ahead for the target
through Triton (no such GPU needed; `kernel.compile(..., target=)`). A kernel's errors
there (a masked access it denies, a schedule hint the target has no hardware for) are
reported like any other error; a kernel Triton cannot compile for the target is "could not
check". Kernels the file defines but never launches when imported (launches inside
`main()`, say) have no shapes to compile with: they are listed, not passed over silently.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from .errors import CompileError, LaunchError, Loc, TileSafeError, caller_loc, render


@dataclass
class Recorded:
    kernel: object
    args: list
    kwargs: dict
    grid: tuple | None
    loc: Loc | None


@contextlib.contextmanager
def recording(target: str | None):
    """Within the block, record each refused launch (yields the list; None without a target)."""
    if target is None:
        yield None
        return
    from .runtime.kernel import refused_launch_var
    launches: list[Recorded] = []

    def record(kernel, args, kwargs, grid):
        launches.append(Recorded(kernel, [_as_spec(a) for a in args],
                                 {n: v if n == "schedule" else _as_spec(v) for n, v in kwargs.items()}, grid,
                                 caller_loc()))

    token = refused_launch_var.set(record)
    try:
        yield launches
    finally:
        refused_launch_var.reset(token)


def _as_spec(value):
    """A tensor or partition as the `ts.spec` of its layout now (it may be given back later)."""
    import tilesafe as ts
    from .runtime.partition import Partition
    if isinstance(value, Partition):
        return ts.spec(value.shape, value.dtype, tile=value.tile)
    if isinstance(value, ts.Tensor):
        return ts.spec(value.shape, value.dtype, value.strides)
    return value


def compile_all(launches: list[Recorded], target: str, report) -> int:
    """Compile each recorded launch for `target` into `report`; returns how many compiled."""
    compiled = 0
    for r in launches:
        try:
            r.kernel.compile(*r.args, target=target, grid=r.grid, **r.kwargs)
            compiled += 1
        except CompileError as e:   # Triton failed on a kernel tilesafe accepted: unchecked, not refused
            report.unchecked.append(("kernel", render(
                f"could not compile `{r.kernel.name}` for {target}: {(e.message.splitlines()[1:] or [''])[0]}", r.loc,
                f"`kernel.compile(..., target=\"{target}\")` on this launch's arguments shows the full error")))
        except TileSafeError as e:
            if isinstance(e, LaunchError):   # about the launch's arguments or hints: shown at the launch
                e = LaunchError(e.message, r.loc, e.help)
            if all(str(e) != str(seen) for seen in report.errors):
                report.errors.append(e)
        except Exception as e:   # Triton could not compile it for this target
            reason = (str(e).strip().splitlines() or [""])[0]
            report.unchecked.append(("kernel", render(
                f"could not compile `{r.kernel.name}` for {target}: {type(e).__name__}: {reason}".rstrip(": "), r.loc,
                f"`kernel.compile(..., target=\"{target}\")` on this launch's arguments shows the full error")))
    return compiled


def never_launched(defined: list, launches: list[Recorded]) -> list[str]:
    """One line per kernel the file defines but did not launch when imported."""
    launched = {id(r.kernel) for r in launches}
    return [kernel_line(k) for k in defined if id(k) not in launched]


def kernel_line(k, note: str = "") -> str:
    """A kernel as one line of a list in the check's report: its name and where it is defined."""
    loc = k.src.loc(k.src.tree)
    return f"  {k.name} at {loc.file}:{loc.line}{note}"
