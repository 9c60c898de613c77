#!/usr/bin/env bash
# The closing H200 call of a session: the GPU tests and the host-overhead benchmark
# (gpu_session.sh), then the engine and SIMT benchmarks; everything in one archive,
# $OUT/final.tgz (a call returns at most 8 files).
# Usage: bash benchmarks/gpu_final_session.sh "$OUT" [TEST_TIMEOUT_S]
set -uo pipefail
out=${1:?out dir}
r=$out/r; mkdir -p "$r"
bash benchmarks/gpu_session.sh "$r" "${2:-220}" 80
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 TILESAFE_CACHE_DIR=/tmp/tilesafe-cache
timeout 200 python3 benchmarks/engine.py --quick --sizes 0.6b,4b --out "$r/engine.json" > "$r/engine.log" 2>&1
echo "== engine rc=$?"; tail -8 "$r/engine.log"
timeout 45 python3 benchmarks/simt_bench.py --quick --out "$r" > "$r/simt.log" 2>&1
echo "== simt rc=$?"; tail -12 "$r/simt.log"
tar czf "$out/final.tgz" -C "$out" r && rm -rf "$r"
