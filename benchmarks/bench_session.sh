#!/usr/bin/env bash
# The quick kernel benchmark in one device call (< 8 minutes on an H200).
# Usage (on the GPU machine, from the repo root): bash benchmarks/bench_session.sh "$OUT" [COMMIT]
# Writes $OUT/bench-<time>-quick.json (after every workload, so a cut-off run still leaves
# results), $OUT/summary.txt (the table) and $OUT/bench.log (progress and warnings).
set -uo pipefail
out=${1:-/tmp/out}
commit=${2:-}
mkdir -p "$out"
export PYTHONPATH=src PYTHONUNBUFFERED=1 TILESAFE_CACHE_DIR=/tmp/tilesafe-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
# --budget-s: start no workload after 330 s; timeout: a hard stop well inside the call's limit.
timeout 450 python3 -m tilesafe.bench --quick --out "$out" --budget-s 330 ${commit:+--commit "$commit"} \
    2>"$out/bench.log" | tee "$out/summary.txt"
status=${PIPESTATUS[0]}
tail -5 "$out/bench.log"
exit "$status"
