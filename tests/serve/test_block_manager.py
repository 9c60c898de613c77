"""The paged KV cache's block manager: tables, slots, prefix caching, eviction, errors, and a
property test that replays random schedules against a model of the cache's contents."""
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilesafe as ts
from tilesafe.serve import BlockManager, BlockManagerError

HERE = __file__


def line_of(marker: str) -> int:
    with open(HERE) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


def test_slots_follow_the_block_table():
    bm = BlockManager(num_blocks=8, block_size=4)
    assert bm.allocate("a", range(10)) == 0
    table = bm.block_table("a")
    assert len(table) == 3 and len(set(table)) == 3
    assert bm.slots("a", 0, 10) == [table[p // 4] * 4 + p % 4 for p in range(10)]
    assert bm.num_free_blocks == 5 and bm.stats().used == 3


def test_append_takes_a_block_only_at_a_boundary():
    bm = BlockManager(num_blocks=4, block_size=4)
    bm.allocate("a", range(3))
    bm.append("a", [3])
    assert len(bm.block_table("a")) == 1
    bm.append("a", [4])
    assert len(bm.block_table("a")) == 2 and bm.num_tokens("a") == 5


def test_append_in_block_takes_only_a_slot_of_the_last_block():
    bm = BlockManager(num_blocks=4, block_size=4)
    bm.allocate("a", [1, 2, 3, 4, 5])                   # 2 blocks, 3 free slots in the second
    table = bm.block_table("a")
    assert bm.append_in_block("a", 5, 6) and bm.num_tokens("a") == 6
    assert not bm.append_in_block("a", 5, 7) and bm.num_tokens("a") == 6     # not the count it has: no change
    assert bm.append_in_block("a", 6, 7) and bm.append_in_block("a", 7, 8)
    assert not bm.append_in_block("a", 8, 9)            # the next slot needs a new block: no change
    assert bm.num_tokens("a") == 8 and bm.block_table("a") == table and bm.stats().used == 2
    assert not bm.append_in_block("b", 0, 1)            # unknown: no change, no error
    bm.append("a", [9])
    assert bm.slot("a", 8) == bm.block_table("a")[2] * 4
    assert bm.slots("a", 5, 8) == [table[1] * 4 + i for i in (1, 2, 3)]


def test_free_returns_every_block():
    bm = BlockManager(num_blocks=6, block_size=2)
    bm.allocate("a", range(5))
    bm.allocate("b", range(100, 103))
    bm.free("a")
    bm.free("b")
    assert bm.num_free_blocks == 6 and bm.stats().used == 0


def test_can_allocate_keeps_the_reserve_free_counting_hits():
    bm = BlockManager(num_blocks=6, block_size=4)
    bm.allocate("a", range(9))                 # 3 blocks; 2 full ones named once computed
    bm.computed("a", 9)
    assert bm.can_allocate(range(100, 108), reserve=1) and not bm.can_allocate(range(100, 108), reserve=2)
    assert bm.can_allocate(range(10), reserve=2)         # 2 hits: 1 new block + 2 reserved = 3 free


def test_reset_prefix_cache_forgets_free_blocks_names_only():
    bm = BlockManager(num_blocks=6, block_size=4)
    bm.allocate("a", range(9))
    bm.computed("a", 9)
    bm.allocate("b", range(100, 105))
    bm.computed("b", 5)
    bm.free("a")                               # a's 2 named blocks wait in the cache
    assert bm.stats().cached_free == 2
    bm.reset_prefix_cache()
    st = bm.stats()
    assert (st.cached_free, st.free, st.used) == (0, 4, 2)
    assert bm.allocate("c", range(9)) == 0     # no hit: a's contents are gone
    bm.free("b")
    assert bm.allocate("d", range(100, 105)) == 4        # b was running: its named block survived


def test_out_of_blocks_is_refused_and_changes_nothing():
    bm = BlockManager(num_blocks=3, block_size=4)
    bm.allocate("a", range(8))
    assert not bm.can_allocate(range(100, 105))
    with pytest.raises(BlockManagerError) as e:
        bm.allocate("b", range(100, 105))  # no-blocks
    assert e.value.message == "sequence 'b' needs 2 more block(s) of 4 tokens, and 1 of 3 are free"
    assert e.value.loc.line == line_of("no-blocks") and "can_allocate" in e.value.help
    assert bm.num_free_blocks == 1
    with pytest.raises(BlockManagerError, match="unknown sequence 'b'"):
        bm.block_table("b")
    bm.append("a", range(8, 12))
    assert not bm.can_append("a")
    with pytest.raises(BlockManagerError, match="needs 1 more block"):
        bm.append("a", [12])
    assert bm.num_tokens("a") == 12


def test_prefix_hits_share_computed_full_blocks():
    bm = BlockManager(num_blocks=10, block_size=4)
    prompt = list(range(14))                      # blocks [0..3] [4..7] [8..11] and 2 more tokens
    bm.allocate("a", prompt)
    bm.computed("a", 14)
    cached = bm.allocate("b", prompt[:12] + [99, 98, 97])
    assert cached == 12
    assert bm.block_table("b")[:3] == bm.block_table("a")[:3]
    assert bm.block_table("b")[3] != bm.block_table("a")[3]
    assert [bm.ref_count(i) for i in bm.block_table("a")[:3]] == [2, 2, 2]
    assert bm.stats().hits == 3


def test_the_last_prompt_token_is_always_computed():
    """A prompt of whole blocks all in the cache still recomputes its last block."""
    bm = BlockManager(num_blocks=10, block_size=4)
    bm.allocate("a", range(8))
    bm.computed("a", 8)
    assert bm.allocate("b", range(8)) == 4


def test_blocks_are_not_shared_before_they_are_computed():
    bm = BlockManager(num_blocks=10, block_size=4)
    bm.allocate("a", range(12))
    bm.computed("a", 7)                           # a chunked prefill wrote 7 tokens: one full block
    assert bm.allocate("b", range(12)) == 4


def test_computed_step_by_step_names_a_block_only_when_the_step_filled_it():
    """With `new` (the step's tokens), a step that filled no block returns at once, before the
    sequence is looked up (the scheduler calls it per request per step); the names are those of
    one call over every token."""
    bm = BlockManager(num_blocks=10, block_size=4)
    bm.allocate("a", range(12))
    bm.computed("a", 3, 3)                        # a prompt chunk of 3: no full block
    assert bm.allocate("b", range(12)) == 0
    for n in range(4, 11):                        # decode steps, one token each: blocks fill at 4 and 8
        bm.computed("a", n, 1)
    assert bm.allocate("c", range(12)) == 8
    bm.computed("gone", 6, 1)                     # no block filled: no lookup, no error
    with pytest.raises(BlockManagerError, match="unknown sequence 'gone'"):
        bm.computed("gone", 8, 1)                 # a block filled: the sequence must be there


def test_a_freed_block_is_reused_by_name_until_evicted_lru():
    bm = BlockManager(num_blocks=4, block_size=2)
    bm.allocate("a", [1, 2, 3, 4, 5])             # 3 blocks, the first two full
    bm.computed("a", 5)
    bm.free("a")
    assert bm.stats().cached_free == 2 and bm.num_free_blocks == 4
    assert bm.allocate("b", [1, 2, 3, 4, 9]) == 4   # both named blocks revived from the free queue
    assert bm.num_free_blocks == 1
    bm.free("b")
    # New contents take the nameless blocks first, then the least recently used named one:
    # b's tail was queued first, so [3, 4] (block 1) goes before [1, 2] (block 0).
    bm.allocate("c", [7, 7, 7, 7, 7])
    assert sorted(bm.block_table("c")) == [1, 2, 3]
    bm.free("c")
    assert bm.allocate("d", [1, 2, 3, 4, 0]) == 2     # [1, 2] survived, [3, 4] was evicted
    bm.free("d")
    assert bm.num_free_blocks == 4


def test_eviction_forgets_the_name():
    bm = BlockManager(num_blocks=2, block_size=2)
    bm.allocate("a", [1, 2, 3])
    bm.computed("a", 3)
    bm.free("a")
    bm.allocate("b", [5, 6, 7])                   # needs both blocks: [1, 2] is evicted
    bm.free("b")
    assert bm.allocate("c", [1, 2, 3]) == 0


def test_without_prefix_caching_nothing_is_shared():
    bm = BlockManager(num_blocks=8, block_size=2, prefix_caching=False)
    bm.allocate("a", range(5))
    bm.computed("a", 5)
    assert bm.allocate("b", range(5)) == 0
    assert not set(bm.block_table("a")) & set(bm.block_table("b"))


def test_misuse_is_a_located_error():
    bm = BlockManager(num_blocks=4, block_size=2)
    bm.allocate("a", [1])
    with pytest.raises(BlockManagerError, match="sequence 'a' already has blocks"):
        bm.allocate("a", [1])
    with pytest.raises(BlockManagerError, match="has no tokens"):
        bm.allocate("z", [])
    with pytest.raises(BlockManagerError, match="position 1 has no slot"):
        bm.slot("a", 1)
    with pytest.raises(BlockManagerError) as e:
        bm.free("nobody")  # free-unknown
    assert e.value.loc.line == line_of("free-unknown")
    with pytest.raises(BlockManagerError, match="at least one block"):
        BlockManager(0, 16)
    assert isinstance(e.value, ts.TileSafeError)


# --- property: random schedules against a model of the cache's contents -------------------------
def schedule(seed: int, length: int = 80):
    """Random (kind, seq, n, prefix) ops: few sequence ids and prompts that repeat, so hits on
    live and on freed blocks, and evictions, are frequent (hypothesis' own lists of tuples
    rarely build the alloc / compute / free / alloc chains that exercise them)."""
    r = random.Random(seed)
    kinds = ["alloc", "alloc", "append", "compute", "compute", "free"]
    return [(r.choice(kinds), r.randint(0, 3), r.randint(1, 9), r.randint(0, 1)) for _ in range(length)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), num_blocks=st.integers(1, 12), block_size=st.integers(1, 4),
       caching=st.booleans())
def test_random_schedules_keep_the_invariants(seed, num_blocks, block_size, caching):
    ops = schedule(seed)
    bm = BlockManager(num_blocks, block_size, prefix_caching=caching)
    content = {}                 # slot -> token whose KV was "written" there (the model of the cache)
    live = {}                    # seq -> its tokens
    written = {}                 # seq -> tokens computed so far
    for kind, seq, n, prefix in ops:
        if kind == "alloc" and seq not in live:
            tokens = [prefix] * min(n, 3) + [seq % 2 * 10 + i for i in range(n)]   # shared prefixes are common
            if not bm.can_allocate(tokens):
                with pytest.raises(BlockManagerError):
                    bm.allocate(seq, tokens)
                continue
            cached = bm.allocate(seq, tokens)
            assert cached % block_size == 0 and cached < len(tokens)
            # A hit gives back exactly the tokens this prompt has there.
            assert [content.get(s) for s in bm.slots(seq, 0, cached)] == tokens[:cached]
            live[seq], written[seq] = tokens, cached
        elif kind == "append" and seq in live:
            more = [seq * 100 + i for i in range(n)]
            if bm.can_append(seq, n):
                bm.append(seq, more)
                live[seq] = live[seq] + more
        elif kind == "compute" and seq in live:   # the step writes every token's KV so far
            for p in range(written[seq], len(live[seq])):
                content[bm.slot(seq, p)] = live[seq][p]
            written[seq] = len(live[seq])
            bm.computed(seq, written[seq])
        elif kind == "free" and seq in live:
            bm.free(seq)
            del live[seq], written[seq]
        _check_invariants(bm, live, content, written)
    for seq in list(live):
        bm.free(seq)
    assert bm.num_free_blocks == num_blocks and bm.stats().used == 0


def _check_invariants(bm, live, content, written):
    used = {}
    for seq, tokens in live.items():
        table = bm.block_table(seq)
        assert len(table) == bm.blocks_needed(len(tokens)) and bm.num_tokens(seq) == len(tokens)
        for b in table:
            used[b] = used.get(b, 0) + 1
        # Every computed token reads back its own KV: nobody overwrote a slot it still uses.
        assert [content.get(bm.slot(seq, p)) for p in range(written[seq])] == tokens[:written[seq]]
    for b in range(bm.num_blocks):
        assert bm.ref_count(b) == used.get(b, 0) >= 0
    free = bm.free_blocks()
    assert not free & set(used) and free | set(used) == set(range(bm.num_blocks))   # no block both free and used
    stats = bm.stats()
    assert stats.used == len(used) and stats.free == bm.num_blocks - len(used)
