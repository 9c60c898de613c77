"""Every SIMT example on the CPU executor, against torch written here (tiny, ragged shapes)."""
import torch

from tilesafe.simt.examples import block_sum, histogram, sgemm, softmax_rows, transpose


def test_histogram_matches_bincount():
    x = torch.randint(0, 13, (900,), dtype=torch.int32, generator=torch.Generator().manual_seed(1))
    hist = torch.zeros(13, dtype=torch.int32)
    histogram.launch(hist, x, blocks=2).sync()
    assert torch.equal(hist, torch.bincount(x, minlength=13).int())


def test_block_sum_of_ragged_slabs():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(2))
    out = torch.full((4,), float("nan"))
    block_sum.block_sum(out, x, K=256).sync()                       # 4 slabs of 256, the last one ragged
    want = torch.nn.functional.pad(x, (0, 24)).view(4, 256).sum(1)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-4)


def test_block_sum_slabs_that_are_not_a_multiple_of_the_block():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(5))
    for k in (5, 300, 1000):                 # the unrolled K // 256 reads, then the K % 256 rest
        b = -(-1000 // k)
        out = torch.full((b,), float("nan"))
        block_sum.block_sum(out, x, K=k).sync()
        want = torch.nn.functional.pad(x, (0, b * k - 1000)).view(b, k).sum(1)
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-4)


def test_softmax_rows():
    x = torch.randn(6, 70, generator=torch.Generator().manual_seed(3)) * 4   # 6 rows over 2 blocks of 4 warps
    out = torch.full((6, 70), float("nan"))
    softmax_rows.softmax_rows(out, x).sync()
    torch.testing.assert_close(out, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)


def test_softmax_rows_staged_in_shared_memory():
    x = torch.randn(3, 300, generator=torch.Generator().manual_seed(7)) * 4     # 2 chunks a thread, the last ragged
    out = torch.full((3, 300), float("nan"))
    softmax_rows.softmax_staged(out, x).sync()
    torch.testing.assert_close(out, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)


def test_softmax_rows_staged_reads_columns_past_its_chunks_from_global_memory():
    x = torch.randn(2, 600, generator=torch.Generator().manual_seed(8)) * 4
    out = torch.full((2, 600), float("nan"))
    softmax_rows.softmax_rows_staged(out, x, K=1).sync()        # 256 columns staged, 344 read from x
    torch.testing.assert_close(out, torch.softmax(x, dim=1), rtol=1e-5, atol=1e-6)


def test_transpose_through_padded_shared_memory():
    x = torch.randn(40, 33, generator=torch.Generator().manual_seed(4))
    out = torch.full((33, 40), float("nan"))
    transpose.transpose(out, x).sync()
    assert torch.equal(out, x.t())


def test_sgemm_with_ragged_tiles():
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(20, 21, generator=g), torch.randn(21, 18, generator=g)
    c = torch.full((20, 18), float("nan"))
    sgemm.sgemm(c, a, b).sync()
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


def top_p_oracle(probs, expo, top_p):
    """The smallest set of top tokens holding top_p of the mass; the winner of the exponential race in it."""
    out = []
    for p, e in zip(probs, expo):
        s, idx = torch.sort(p, descending=True)
        kept = idx[:int((torch.cumsum(s, 0) < top_p).sum()) + 1]
        out.append(int(kept[torch.argmax(p[kept] / e[kept])]))
    return out


def test_top_p_sampler():
    from tilesafe.simt.examples.top_p import top_p_sample
    g = torch.Generator().manual_seed(6)
    probs = torch.softmax(torch.randn(3, 50, generator=g) * 2, dim=1)
    expo = torch.empty(3, 50).exponential_(generator=g)
    token = torch.full((3,), -1, dtype=torch.int32)
    top_p_sample(token, probs, expo, 0.9, STEPS=24).sync()
    assert token.tolist() == top_p_oracle(probs, expo, 0.9)
    top_p_sample(token, probs, expo, 1e-6, STEPS=24).sync()         # tiny top_p: the most likely token
    assert token.tolist() == probs.argmax(1).int().tolist()


def test_the_readme_simt_block_runs_and_prints_true(tmp_path):
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    (block,) = [b for b in re.findall(r"^```python\n(.*?)^```$", readme, flags=re.S | re.M) if "simt.kernel" in b]
    script = tmp_path / "readme_simt.py"
    script.write_text(block)
    env = dict(os.environ, PYTHONPATH=str(root / "src"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


def test_histogram_through_shared_memory_bins():
    x = torch.randint(0, 256, (3000,), dtype=torch.int32, generator=torch.Generator().manual_seed(8))
    hist = torch.zeros(256, dtype=torch.int32)
    histogram.launch256(hist, x, blocks=2).sync()
    assert torch.equal(hist, torch.bincount(x, minlength=256).int())
