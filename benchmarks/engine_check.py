"""The correctness gate of `benchmarks/engine.py`: the engine's logits and tokens against the
plain-PyTorch baseline (and transformers where given) on the same bf16 weights, aware of near-ties.

With random bf16 weights greedy runs diverge at the first near-tie and then compare different
contexts, so comparing free-running tokens says little. Instead:
- the baseline decodes greedily after a prompt, keeping every step's logits (rows r_0 .. r_{n-1},
  row i predicts token i);
- the engine's prefill over prompt + those tokens gives the logits at the same positions
  (`LLM.score`): the first-step error (row 0) and every row's error, max abs and relative to
  the row's largest |logit|;
- teacher forcing through the engine's decode path (`LLM.score(..., through="decode")`: prefill
  the prompt, then feed the baseline's token i and read the engine's next greedy token): each
  step's token against the baseline's argmax, counted only where the baseline's top-2 margin
  exceeds `MARGIN_FACTOR` times the bf16 error: two logit vectors within e of each other can
  only disagree on the argmax where the margin is under 2e.
The bf16 error is calibrated by references that compute the same model another way: the
baseline's own one-pass prefill (`TorchQwen3Prefill`, all rows) and, where given,
transformers; the tolerance is the largest row error among them and the engine's.
The check fails on a relative logit error over `REL_LIMIT` (or over 3x a reference's own
error against the decode baseline, where that is larger), when a reference is farther than
`REF_LIMIT` from the decode baseline (the references disagree: nothing can vouch), or on any
decisive step that disagrees; it is inconclusive (not failed) when every step is a near-tie.
"""
from __future__ import annotations

import torch

from torch_qwen3 import TorchQwen3Prefill          # beside this file

REL_LIMIT = 0.05           # max |engine - baseline| over max |baseline| per row: a wrong kernel is O(1)
REF_LIMIT = 0.15           # the references' own relative error beyond which the baselines are in doubt
MARGIN_FACTOR = 3.0        # a decisive step: top-2 margin > 3 x the bf16 error (2x suffices, 1.5x slack)


def top2_margin(logits: torch.Tensor) -> torch.Tensor:
    """(..., V) -> (...,) the gap between the largest and second-largest logit."""
    top = logits.float().topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def logit_error(test: torch.Tensor, ref: torch.Tensor) -> dict:
    """Per row (R, V) and overall: max abs difference and that over the row's max |ref|."""
    diff = (test.float() - ref.float()).abs().amax(-1)
    scale = ref.float().abs().amax(-1).clamp_min(1e-30)
    rel = diff / scale
    return {"max_abs": float(diff.max()), "max_rel": float(rel.max()),
            "row_abs": [float(x) for x in diff], "row_rel": [float(x) for x in rel]}


def agreement(ref_logits: torch.Tensor, tokens: list[int], tolerance: float,
              factor: float = MARGIN_FACTOR) -> dict:
    """Tokens (one per row) against the argmax of ref_logits (R, V), counted only at rows whose
    top-2 margin exceeds factor * tolerance (elsewhere a near-tie: either token is right)."""
    ref = ref_logits.float().argmax(-1).tolist()
    margins = top2_margin(ref_logits).tolist()
    decisive = [i for i, m in enumerate(margins) if m > factor * tolerance]
    wrong = [i for i in decisive if tokens[i] != ref[i]]
    return {"steps": len(tokens), "decisive": len(decisive), "agree": len(decisive) - len(wrong),
            "near_ties": len(tokens) - len(decisive), "disagree_at": wrong,
            "all_agree": sum(a == b for a, b in zip(tokens, ref)), "threshold": factor * tolerance}


def verdict(first_rel: float, rows_rel: float, forced: dict, rel_limit: float,
            refs_rel: float = 0.0) -> tuple[bool, str]:
    """(passed, why) from the measured errors (the engine's first-step and all-rows relative
    error, the references' largest against the decode baseline) and the teacher-forced agreement."""
    if not (refs_rel == refs_rel) or refs_rel > REF_LIMIT:
        return False, (f"the references differ from the decode baseline by {refs_rel:.3g} of the logits' scale "
                       f"(limit {REF_LIMIT}): the baselines cannot vouch for the engine")
    if not (rows_rel == rows_rel) or rows_rel > rel_limit:          # NaN counts as a failure
        return False, f"logits differ from the baseline by {rows_rel:.3g} of their scale (limit {rel_limit:.3g})"
    if forced["disagree_at"]:
        return False, (f"teacher-forced decode disagrees with the baseline at decisive steps "
                       f"{forced['disagree_at']} (margin > {forced['threshold']:.3g})")
    if forced["decisive"] == 0:
        return True, f"logits within {rows_rel:.3g} of their scale; every step a near-tie (inconclusive)"
    return True, (f"first-step logits within {first_rel:.3g} of their scale; {forced['agree']}/"
                  f"{forced['decisive']} decisive teacher-forced steps agree")


def check(llm, baseline, prompt: list[int], steps: int, hf=None) -> dict:
    """The whole gate (see the module doc): `baseline` a TorchQwen3Step (its weights are the
    references' too), `hf` an HFQwen3 on the same weights, or None."""
    base_tokens, base_logits = baseline.greedy_logits(prompt, steps)       # (steps, V)
    seq = prompt + base_tokens[:-1]
    p = len(prompt)
    eng = llm.score(prompt, base_tokens).logits.to(base_logits.device)         # one prefill: (steps, V)
    err = logit_error(eng, base_logits)
    out = {"prompt": p, "steps": steps, "baseline_tokens": base_tokens,
           "first_step": {"max_abs": err["row_abs"][0], "max_rel": err["row_rel"][0],
                          "top1_agree": int(eng[0].argmax()) == int(base_logits[0].argmax()),
                          "top2_margin": float(top2_margin(base_logits[0]))},
           "rows": {"max_abs": err["max_abs"], "max_rel": err["max_rel"]}}
    tolerance, rel_limit, refs_rel = err["max_abs"], REL_LIMIT, 0.0
    one_pass = TorchQwen3Prefill.beside(baseline, len(seq))(torch.tensor(seq, device=llm.device), all_rows=True)
    one_pass = one_pass[p - 1:].float()
    pass_err = logit_error(one_pass, base_logits)
    out["torch_prefill_vs_baseline"] = {"max_abs": pass_err["max_abs"], "max_rel": pass_err["max_rel"]}
    tolerance = max(tolerance, pass_err["max_abs"])
    rel_limit = max(rel_limit, 3 * pass_err["max_rel"])
    refs_rel = max(refs_rel, pass_err["max_rel"])
    if hf is not None:
        hf_logits = hf.row_logits(seq)[p - 1:]
        hf_err = logit_error(hf_logits, base_logits)
        out["transformers"] = {"vs_baseline": {"max_abs": hf_err["max_abs"], "max_rel": hf_err["max_rel"]},
                               "engine_vs_transformers": {k: logit_error(eng, hf_logits)[k]
                                                          for k in ("max_abs", "max_rel")},
                               "teacher_forced": agreement(base_logits, hf_logits.argmax(-1).tolist(),
                                                           max(tolerance, hf_err["max_abs"]))}
        tolerance = max(tolerance, hf_err["max_abs"])
        rel_limit = max(rel_limit, 3 * hf_err["max_rel"])
        refs_rel = max(refs_rel, hf_err["max_rel"])
    out["prefill_rows"] = agreement(base_logits, eng.argmax(-1).tolist(), tolerance)
    engine_tokens = llm.score(prompt, base_tokens, through="decode").greedy   # the decode steps (graphs)
    out["teacher_forced"] = agreement(base_logits, engine_tokens, tolerance) | {"engine_tokens": engine_tokens}
    out["passed"], out["why"] = verdict(err["row_rel"][0], err["max_rel"], out["teacher_forced"], rel_limit,
                                        refs_rel)
    out["rel_limit"] = rel_limit
    return out
