#!/usr/bin/env bash
# The closing benchmark call of a session on one H200 (after gpu_session.sh, machine warm):
# the engine (--quick), the held-out random shapes, the SIMT examples and the serving load,
# each under its own timeout; everything in $OUT/bench.tgz (a call returns at most 8 files).
# Usage: bash benchmarks/gpu_final_bench.sh "$OUT"
set -uo pipefail
out=${1:?out dir}
source benchmarks/gpu_setup.sh                 # the carried wheels, PYTHONPATH and the cache dir
r=$out/r; mkdir -p "$r"
step() { run_step "$r" "$@"; }   # step NAME TIMEOUT_S COMMAND...
TAIL=30 step engine 140 python3 benchmarks/engine.py --quick --sizes 0.6b,4b --out "$r/engine.json"
TAIL=14 step random_shapes 130 python3 -m tilesafe.bench --random-shapes 12 --seed 1 --out "$r" --budget-s 100 --no-progress
TAIL=16 step simt 50 python3 benchmarks/simt_bench.py --quick --out "$r"
TAIL=14 step serve 115 bash benchmarks/serve_h200.sh "$r" 105
tar czf "$out/bench.tgz" -C "$out" r && rm -rf "$r"
