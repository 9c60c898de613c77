"""tilesafe.bench: the kernel library against PyTorch and hand-written Triton, on the GPU.

`python -m tilesafe.bench [KERNEL...] [--quick] [--out DIR]` (or `tilesafe bench ...`)
checks every implementation against an fp32 oracle on random data, then times it as
DESIGN §6 asks (CUDA events, the median of many launches, inputs rotated through a working
set of at least 3x L2, kernels under ~50 us inside a captured CUDA graph), writes one JSON
per run and prints a summary with each target's pass or miss. `--dry-run` runs only the
checks, at tiny sizes, on a CPU backend; `--plot RESULTS.json` renders PNGs on any machine.
See docs/benchmarks.md.
"""
