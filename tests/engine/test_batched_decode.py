"""A batched decode step launches the same kernels whatever its batch: the cache write and the
attention serve every sequence at once (positions, lengths and cache rows in device tensors),
and each sequence still gets the tokens it gets alone (float32, against a step of batch 1)."""
import torch

from tilesafe.engine import LLM


def test_launches_per_step_do_not_grow_with_the_batch(checkpoint, launched_kernels):
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=4, progress=False)
    layers = llm.config.num_layers
    seen = launched_kernels()
    with torch.inference_mode():
        llm.decode_steps.run([5, 6], [0, 3])            # two rows: one row alone runs the fused layer
        two = list(seen)
        seen.clear()
        llm.decode_steps.run([5, 6, 7, 8], [0, 3, 1, 9])
        four = list(seen)
    assert two == four                                     # the same launches, not one set per sequence
    # Per layer: q/k norms + RoPE + the K/V cache write in one kernel, one attention (+ its combine).
    assert sum(k == "norm_rope_kv_rows_kernel" for k in four) == layers
    assert sum(k.startswith("paged_decode_") for k in four) == layers     # one launch: the splits combine in it
    assert not [k for k in four if k in ("rope_kernel", "paged_kv_write_kernel", "kv_append_kernel")]


def test_each_row_of_a_batch_gets_its_tokens_alone(checkpoint):
    """Rows at different positions of their own slots, in any order: a batch of 3 against
    each row alone in a step of batch 1 reading the same slot (float32)."""
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=3, progress=False)
    torch.manual_seed(0)
    with torch.inference_mode():
        for k, v in zip(llm.model.cache.k, llm.model.cache.v):     # (S, L, HKV, D) distinct slot contents
            k.copy_(torch.randn_like(k))
            v.copy_(torch.randn_like(v))
        ids, positions, slots = [3, 40, 11], [4, 9, 0], [2, 0, 1]
        tokens, logprobs = llm.decode_steps.run(ids, positions, slots)
        for i in range(3):
            t, lp = llm.decode_steps.run([ids[i]], [positions[i]], [slots[i]])
            assert t == [tokens[i]]
            assert abs(lp[0] - logprobs[i]) < 1e-4
        # Reading another slot gives another answer: the row really reads slots[i].
        others = [llm.decode_steps.run([ids[0]], [positions[0]], [s])[1][0] for s in (0, 1)]
        assert all(abs(lp - logprobs[0]) > 1e-6 for lp in others)
