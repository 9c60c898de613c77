"""SIMT examples, each tested on the CPU executor and on the GPU (tests/simt, tests/gpu)."""
