#!/usr/bin/env bash
# One full device round on the H200 (about 6 minutes): GPU tests, launch overhead, tuning of
# some shape classes (merged into the tuned table), then the quick benchmark on those configs.
# Usage (on the GPU machine, from the repo root): bash benchmarks/gpu_round.sh "$OUT" COMMIT [ONLY...]
# ONLY: tuner --only filters (default: none, no tuning). Files come back in $OUT.
set -uo pipefail
out=${1:?out dir}; commit=${2:-local}; shift 2 || true
export PYTHONPATH=src PYTHONUNBUFFERED=1 TILESAFE_CACHE_DIR=/tmp/tilesafe-cache
(timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 tests 2>&1 | tail -40) > "$out/gpu_tests.log"
tail -3 "$out/gpu_tests.log"
timeout 150 python3 benchmarks/launch_overhead.py "$out/launch_overhead.json" > /dev/null 2>&1
python3 -c "import json; d=json.load(open('$out/launch_overhead.json')); print('launch', d['safe_launch_us'], d['raw_triton_launch_us'], d['graph_replay_us_per_kernel'])"
tmp=$(mktemp -d)   # at most 8 files come back: per-run tuning files stay here, merged below
for only in "$@"; do
    timeout 200 python3 benchmarks/tune_h200.py --budget-s 150 --only "$only" --out "$tmp/tuned-$only.json" \
        >> "$out/tune.log" 2>&1
    python3 benchmarks/merge_tuned.py "$tmp/tuned-$only.json"
done
[ $# -gt 0 ] && python3 -c "import json, glob, sys; json.dump({p: json.load(open(p)) for p in glob.glob('$tmp/*.candidates.json')}, open('$out/tune-candidates.json', 'w'))"
cp src/tilesafe/kernels/tuned/nvidia-h200.json "$out/nvidia-h200.json"
timeout 220 python3 -m tilesafe.bench --quick --no-progress --out "$out" --budget-s 190 --commit "$commit" \
    2>"$tmp/bench.log" > "$out/summary.txt"
tail -3 "$tmp/bench.log"
python3 -m tilesafe.bench --markdown "$out"/bench-*.json
