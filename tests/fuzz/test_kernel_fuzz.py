"""The differential safety fuzzer (issue 15): random small kernels over extreme runtime
scalars, strided views and control flow around stores, run on the reference backend with the
sanitizer and on Triton's interpreter, each checked against an independent NumPy oracle.

What a case checks is listed in kernel_run.py. A refusal (a TileSafeError from the launch) is
allowed, but it must be the same class on every backend and come before any byte changed.
"""
from hypothesis import assume, given

import tilesafe as ts

import kernel_gen
import kernel_run
from fuzz_profiles import PROFILE, fuzz_settings
from kernel_cases import cases


def _cpu_backends() -> list[str]:
    try:
        import tilesafe.backends.triton.backend  # noqa: F401
    except Exception:   # Triton missing: the reference backend against the oracle alone
        return ["reference"]
    return ["reference", "triton-interpreter"]


BACKENDS = _cpu_backends()

# Failure classes of holes that are known and being fixed elsewhere, as
# {name: (issue item, predicate over one failure text)}. A CI run skips a case only when
# *every* failure it shows is in a known class; remove an entry once its fix lands (the
# long profile keeps checking them meanwhile, since KNOWN_OPEN is ignored there).
# Empty now: the holes this fuzzer found (tests/fuzz/test_finds.py) are fixed in the tree.
KNOWN_OPEN: dict = {}


def known_open(failures: list[str]) -> list[str]:
    """The known-open classes that explain every failure, or [] when one is new."""
    names = []
    for text in failures:
        hits = [name for name, (_, matches) in KNOWN_OPEN.items() if matches(text)]
        if not hits:
            return []
        names += hits
    return names


def check_case(case, backends=BACKENDS, device=None) -> list[str]:
    """Define the case's kernel, run it on every backend, return the broken properties."""
    try:
        kernel = kernel_gen.define(case.program)
    except ts.KernelError:
        # The grammar only builds valid kernels; a definition-time refusal is a refusal of
        # the program (before any launch), not a safety failure. Count it as a rejected case.
        assume(False)
    start = kernel_run.arrays(case)
    outcomes = {b: kernel_run.run(kernel, case, start, b, device) for b in backends}
    return kernel_run.failures(case, start, outcomes)


@fuzz_settings(50)
@given(case=cases())
def test_random_kernels_agree_with_the_oracle_on_every_backend(case):
    found = check_case(case)
    if found and PROFILE == "fuzz-ci":
        assume(not known_open(found))
    assert not found, kernel_run.report(case, found)
