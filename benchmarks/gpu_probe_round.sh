#!/usr/bin/env bash
# One batched H200 call for the session's probes (run from the repo root on the GPU machine):
# each step's output in $OUT/NAME.log (its tail printed), JSON beside it.
# Usage: bash benchmarks/gpu_probe_round.sh "$OUT" [STEPS...]  (default: every step)
set -uo pipefail
out=${1:?out dir}; shift
source benchmarks/gpu_setup.sh                 # the carried wheels, PYTHONPATH and the cache dir
steps=${*:-gaps pdl fusions attention host simt}
step() {   # step NAME TIMEOUT_S COMMAND..., when NAME is among the steps asked for
    case " $steps " in *" $1 "*) run_step "$out" "$@";; esac
}
TAIL=26 step gaps 120 python3 benchmarks/probes/engine_step_gaps.py "$out/gaps.json" 0.6b,4b
TAIL=20 step pdl 120 python3 benchmarks/probes/pdl_chain.py "$out/pdl.json" 0.6b,4b
TAIL=24 step fusions 100 python3 benchmarks/probes/decode_fusions.py "$out/fusions.json"
TAIL=30 step attention 100 python3 benchmarks/probes/decode_attention_sizes.py "$out/attention.json"
TAIL=22 step host 120 python3 benchmarks/host_overhead.py "$out/host_overhead.json"
TAIL=16 step simt 90 python3 benchmarks/simt_bench.py --quick --out "$out"
