"""Raw Triton twins of the library's kernels: the same tiling, written by hand without
tilesafe, so tilesafe's time over the twin's is the cost of safety."""
