"""A serving step's packed forward (serve/prefill_pack.py): prefill chunks padded to a power
of two (padding at the positions after the chunk, writing nothing), then the decode rows,
then one-token padding chunks up to max_num_seqs, then rows in no chunk up to the row
bucket — the shapes warm-up compiles."""
from tilesafe.engine import SamplingParams
from tilesafe.serve.block_manager import BlockManager
from tilesafe.serve.prefill_pack import pack, rows_bucket, table_width, token_bucket
from tilesafe.serve.request import Request
from tilesafe.engine.sequence import Sequence


def request(name, prompt, tokens=(), computed=0):
    seq = Sequence(0, None, list(prompt), SamplingParams(temperature=0).resolved({}), 64, frozenset())
    seq.tokens = list(tokens)
    return Request(name, seq, sink=None, computed=computed)


def test_buckets():
    assert [token_bucket(n) for n in (1, 16, 17, 100, 256)] == [16, 16, 32, 128, 256]
    assert [rows_bucket(m) for m in (1, 17, 257, 385, 1025)] == [16, 32, 384, 512, 1280]
    assert table_width(8, 4, 20) == 8 + 8                       # room for a 32-row chunk after 8 blocks


def test_chunks_then_decode_rows_then_padding():
    bm = BlockManager(16, 4, prefix_caching=False)
    a = request("a", range(10, 16))                             # 6 prompt tokens, 4 of them this step
    b = request("b", [7, 8, 9], tokens=[40], computed=3)        # decoding: feeds back 40 at position 3
    bm.allocate("a", a.kv_tokens)
    bm.allocate("b", b.kv_tokens)
    p = pack([(a, 4)], [b], bm, seqs=4)
    slot_a = bm.slots("a", 0, 4)
    assert p.starts == [0, 16, 17, 18, 19]                      # a chunk of 16 rows, then 3 one-token chunks
    assert p.ids[:17] == [10, 11, 12, 13] + [0] * 12 + [40]
    assert p.positions[:17] == list(range(16)) + [3]
    assert p.slots[:17] == slot_a + [-1] * 12 + [bm.slot("b", 3)]
    assert p.last == [3, 16, 17, 18]                            # a's real last row, b's row, padding
    assert p.cached == [0, 3, 1, 1]
    assert p.tables[:2] == [bm.block_table("a"), bm.block_table("b")] and p.tables[2:] == [[], []]
    assert p.chunks == 2 and p.rows == 32                        # 19 rows, in the bucket of 32
    assert p.ids[19:] == [0] * 13 and p.slots[17:] == [-1] * 15  # padding writes no cache row


def test_unpadded():
    bm = BlockManager(16, 4, prefix_caching=False)
    a = request("a", range(10, 16))
    bm.allocate("a", a.kv_tokens)
    p = pack([(a, 6)], [], bm, seqs=4, pad=False)
    assert (p.starts, p.rows, p.last, p.slots) == ([0, 6], 6, [5], bm.slots("a", 0, 6))
