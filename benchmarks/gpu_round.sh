#!/usr/bin/env bash
# One device round on the H200: GPU tests, launch overhead, tuning of some shape classes
# (merged into the tuned table), then the quick benchmark on those configs.
# Usage (on the GPU machine, from the repo root): bash benchmarks/gpu_round.sh "$OUT" COMMIT [ONLY...]
# ONLY: tuner --only filters (default: none, no tuning). Files come back in $OUT.
# Environment: TUNE_BUDGET_S (per filter, default 150), SKIP_TESTS / SKIP_LAUNCH / SKIP_BENCH=1,
# BENCH_ARGS (extra `tilesafe.bench` arguments, e.g. kernel names), BENCH_BUDGET_S (default 190).
set -uo pipefail
out=${1:?out dir}; commit=${2:-local}; shift 2 || true
export PYTHONPATH=src PYTHONUNBUFFERED=1 TILESAFE_CACHE_DIR=/tmp/tilesafe-cache
budget=${TUNE_BUDGET_S:-150}
if [ -z "${SKIP_TESTS:-}" ]; then
    (timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 tests 2>&1 | tail -40) > "$out/gpu_tests.log"
    tail -3 "$out/gpu_tests.log"
fi
if [ -z "${SKIP_LAUNCH:-}" ]; then
    timeout 150 python3 benchmarks/launch_overhead.py "$out/launch_overhead.json" > /dev/null 2>&1
    python3 -c "import json; d=json.load(open('$out/launch_overhead.json')); print('launch', d['safe_launch_us'], d['raw_triton_launch_us'], d['graph_replay_us_per_kernel'])"
fi
tmp=$(mktemp -d)   # at most 8 files come back: per-run tuning files stay here, merged below
for only in "$@"; do
    table="$tmp/tuned-${only//[^A-Za-z0-9=]/_}.json"
    timeout $((budget + 60)) python3 benchmarks/tune_h200.py --budget-s "$budget" --only "$only" --out "$table" \
        >> "$out/tune.log" 2>&1
    python3 benchmarks/merge_tuned.py "$table"
done
[ $# -gt 0 ] && python3 -c "import json, glob, sys; json.dump({p: json.load(open(p)) for p in glob.glob('$tmp/*.candidates.json')}, open('$out/tune-candidates.json', 'w'))"
cp src/tilesafe/kernels/tuned/nvidia-h200.json "$out/nvidia-h200.json"
if [ -z "${SKIP_BENCH:-}" ]; then
    bb=${BENCH_BUDGET_S:-190}
    timeout $((bb + 30)) python3 -m tilesafe.bench --quick --no-progress --out "$out" --budget-s "$bb" \
        --commit "$commit" ${BENCH_ARGS:-} 2>"$tmp/bench.log" > "$out/summary.txt"
    tail -3 "$tmp/bench.log"
    python3 -m tilesafe.bench --markdown "$out"/bench-*.json
fi
