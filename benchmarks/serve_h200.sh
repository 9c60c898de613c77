#!/usr/bin/env bash
# The serving load benchmark on one H200 (run from the repo root on the GPU machine, with the
# server's wheels carried in .whl/: fastapi, starlette, pydantic(+core), uvicorn, h11, anyio,
# sniffio, idna, click, prometheus_client, openai, jiter, httpx2, httpcore2, ...): Qwen3-4B
# random weights in an in-process server, 1/8/32 concurrent streaming clients, without and
# with a 256-token shared prefix, in one process within TIMEOUT_S (default 120).
# Writes serve_load_4b.json (+ .png when matplotlib is there; else draw it anywhere with
# `python benchmarks/serve_load.py --plot OUT/serve_load_4b.json`) and serve_load.log to OUT.
# Usage: bash benchmarks/serve_h200.sh "$OUT" [TIMEOUT_S]
set -uo pipefail
out=${1:?out dir}
mkdir -p "$out"
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=src:/tmp/site PYTHONUNBUFFERED=1 TILESAFE_CACHE_DIR=/tmp/tilesafe-cache
python3 -c "import fastapi, uvicorn, httpx2, prometheus_client, torch; print('fastapi', fastapi.__version__, 'torch', torch.__version__)" || exit 1
timeout "${2:-120}" python3 benchmarks/serve_load.py --random-weights 4b --concurrency 1,8,32 --shared-prefix 0,256 \
    --prompt-len 64:256 --output-len 32:96 --max-model-len 1024 --max-num-seqs 32 \
    --out "$out/serve_load_4b.json" --png "$out/serve_load_4b.png" > "$out/serve_load.log" 2>&1
rc=$?
tail -20 "$out/serve_load.log"
exit $rc
