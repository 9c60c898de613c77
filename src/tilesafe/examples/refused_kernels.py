"""What tilesafe refuses: six unsafe kernels and launches, and the errors they get.

Each case below breaks one safety rule. Kernel errors are found when `@ts.kernel` runs or
when the kernel is first specialized; launch errors are found before any work starts, so a
refused launch writes nothing. `tilesafe demo` prints these errors in full.
"""
import numpy as np

import tilesafe as ts


def store_to_ref():
    """S2: a ts.Ref input is read-only."""
    @ts.kernel
    def copy(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
        x.store(ts.load_tile_like(x, z))


def forged_store_index():
    """S1: a ts.MutTiles output is stored only at indices its own walk minted."""
    @ts.kernel
    def transpose_tiles(c: ts.MutTiles[ts.f32, (16, 16)], a: ts.Ref[ts.f32, ("M", "N")], M: int, N: int):
        for idx in c.tiles():
            c.store(ts.load(a, idx, shape=(16, 16)), (idx[1], idx[0]))   # two blocks may write one tile
    transpose_tiles(ts.empty((32, 32)).partition((16, 16)), ts.zeros((32, 32)))


def output_aliases_input():
    """S7: an output's bytes are reachable through no other argument."""
    @ts.kernel
    def add_one(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
        z.store(ts.load_tile_like(x, z) + 1.0)
    buf = ts.tensor(np.arange(96, dtype=np.float32))            # (96,)
    add_one(buf[0:64].partition((16,)), buf[32:96])              # elements 32..63 are in both


def use_while_lent():
    """S8: a partitioned tensor is lent to the partition until unpartition() gives it back."""
    z = ts.zeros(64)
    pz = z.partition((16,))                                      # noqa: F841 (lent until unpartitioned)
    z.numpy()


def read_uninitialised():
    """S14: memory from ts.empty is write-only until every element has been written."""
    @ts.kernel
    def add_one(z: ts.Mut[ts.f32, (16,)], x: ts.Ref[ts.f32, ("N",)], N: int):
        z.store(ts.load_tile_like(x, z) + 1.0)
    add_one(ts.empty(64).partition((16,)), ts.empty(64))


def non_power_of_two_tile():
    """S3: tile shapes are static powers of two."""
    @ts.kernel
    def scale(z: ts.Mut[ts.f32, (100,)], x: ts.Ref[ts.f32, ("N",)], N: int):
        z.store(2.0 * ts.load_tile_like(x, z))


CASES = [
    ("store to a ts.Ref", store_to_ref, ts.KernelError),
    ("forged store index for a ts.MutTiles output", forged_store_index, ts.KernelError),
    ("an output aliasing an input", output_aliases_input, ts.AliasError),
    ("a tensor used while lent to a partition", use_while_lent, ts.OwnershipError),
    ("reading ts.empty memory", read_uninitialised, ts.OwnershipError),
    ("a non-power-of-two tile", non_power_of_two_tile, ts.KernelError),
]


def refusal(case) -> ts.TileSafeError:
    """Run one case and return the error tilesafe raised (it must raise the expected class)."""
    title, run, expected = case
    try:
        run()
    except ts.TileSafeError as e:
        assert isinstance(e, expected), f"{title}: expected {expected.__name__}, got {type(e).__name__}: {e}"
        return e
    raise AssertionError(f"{title}: tilesafe did not refuse it")


def main():
    for case in CASES:
        e = refusal(case)
        print(f"refused_kernels: ok, {case[0]}: {type(e).__name__}: {e.message}")


if __name__ == "__main__":
    main()
