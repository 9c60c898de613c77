# Sourced by the batched GPU-call scripts (run from the repo root on the GPU machine): installs the
# wheels carried in .whl/ to /tmp/site (the machine reaches no index) and sets the environment every
# step runs in. One place, so the scripts install and import the same way.
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 TILESAFE_CACHE_DIR=/tmp/tilesafe-cache

run_step() {   # run_step LOG_DIR NAME TIMEOUT_S COMMAND...: its output in LOG_DIR/NAME.log, its last ${TAIL:-12} lines printed
    local dir=$1 name=$2 t=$3; shift 3
    local t0=$SECONDS
    timeout "$t" "$@" > "$dir/$name.log" 2>&1; echo "== $name rc=$? $((SECONDS - t0)) s"
    tail -n "${TAIL:-12}" "$dir/$name.log" | cut -c1-240
}
