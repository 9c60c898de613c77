#!/usr/bin/env bash
# One batched H200 call for the benchmarks (run from the repo root on the GPU machine): the engine,
# the held-out random shapes, the SIMT examples, the paged KV kernels and a cProfile of eager
# library calls. Everything lands in one archive, $OUT/bench.tgz (a call returns at most 8 files).
# Usage: bash benchmarks/gpu_bench_session.sh "$OUT"
set -uo pipefail
out=${1:?out dir}
source benchmarks/gpu_setup.sh                 # the carried wheels, PYTHONPATH and the cache dir
r=$out/r; mkdir -p "$r"
step() { run_step "$r" "$@"; }   # step NAME TIMEOUT_S COMMAND...
TAIL=25 step engine 210 python3 benchmarks/engine.py --quick --sizes 0.6b,4b --out "$r/engine.json"
step random_shapes 200 python3 -m tilesafe.bench --random-shapes 12 --seed 1 --out "$r" --budget-s 150 --no-progress
step simt 80 python3 benchmarks/simt_bench.py --quick --out "$r"
step paged_kv 50 python3 benchmarks/paged_kv.py "$r/paged_kv.json"
TAIL=4 step profile 40 bash -c "cd benchmarks && python3 profile_gpu_calls.py $r/profile.txt --calls 200"
tar czf "$out/bench.tgz" -C "$out" r && rm -rf "$r"
