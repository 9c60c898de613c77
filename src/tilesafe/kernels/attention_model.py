"""The config model of attention: block sizes of `flash_attention` by length, head dim and
group, and the split of `decode_attention` by the KV heads and the cache length.

Flash attention is waves of (batch, head, query tile) blocks: each streams the key tiles
its queries see (about half of them when causal; the longest start first), at a tensor-core
efficiency its tile shape reaches, `blocks per SM` at a time. Short sequences with few
heads give few blocks: smaller query tiles then fill the SMs, at some cost per product.

Decode attention streams the KV cache once: (KV heads x splits) blocks each read one chunk,
then a second kernel combines the splits. Its time is the cache's bytes at the HBM rate or,
when longer, each block's chain of dependent key tiles (too few splits: long chains; too
many, or tiles too large for two blocks per SM: more than one round), plus the combination.
"""
from __future__ import annotations

from .gemm_model import OVERLAP, STREAM_EFFICIENCY
from .launch import cdiv, pow2
from .machine_model import Attention, Decode, Gpu, element_bytes

# (BM, BN, warps, stages, efficiency at head_dim 128, at head_dim <= 64, a block's fixed cost in
# us): the fraction of the GPU's tensor-core rate the block's two products and its online
# softmax reach together (the exp2 of every score costs too), and what a block costs beside its
# key tiles (loading the query tile, writing the output tile: more for 8 warps and 128 rows).
# At head_dim 128 both are fitted to the H200 tuner's timed candidates (32 heads, 1024 / 4096 /
# 16384 keys, causal and not: tune-candidates-gemv-prefetch-flash-softmax.json; rms error
# 3-7%): 64 x 64 and 128 x 64 with 8 warps stream keys equally fast, but the larger block's
# fixed cost loses 5-14% up to 4096 keys, where the model used to pick it (only 16384 keys
# without a mask gains 1%). At 64 the state is half the registers, so the larger tiles are
# guessed to do better (the autotune checks).
FLASH_TILES = ((64, 64, 4, 3, 0.70, 0.66, 1.0), (128, 64, 8, 3, 0.70, 0.70, 4.0), (128, 64, 4, 3, 0.69, 0.66, 6.0),
               (128, 128, 8, 2, 0.56, 0.62, 4.0), (64, 32, 4, 3, 0.45, 0.50, 1.0), (128, 32, 4, 3, 0.65, 0.60, 6.0),
               (64, 128, 4, 3, 0.63, 0.64, 3.0))
BLOCK_FILL_US = 1.0            # a block's fixed cost, for a tile the table does not list
DECODE_TILE_US = 1.2           # one decode block's key tile: its dependent loads and math ...
DECODE_TILE_US_PER_BYTE = 7.4e-5   # ... and its K and V bytes (64 keys x 128 dims: 2.4 us)
DECODE_FIXED_US = 7.0          # the two launches and the combination of the splits
MAX_REGS = 168                 # fp32 accumulator + scores per thread past which Triton spills


def flash_candidates(s: Attention, gpu: Gpu) -> list[dict]:
    out = [{"block_m": bm, "block_n": bn, "flat": True, "num_warps": w, "num_stages": st}
           for bm, bn, w, st, *_ in FLASH_TILES]
    return [c for c in out if valid_flash(c, s, gpu)]


def valid_flash(c: dict, s: Attention, gpu: Gpu) -> bool:
    """Power-of-two tiles of >= 16, the pipeline in shared memory, the state in registers."""
    bm, bn = c["block_m"], c["block_n"]
    if any(t < 16 or t & (t - 1) for t in (bm, bn)) or c["num_warps"] not in (4, 8) or c["num_stages"] < 1:
        return False
    bm, bn, dp = _tiles(c, s)
    return _smem(bm, bn, dp, c["num_stages"], element_bytes(s.dtype)) <= gpu.smem_per_block and \
        (bm * dp + bm * bn) // (c["num_warps"] * 32) <= MAX_REGS


def flash_us(s: Attention, c: dict, gpu: Gpu) -> tuple[float, str]:
    """(predicted microseconds, limit) of `flash_attention` with config `c`."""
    es = element_bytes(s.dtype)
    bm, bn, dp = _tiles(c, s)
    blocks = s.batch * s.heads * cdiv(s.sq, bm)
    key_tiles = cdiv(s.sk, bn)
    if s.causal:   # query tile i sees ~(i + 1) * bm keys: the mean over the tiles, longest first
        key_tiles = min(key_tiles, cdiv((s.sq + bm) // 2 + max(0, s.sk - s.sq), bn))
    eff, fill = next((((e128 if s.d > 64 else e64), fill) for m, n, w, st, e128, e64, fill in FLASH_TILES
                      if (m, n, w, st) == (c["block_m"], c["block_n"], c["num_warps"], c["num_stages"])),
                     (0.45, BLOCK_FILL_US))
    per_block = key_tiles * 4.0 * bm * bn * dp / (gpu.flops_per_sm * eff) * 1e6 + fill
    occ = max(1, min(gpu.smem_per_sm // _smem(bm, bn, dp, c["num_stages"], es),
                     gpu.regs_per_sm // (((bm * dp + bm * bn) // (c["num_warps"] * 32) + 40) * c["num_warps"] * 32)))
    slots = gpu.sms * occ
    rounds = cdiv(blocks, slots)
    compute = rounds * per_block * occ / (OVERLAP if occ > 1 else 1.0)
    qo = 2 * s.batch * s.heads * s.sq * s.d * es
    kv = 2 * s.batch * s.kv_heads * s.sk * s.d * es
    hbm = (qo + kv) / gpu.hbm_bytes_per_s * 1e6
    l2 = blocks * key_tiles * 2 * bn * dp * es / gpu.l2_bytes_per_s * 1e6
    limits = {"compute": compute, "bandwidth": hbm, "l2": l2}
    limit = max(limits, key=limits.get)
    if limit == "compute" and blocks / (rounds * slots) < 0.85:
        limit = "wave quantisation"
    return max(limits.values()) + gpu.launch_us, limit


def _tiles(c: dict, s: Attention) -> tuple[int, int, int]:
    """The tiles `flash_attention` uses: shrunk to the sequences, never below 16."""
    return max(16, min(c["block_m"], pow2(s.sq))), max(16, min(c["block_n"], pow2(s.sk))), max(16, pow2(s.d))


def _smem(bm: int, bn: int, dp: int, stages: int, es: int) -> int:
    return (bm * dp + stages * 2 * bn * dp) * es


def flash_flops(s: Attention) -> float:
    work = 4.0 * s.batch * s.heads * s.sq * s.sk * s.d
    return work / 2 if s.causal else work


# --- decode ------------------------------------------------------------------------------

def decode_candidates(s: Decode, gpu: Gpu) -> list[dict]:
    # The one-kernel form is not a candidate: on the H200 the last block's ticket (a fence, an
    # atomic, the partials read back) cost as much as the combination kernel it saves, and its
    # walk of ~30 splits 0.8 us more (the tuner; decode_attention_sizes round 1, paged).
    out = [{"block_n": bn, "splits": None, "target_blocks": per_sm * gpu.sms, "flat": True, "one_kernel": False,
            "num_warps": 4, "num_stages": 3}
           for bn in (32, 64, 128) for per_sm in (1, 2)]      # 4 per SM measured slower (tuner)
    return [c for c in out if valid_decode(c, s, gpu)]


def valid_decode(c: dict, s: Decode, gpu: Gpu) -> bool:
    bn, dp = c["block_n"], max(16, pow2(s.d))
    rows = max(16, pow2(s.heads // max(1, s.kv_heads)))
    if bn < 16 or bn & (bn - 1) or c["num_warps"] not in (4, 8) or c["target_blocks"] < 1:
        return False
    return (rows * dp + c["num_stages"] * 2 * bn * dp) * element_bytes(s.dtype) <= gpu.smem_per_block and \
        (rows * dp + rows * bn) // (c["num_warps"] * 32) <= MAX_REGS


def decode_splits(c: dict, s: Decode) -> tuple[int, int]:
    """(key tile, splits) of `decode_attention` with config `c` over caches of `s.max_seq` keys."""
    return decode_tiling(c, s.kv_heads, s.max_seq)


def decode_tiling(c: dict, kv_heads: int, max_seq: int) -> tuple[int, int]:
    """(key tile, splits): `attention.decode_attention` launches with these, so the model
    predicts the very split it runs. The sequence is cut into as many (split, KV head) blocks as
    fill the GPU (`target_blocks`) and no more (25 KV heads x 11 splits against 264 slots ran 11
    blocks in a second round), each a whole number of key tiles, none of them empty at max_seq."""
    bn = max(16, min(c["block_n"], pow2(max_seq)))
    if c.get("splits"):
        return bn, c["splits"]
    want = max(1, min(cdiv(max_seq, bn), c["target_blocks"] // max(kv_heads, 1)))
    per = max(bn, cdiv(cdiv(max_seq, want), bn) * bn)            # keys per split, as the kernel computes it
    return bn, max(1, cdiv(max_seq, per))                        # an empty cache (max_seq 0): one split


def decode_us(s: Decode, c: dict, gpu: Gpu) -> tuple[float, str]:
    """(predicted microseconds, limit) of `decode_attention` over a full cache: the longer of
    the cache's bytes at the HBM rate and each block's chain of key tiles (a tile's loads,
    scores, softmax and product depend on each other: ~1.2 us plus its bytes, fitted to the
    tuner's decode candidates), in rounds of the blocks one SM holds, plus the launches and
    the combination of the splits."""
    es = element_bytes(s.dtype)
    bn, splits = decode_splits(c, s)
    blocks = s.kv_heads * splits
    dp = max(16, pow2(s.d))
    rows = max(16, pow2(s.heads // max(1, s.kv_heads)))
    occ = max(1, min(gpu.smem_per_sm // ((rows * dp + c["num_stages"] * 2 * bn * dp) * es), 8))
    rounds = cdiv(blocks, gpu.sms * occ)
    chain = rounds * cdiv(cdiv(s.max_seq, splits), bn) * (DECODE_TILE_US + DECODE_TILE_US_PER_BYTE * bn * s.d * es)
    cache = 2 * s.kv_heads * s.max_seq * s.d * es
    partials = 2 * splits * s.kv_heads * pow2(s.heads // max(1, s.kv_heads)) * (s.d + 2) * 4
    stream = (cache + partials) / (gpu.hbm_bytes_per_s * STREAM_EFFICIENCY) * 1e6
    limit = "bandwidth" if stream >= chain else ("wave quantisation" if rounds > 1 else "occupancy")
    return max(stream, chain) + DECODE_FIXED_US, limit


# --- paged decode (the engine's) -----------------------------------------------------------
# Measured on the H200 (benchmarks/probes/decode_attention_sizes.py, rounds 1 and 2 of session
# 15, Qwen3 heads of 128, graphs): a split's 64-key tile is two dependent reads (its table
# entries, then its K/V rows) before its math, ~2.5 us; reading tile j + 1 (and tile j + 2's
# table entries) before tile j's math was faster in every case timed (4B, 32 x 8 rows, 4096
# keys, 4 splits: 249 -> 174 us; 1 x 8 rows, 128 keys: 12.3 -> 10.3), 8 warps slower. More
# splits shorten each block's chain but cost at short contexts, where most blocks find no
# keys and the combination reads more partials: 64 splits at batch 1 were slower than 32 at
# 128, 1024 and 4096 keys (12.3 / 14.3 / 16.6 us against 9.6 / 10.7 / 15.4), 16 at batch 8
# slower than 4 to 1024 keys. So ~2 blocks per SM, a power of two of splits (the combination
# reads them in one tile). One split (32 x 8 rows) was 14.8 us at 128 keys against 23-27 for
# four; at 4096 keys four were faster (174 us with the prefetch against 337 without it for
# one). The one-launch form (the last block combines) was slower in every case (ticket's
# fence, atomic and re-read of the partials; 26 against 12 us at batch 1, 128 keys).
PAGED_BLOCKS_PER_SM = 2        # (split, sequence x KV head) blocks per SM a paged decode aims for
PAGED_MAX_SPLITS = 64          # the combination kernel reads (splits, D) fp32 per head in one tile
PAGED_MIN_KEYS = 64            # keys a split takes at least (one tile), read on the device
PAGED_PREFETCH = True          # read tile j + 1 before tile j's math


# Many (sequence, KV head) rows in a short cache (H200, session 18, benchmarks/probes/
# batch_parts_probe.py: Qwen3-4B's 8 KV heads of 128, contexts of 200 in a 256-position cache,
# the 36 layers' attention in one graph, us a layer):
# - one split, >= PAGED_NARROW_ROWS rows: 32-key tiles (fewer registers a block, more blocks at
#   once): 1024 rows 46.0 against 55.8 with 64-key tiles (128-key 78.8, 8 warps 69.3, two
#   splits 66.1, no prefetch 78.6); 256 rows 16.0 against 16.5. The 4B step at 128 rows: 5.675
#   -> 5.232 ms; at 32 rows 3.823 -> 3.758.
# - splits, >= PAGED_LAST_ROWS rows: the last block of each row combines them (`one_kernel`):
#   64 rows in 4 splits 8.58 against 13.47 with the combine kernel (2 splits 8.49, one 11.6),
#   where one row (batch 1, session 15) had the combine kernel faster.
# Caches longer than PAGED_RULE_MAX_LEN positions were not measured: they keep the defaults.
PAGED_NARROW_ROWS = 256
PAGED_NARROW_BLOCK_N = 32
PAGED_LAST_ROWS = 64
PAGED_RULE_MAX_LEN = 256


def paged_rule(rows: int, max_len: int, splits: int) -> dict:
    """The paged decode's config beyond its defaults for `rows` (sequence, KV head) rows over a
    cache of `max_len` positions in `splits` splits (the measurements above): 32-key tiles for
    many rows in one split, the last block combining the splits of many rows; {} otherwise."""
    if max_len > PAGED_RULE_MAX_LEN:
        return {}
    if splits == 1 and rows >= PAGED_NARROW_ROWS:
        return {"block_n": PAGED_NARROW_BLOCK_N}
    if splits > 1 and rows >= PAGED_LAST_ROWS:
        return {"one_kernel": True}
    return {}


def paged_splits(rows: int, max_len: int, block_n: int, sms: int) -> int:
    """Splits per (sequence, KV head) of `rows` for sequences of up to `max_len` positions:
    the power of two that gives each SM up to PAGED_BLOCKS_PER_SM blocks, none shorter than a
    key tile at max_len, at most PAGED_MAX_SPLITS; one when the rows alone give that many
    blocks (no partials then, no combination)."""
    most = min(PAGED_MAX_SPLITS, cdiv(max_len, max(block_n, cdiv(PAGED_MIN_KEYS, block_n) * block_n)))
    want = max(1, min(most, PAGED_BLOCKS_PER_SM * sms // max(rows, 1)))   # only splits that add a whole block
    return 1 << (want.bit_length() - 1)
