"""Run one fuzz `Case` on a backend and check it against the oracle and the other backends.

The properties (issue 15):
1. a safe kernel never gets a sanitizer report, a CompileError, nor an exception that is no TileSafeError;
2. every backend ends the same way: the same refusal class, or results equal to the oracle;
3. every byte of the output's buffer outside the view keeps its poison, and the inputs'
   buffers are never changed;
4. a refusal is raised before any byte changed (the whole poisoned buffer is compared);
5. (S7) an output view sharing elements with the input view is refused with AliasError;
6. (S14) after a launch into a `ts.empty` output, a host read succeeds exactly when every
   element was stored (a store under `if` or in a loop may be counted as not writing), and
   then shows the stored values.
`failures` returns the broken properties as short strings, so the test can print them all
and known-open classes can be told apart from new finds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import tilesafe as ts

import kernel_oracle
from kernel_cases import Case
from kernel_gen import render

# Finite, so a kernel that loads its own poisoned tile (z.load()) still shows its other loads.
POISON = np.float32(-777.25)
SENTINEL = np.float32(1.0e6)        # input-buffer elements outside the view
CRASH = "crash"                     # Outcome.error of an exception that is no TileSafeError


@dataclass
class Arrays:
    """The host values a case starts from (the same on every backend)."""
    out_base: np.ndarray | None      # None for a ts.empty output
    in_bases: list[np.ndarray]

    def out_view(self, case: Case) -> np.ndarray | None:
        return None if self.out_base is None else case.out_view.of(self.out_base)

    def in_views(self, case: Case) -> list[np.ndarray]:
        return [v.of(b) for v, b in zip(case.in_views, self.in_bases)]


@dataclass
class Outcome:
    error: str | None                # the refusal's class name, or None
    message: str
    out: np.ndarray | None           # the whole output buffer after the launch (the view for ts.empty)
    in_bases: list[np.ndarray]
    empty_read_refused: bool = False


def arrays(case: Case) -> Arrays:
    """Inputs hold random values inside their views and SENTINEL around them; the output's
    buffer holds POISON (and, when x0 shares it, x0's values inside x0's view)."""
    rng = np.random.default_rng(case.seed)
    out_base = None if case.out_view is None else np.full(case.out_view.base_shape, POISON, np.float32)
    in_bases = []
    for i, view in enumerate(case.in_views):
        base = out_base if case.shared and i == 0 else np.full(view.base_shape, SENTINEL, np.float32)
        target = view.of(base)
        target[...] = rng.standard_normal(target.shape).astype(np.float32)
        in_bases.append(base)
    return Arrays(out_base, in_bases)


def run(kernel, case: Case, start: Arrays, backend: str, device: str | None = None) -> Outcome:
    """Launch the case's kernel on `backend`; any TileSafeError is a refusal, recorded."""
    with ts.backend(backend):
        if case.out_view is None:
            out_base = z = ts.empty(case.out_shape, device=device)
        else:
            out_base = ts.tensor(start.out_base, device=device)
            z = case.out_view.of(out_base)
        in_bases = [out_base if case.shared and i == 0 else ts.tensor(b, device=device)
                    for i, b in enumerate(start.in_bases)]
        xs = [v.of(b) for v, b in zip(case.in_views, in_bases)]
        p = z.partition(case.program.tile)
        scalars = {f"s{i}": v for i, v in enumerate(case.scalars)}
        error, message = None, ""
        try:
            kernel(p, *xs, **scalars).sync()
        except ts.TileSafeError as e:
            error, message = type(e).__name__, e.message
        except Exception as e:         # never right for a safe kernel: recorded, so it is reported with the case
            error, message = CRASH, f"{type(e).__name__}: {e}"
        p.unpartition()
        inputs_after = [b.numpy() for b in in_bases[int(case.shared):]]   # a shared x0 is checked with the output
        if case.out_view is not None:
            return Outcome(error, message, out_base.numpy(), inputs_after)
        try:
            return Outcome(error, message, z.numpy(), inputs_after)
        except ts.OwnershipError:
            return Outcome(error, message, None, inputs_after, empty_read_refused=True)


def expected(case: Case, start: Arrays) -> tuple[np.ndarray | None, np.ndarray]:
    """The oracle's output buffer (the view alone for ts.empty) and its stored-elements mask."""
    before = start.out_view(case)
    if before is None:
        before = np.full(case.out_shape, POISON, np.float32)
    result = kernel_oracle.run(case.program, before, start.in_views(case), list(case.scalars))
    if start.out_base is None:
        return result.out, result.stored
    base = start.out_base.copy()
    case.out_view.of(base)[...] = result.out
    return base, result.stored


def failures(case: Case, start: Arrays, outcomes: dict[str, Outcome]) -> list[str]:
    """Every property the outcomes break (empty when the case passes)."""
    found = []
    want, stored = expected(case, start)
    errors = {b: o.error for b, o in outcomes.items()}
    for b, o in outcomes.items():
        if o.error == CRASH:
            found.append(f"crash on {b}: {o.message}")
        if o.error == "CompileError":   # a TileSafeError, but the compiler's failure, never a refusal
            found.append(f"compiler failure on {b}: {o.message}")
        if o.error == "SanitizerError":
            found.append(f"sanitizer report in a safe kernel on {b}: {o.message}")
        if case.views_meet() and o.error != "AliasError":
            found.append(f"S7: the output and x0 share elements of one buffer, but {b} "
                         f"{'accepted the launch' if o.error is None else 'raised ' + o.error}")
        for before, after in zip(start.in_bases[int(case.shared):], o.in_bases):
            if not np.array_equal(before, after):
                found.append(f"an input buffer changed on {b}")
    if len(set(errors.values())) > 1:
        found.append(f"backends end differently: {errors} ({[o.message for o in outcomes.values()]})")
    for b, o in outcomes.items():
        if o.error == CRASH:
            continue
        if o.error is not None:
            if start.out_base is not None and not np.array_equal(o.out, start.out_base, equal_nan=True):
                found.append(f"{b} refused ({o.error}: {o.message}) after writing bytes")
            continue
        if start.out_base is None:
            found += _empty_output(b, o, want, stored, _stores_unconditionally(case.program))
        elif not np.array_equal(o.out, want, equal_nan=True):
            found.append(f"{b} differs from the oracle{_where(o.out, want, case)}")
    return found


def _stores_unconditionally(p) -> bool:
    return any(s[0] == "store" for s in p.body)


def report(case: Case, found: list[str]) -> str:
    """The assertion message of a failing case: what broke, the kernel, the case to replay."""
    return "\n".join(["the fuzzer found:", *(f"  - {f}" for f in found), "kernel:", render(case.program),
                      f"case: {case!r}"])


def _empty_output(backend: str, o: Outcome, want, stored, unconditional: bool) -> list[str]:
    """S14 after a launch into ts.empty. A store under `if` or in a loop may be counted as not
    writing (refusing the read is sound); a top-level store always writes the whole tile."""
    if not stored.all():
        if not o.empty_read_refused:
            return [f"S14: reading a ts.empty output after a launch that stored {int(stored.sum())} of "
                    f"{stored.size} elements was accepted on {backend}"]
        return []
    if o.empty_read_refused:
        if not unconditional:
            return []
        return [f"S14: the kernel stores unconditionally, but reading the output was refused on {backend}"]
    if not np.array_equal(o.out, want, equal_nan=True):
        return [f"{backend} differs from the oracle (ts.empty output)"]
    return []


def _where(got, want, case) -> str:
    bad = np.argwhere(~((got == want) | (np.isnan(got) & np.isnan(want))))
    first = tuple(int(i) for i in bad[0])
    inside = "" if case.out_view is None else " (outside the view)" if not _in_view(first, case) else " (in the view)"
    return f": {len(bad)} elements, first at buffer index {first}{inside}: got {got[first]}, want {want[first]}"


def _in_view(index, case) -> bool:
    marks = np.zeros(case.out_view.base_shape, bool)
    case.out_view.of(marks)[...] = True
    return bool(marks[index])
