"""Streaming detokenization on Qwen3's tokenizer: characters split across tokens are held back,
never emitted as U+FFFD, and the pieces concatenate to transformers' decode of the ids."""
import random

import pytest

from tilesafe.engine.detokenize import IncrementalDetokenizer

transformers = pytest.importorskip("transformers")

# Each of these has a character whose UTF-8 bytes Qwen3's BPE splits over several tokens.
SPLIT = ["🦀🧬🫠", "a🫠b", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "👩‍👩‍👧‍👦 family", "ℵ₀ ≈ 𝔠? 🫎🪿"]


def stream(tokenizer, ids, prompt=(), **kwargs):
    det = IncrementalDetokenizer(tokenizer, list(prompt), **kwargs)
    pieces = [det.add(i) for i in ids]
    return pieces + [det.finish()], det


@pytest.mark.parametrize("text", SPLIT)
def test_split_characters_are_held_back_and_the_stream_equals_the_decode(ours, reference, text):
    ids = reference.encode(text)
    # The case is real: some single token decodes to U+FFFD on its own (half a character).
    assert any("\ufffd" in reference.decode([i]) for i in ids)
    pieces, det = stream(ours, ids, prompt=reference.encode("Say: "))
    assert not any("\ufffd" in p for p in pieces)
    assert "".join(pieces) == det.text == reference.decode(ids) == text
    assert "" in pieces[:-1]                          # some token completed no character
    assert det.token_ids == ids


def test_each_emitted_prefix_is_a_prefix_of_the_final_text(ours, reference):
    text = "".join(SPLIT)
    ids = reference.encode(text)
    det = IncrementalDetokenizer(ours, [])
    for i in ids:
        det.add(i)
        assert text.startswith(det.text) and not det.text.endswith("\ufffd")
    assert det.finish() == "" and det.text == text


def test_random_ids_stream_to_the_decode_including_broken_bytes(ours, reference):
    """A random model emits lone continuation bytes, unfinished sequences and ids past the
    tokenizer: whatever the ids, the pieces (with finish) concatenate to transformers' decode."""
    rng = random.Random(0)
    pieces_pool = reference.encode("é😀🫠世界𝔘 ok") + [151645, 151644, 151700]
    for _ in range(200):
        ids = [rng.randrange(151936) if rng.random() < 0.4 else rng.choice(pieces_pool)
               for _ in range(rng.randrange(1, 16))]
        for skip in (True, False):
            pieces, det = stream(ours, ids, skip_special_tokens=skip)
            assert "".join(pieces) == det.text == reference.decode(ids, skip_special_tokens=skip), ids


def test_an_unfinished_character_at_the_end_comes_out_of_finish(ours, reference):
    ids = reference.encode("ok🫠")[:-1]                 # the emoji's last byte never comes
    pieces, det = stream(ours, ids)
    assert pieces[-1] == "\ufffd" and "".join(pieces[:-1]) == "ok"
    assert det.text == reference.decode(ids) == "ok\ufffd"


def test_special_tokens_are_skipped_or_kept(ours):
    ids = ours.encode("Hi<|im_end|>")
    assert "".join(stream(ours, ids)[0]) == "Hi"
    assert "".join(stream(ours, ids, skip_special_tokens=False)[0]) == "Hi<|im_end|>"


def test_a_prompt_ending_inside_a_character_does_not_leak_into_the_output(ours, reference):
    ids = reference.encode("🫠🫠")
    cut = next(k for k in range(1, len(ids)) if reference.decode(ids[:k]).endswith("\ufffd"))
    pieces, det = stream(ours, ids[cut:], prompt=ids[:cut])
    assert det.text == reference.decode(ids[cut:])
