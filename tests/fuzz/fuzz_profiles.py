"""Hypothesis profiles for the fuzzers (docs/fuzzing.md).

- "fuzz-ci" (the default): derandomized (a fixed seed), no example database and a small
  budget, so the folder runs in well under a minute on two cores and a landing is never
  blocked by a case that a random run happens to find that day.
- "fuzz-long": thousands of random examples per test and a local example database (which
  replays earlier failures first), for hunting. Select it with TILESAFE_FUZZ_PROFILE=long —
  read here, in the tests; the library reads no such variable. A failure it finds becomes a
  regression test in test_finds.py.
Profiles are applied per test (`fuzz_settings(n)`), not loaded globally, so the rest of the
suite keeps its own hypothesis settings.
"""
import os
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

# Generated kernels take a while to specialize and interpret; that is expected, not a smell.
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
            HealthCheck.function_scoped_fixture]
LONG_DATABASE = Path(__file__).with_name(".hypothesis-long")   # git-ignored

settings.register_profile("fuzz-ci", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=_SLOW_OK)
settings.register_profile("fuzz-long", derandomize=False, deadline=None, max_examples=3000, print_blob=True,
                          suppress_health_check=_SLOW_OK,
                          database=DirectoryBasedExampleDatabase(str(LONG_DATABASE)))

PROFILE = "fuzz-" + os.environ.get("TILESAFE_FUZZ_PROFILE", "ci")


def fuzz_settings(ci_examples: int, **overrides) -> settings:
    """The selected profile; under "fuzz-ci" with a budget of `ci_examples` examples."""
    profile = settings.get_profile(PROFILE)
    if PROFILE == "fuzz-ci":
        overrides.setdefault("max_examples", ci_examples)
    return settings(profile, **overrides)
