"""An independent Philox 4x32-10 and the uniform mapping of Triton's `tl.rand`, written from
the published algorithm (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
SC'11) with Python integers. The oracle of `ts.rand` and of the sampler's random numbers;
nothing here imports tilesafe."""
import numpy as np

M32 = 0xFFFFFFFF


def philox4x32_10(counter, key):
    """Four 32-bit counter words and two key words -> four output words (Python ints)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def uniform(seed: int, offset: int, wide: bool = False) -> np.float32:
    """tl.rand's mapping: counter (offset lo, offset hi, 0, 0), key (seed lo, seed hi); the first
    word as a signed i32 folded onto [0, 2**31), times the f32 4.6566127342e-10. An i32 offset
    (not `wide`) has no high word; seeds and offsets are two's complement."""
    seed, offset = seed & (2**64 - 1), offset & (2**64 - 1 if wide else M32)
    word = philox4x32_10((offset & M32, offset >> 32, 0, 0), (seed & M32, seed >> 32))[0]
    signed = word - 2**32 if word >= 2**31 else word
    folded = signed if signed >= 0 else -signed - 1
    return np.float32(folded) * np.float32(4.6566127342e-10)
