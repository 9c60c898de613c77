"""2-D transpose of a 16-bit matrix (f16, bf16) that moves 32-bit words: pairs of halves.

One half a thread leaves the f16 transpose bound by instructions (a warp moves 64 bytes a row with
the instructions f32 spends on 128). Seen as int32 words (`x.view(torch.int32)`: a word is a pair
of neighbouring columns), the transpose of the halves is a transpose of 2 x 2 blocks of halves:
input rows 2i and 2i+1 at word j hold x[2i, 2j:2j+2] (lo) and x[2i+1, 2j:2j+2] (hi), and output
rows 2j and 2j+1 at word i are

    out[2j,   2i:2i+2] = lo's low half  | hi's low half  << 16
    out[2j+1, 2i:2i+2] = lo's high half | hi's high half << 16

so every thread reads and writes whole words, as the f32 transpose does. A block of TC x ROWS
threads moves an output tile of 2*TC rows x TC words: it stages the input's 2*TC rows x TC words
in a padded shared tile (even input rows in the tile's first TC rows, odd ones in the last TC, so
the two words an output word combines are TC + 1 words apart and a warp's reads hit 32 banks),
then each thread combines KP words of the tile into KP output words. Both walks are chunk(KP)
permits (reads first, stores after); nothing is indexed by a computed write.

`transpose_f16(out, x)` is the user's entry: the word kernel when both extents are even and the
tensors are contiguous (the int32 views exist), else the one-half-a-thread kernel.
"""
import tilesafe as ts
from tilesafe import simt

TC, ROWS = 64, 8        # a block: TC output words wide (threads x), ROWS threads y (H200: 64 beat 32)
KP = 2 * TC // ROWS     # words a thread moves each way (16)


@simt.kernel(contract=simt.Contract(block=(TC, ROWS)))
def transpose_pairs(out: simt.Disjoint[ts.i32, ("C", "H")], x: simt.Ref[ts.i32, ("R", "W")],
                    C: int, H: int, R: int, W: int):
    """x: an (R, 2W) 16-bit matrix as (R, W) words; out: its (C = 2W, R = 2H) transpose as (C, H) words."""
    tile = simt.shared((2 * TC, TC + 1), ts.i32)     # row a < TC: the block's input row 2a; a >= TC: row 2(a-TC)+1
    bx, by = simt.block_id(0), simt.block_id(1)     # out: words bx*TC.., rows by*2TC..; x: rows bx*2TC.., words by*TC..
    for p in tile.permits(simt.chunk(KP)):          # p = (ty + 8j, tx): coalesced along x's words
        tile[p] = x.get((bx * 2 * TC + 2 * (p[0] % TC) + p[0] // TC, by * TC + p[1]), 0)
    simt.barrier()
    for p in out.permits(simt.chunk(KP)):           # p = (r, c): out row r is x's half-column r; word c, rows 2c, 2c+1
        out[p] = ((tile[p[1] % TC, p[0] % (2 * TC) // 2] >> (16 * (p[0] % 2))) & 0xFFFF) \
            | ((tile[p[1] % TC + TC, p[0] % (2 * TC) // 2] >> (16 * (p[0] % 2))) << 16)


TILE1, ROWS1 = 64, 8


@simt.kernel(contract=simt.Contract(block=(TILE1, ROWS1)))
def transpose_halves(out: simt.Disjoint[ts.f16, ("C", "R")], x: simt.Ref[ts.f16, ("R", "C")], R: int, C: int):
    """One half a thread (any extents): the f32 example's form for f16."""
    tile = simt.shared((TILE1, TILE1 + 1), ts.f16)
    bx, by = simt.block_id(0), simt.block_id(1)
    for p in tile.permits(simt.chunk(TILE1 // ROWS1)):
        tile[p] = x.get((bx * TILE1 + p[0], by * TILE1 + p[1]), 0.0)
    simt.barrier()
    for p in out.permits(simt.chunk(TILE1 // ROWS1)):
        out[p] = tile[p[1] % TILE1, p[0] % TILE1]


def transpose_f16(out, x):
    """out = x.t() for 16-bit torch tensors x (R, C) and out (C, R); returns the launch's future."""
    r, c = x.shape
    # the word views' extents are not tied by name: a wrong `out` takes the halves kernel, whose launch refuses it
    if r % 2 == 0 and c % 2 == 0 and tuple(out.shape) == (c, r) and x.is_contiguous() and out.is_contiguous():
        import torch
        return transpose_pairs(out.view(torch.int32), x.view(torch.int32))
    return transpose_halves(out, x)
