#!/usr/bin/env bash
# One device session on the H200: the GPU tests, then the launch-overhead benchmark.
# Usage (on the GPU machine, from the repo root): bash benchmarks/h200_session.sh "$OUT"
set -uo pipefail
out=${1:-/tmp/out}
mkdir -p "$out"
export PYTHONPATH=src PYTHONUNBUFFERED=1 TILESAFE_CACHE_DIR=/tmp/tilesafe-cache
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider -n 4 tests 2>&1 | tee "$out/gpu_tests.log" | tail -40
timeout 150 python3 benchmarks/launch_overhead.py "$out/launch_overhead.json" 2>&1 | tail -30
