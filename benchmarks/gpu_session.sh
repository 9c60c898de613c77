#!/usr/bin/env bash
# One batched H200 call (run from the repo root on the GPU machine; files come back in $OUT):
# the GPU tests (captured prints of passing tests kept: the engine and sampling tests print
# their measurements), then the host-overhead benchmark. Wheels the tests need (hypothesis;
# numpy 2.3 for numba-cuda) are carried in .whl and installed to /tmp/site first.
# Usage: bash benchmarks/gpu_session.sh "$OUT" [TEST_TIMEOUT_S] [HOST_TIMEOUT_S]
set -uo pipefail
out=${1:?out dir}
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=src:/tmp/site PYTHONUNBUFFERED=1 TILESAFE_CACHE_DIR=/tmp/tilesafe-cache
python3 -c "import numpy, torch, numba; print('numpy', numpy.__version__, 'torch', torch.__version__, 'numba', numba.__version__)"
timeout "${2:-330}" python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 --timeout="${PYTEST_TIMEOUT:-75}" --tb=short -rfEP --junitxml="$out/junit.xml" tests > "$out/gpu_tests.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed|error" "$out/gpu_tests.log" | tail -40
if [ "${3:-200}" != 0 ]; then
    timeout "${3:-200}" python3 benchmarks/host_overhead.py "$out/host_overhead.json" > "$out/host.log" 2>&1
    tail -32 "$out/host.log"
fi
