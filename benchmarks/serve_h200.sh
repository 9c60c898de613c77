#!/usr/bin/env bash
# The serving load benchmark on one H200 against the offline engine (issue 19's targets: the
# server within 5% of LLM.generate's throughput on the same batches at 1/8/32/128 clients;
# p99 ITL at 32 clients under 2x the batch-1 step). Run from the repo root on the GPU
# machine, with the server's wheels carried in .whl/ (fastapi, starlette, pydantic(+core),
# uvicorn, h11, anyio, sniffio, idna, click, prometheus_client, openai, jiter, httpx2,
# httpcore2, ...). Random weights of the Qwen3-4B, then the 8B shape, each an in-process
# server of 128 sequences that warms up (every decode bucket, the mixed steps of one and two
# fresh prompts) before its first level; one prompt and output length (128, 64 tokens) so that every offline batch
# has the first's shapes (like for like: neither side compiles while timed); 4 requests per client at 4B, 2 at 8B
# (SERVE_RPC sets both: what fits a final run's budget), the clients in worker processes (not on the server's GIL), and the
# server sending each request's tokens every other step while 64 or more run (SERVE_FLAGS, default
# '--stream-interval 2': at 128 clients the HTTP loop's per-token work competes with the engine thread for
# the GIL). The 8B runs its levels largest first and
# starts from the compile cache the 4B run filled (TILESAFE_CACHE_DIR), its 1-client level with 4 requests (8 for
# the 4B) so that all four levels fit its budget.
# Writes serve_load_{4b,8b}.json, .log and .png (the plot, where matplotlib is installed; else `serve_load.py --plot
# JSON` draws it later) to OUT; each JSON is rewritten after every level, so a timeout keeps the levels measured.
# Session 19-20 durations on the H200 (4B): start-up 35-52 s (engine warm-up 30-47 s), then per level with its
# offline batches ~5 s at 1 client (8 requests), ~3 s at 8, ~5 s at 32, ~6 s at 128; 8B start-up ~30 s from the 4B's
# compile cache, levels ~4-10 s.
# Usage: [SERVE_FLAGS='--stream-interval 2 ...'] bash benchmarks/serve_h200.sh OUT [SECONDS_4B [SECONDS_8B]]
# (default 250, 270 s; SERVE_FLAGS replace the default '--stream-interval 2 --decode-step-tokens itl,off' in
# serve_load.py's flags). Each level runs once per decode-step rows value on the same server: `itl` (what `tilesafe
# serve` runs by default) and `off`; SERVE_FLAGS='--stream-interval 2 --decode-step-tokens auto,off,128' compares
# others (about 12 s more per value at 4B).
set -uo pipefail
out=${1:?out dir}
mkdir -p "$out"
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=src:/tmp/site PYTHONUNBUFFERED=1 TILESAFE_CACHE_DIR=/tmp/tilesafe-cache
python3 -c "import fastapi, uvicorn, httpx2, prometheus_client, torch; print('fastapi', fastapi.__version__, 'torch', torch.__version__)" || exit 1
rc=0
run() {   # size, concurrency levels, seconds, fewest requests a level, requests a client
    timeout "$3" python3 benchmarks/serve_load.py --random-weights "$1" --concurrency "$2" --offline \
        --min-requests "$4" \
        --prompt-len 128 --output-len 64 --max-model-len 256 --max-num-seqs 128 --max-num-batched-tokens 512 \
        --requests-per-client "${SERVE_RPC:-$5}" ${SERVE_FLAGS---stream-interval 2 --decode-step-tokens itl,off} \
        --out "$out/serve_load_$1.json" --png "$out/serve_load_$1.png" > "$out/serve_load_$1.log" 2>&1 || rc=$?
    tail -16 "$out/serve_load_$1.log"
}
run 4b 1,8,32,128 "${2:-250}" 8 4
run 8b 128,32,8,1 "${3:-270}" 4 2
exit $rc
