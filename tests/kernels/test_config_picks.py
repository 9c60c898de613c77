"""The config model's picks on a 1050-shape sweep (M 1..3000 by 70 weights of N 1024..16384 and
K 896..4096, bf16, H200) against the picks recorded before session 19's short-K GEMV rule
(data/config_picks_h200.json): a change to the model must show here as a change of the picks it
meant to make, and nowhere else."""
import json
from pathlib import Path

import pytest

import tilesafe as ts
from tilesafe.kernels import config_model as cm
from tilesafe.kernels import gemm_model as gm

RECORDED = json.loads((Path(__file__).parent / "data" / "config_picks_h200.json").read_text())


def _intended(shape) -> dict | None:
    """The pick a later rule is meant to make instead of the recorded one (None: unchanged). Session
    19's short-K GEMV rule (4 KB loads for one row by 1024 <= K <= 2048) changed 18 of these picks and
    was withdrawn after its measurement (gemm_model.SHORT_K_FORMS). Session 20's weight-major rule
    (17..32 rows by outputs of 48..131 column tiles of 64, K >= 2560: `gemm_model.weight_major_choice`)
    makes its own pick there."""
    return gm.weight_major_choice(shape, cm.H200)


def test_the_sweeps_picks_change_only_where_a_rule_says():
    changed = []
    for key, index in RECORDED["picks"].items():
        m, n, k = (int(v) for v in key.split("x"))
        shape = cm.Gemm(m, n, k, "bf16")
        got, old, want = cm.choose(shape, cm.H200), RECORDED["configs"][index], _intended(shape)
        if want is None:
            assert got == old, (key, got, old)
        else:
            assert got == want, (key, got, want)
            changed.append(key)
    # M = 24 and 32 by N = 4096, 5120, 6144 (64, 80, 96 column tiles) by K = 2560, 4096
    assert len(RECORDED["picks"]) == 1050 and len(changed) == 12
    assert {tuple(int(v) for v in key.split("x")) for key in changed} == {(m, n, k) for m in (24, 32)
                                                                         for n in (4096, 5120, 6144)
                                                                         for k in (2560, 4096)}


def test_no_tuned_gemv_entry_is_short_k():
    """The tuned table's GEMV entries (K >= 2560) refine before any rule: the rule changes none."""
    from tilesafe.kernels import configs
    keys = [k for k in configs.tuned_table("nvidia-h200").get("linear", {}) if k.endswith("/gemv")]
    assert len(keys) >= 20
    for key in keys:
        sizes = [int(v) for p in key.split("/")[1:-1] for v in p.split("x")]
        assert sizes[-1] > gm.SHORT_K, key


@pytest.mark.parametrize("shape", [cm.Gemm(8, 64, 0), cm.Gemm(100, 64, 0), cm.Gemm(1, 0, 64),
                                   cm.Attention(1, 2, 2, 0, 0, 64), cm.Attention(0, 2, 2, 64, 64, 64)])
def test_an_empty_shape_has_no_config_and_says_so(shape):
    """K = 0 divided by zero in the tile counts (ZeroDivisionError from our internals): a size of 0
    is now a LaunchError at the caller's line."""
    for ask in (lambda: cm.choose(shape, cm.H200), lambda: cm.ranked(shape, 4, cm.H200)):
        with pytest.raises(ts.LaunchError) as err:
            ask()
        assert "no config for an empty" in str(err.value) and "=0" in str(err.value)
        assert err.value.loc.file == __file__ and err.value.loc.line == ask.__code__.co_firstlineno


def test_empty_rows_and_an_empty_cache_still_get_a_config():
    """m = 0 and max_seq = 0 divide by nothing: decode_workspace sizes an empty cache by its config."""
    assert cm.choose(cm.Gemm(0, 64, 64), cm.H200)["block_n"] >= 1
    assert cm.choose(cm.Decode(32, 8, 0, 128), cm.H200)["splits"] is None
