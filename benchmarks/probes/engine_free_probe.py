"""Probe: is an `LLM`'s GPU memory given back once the LLM is dropped?

Round 0 (32B, `benchmarks/engine.py --long`) built its long engine with 68.2 GB still
allocated: the short engine's weights and cache (68.07 GB) outlived it. The suspect: the
runtime's HOLDING keeps the last launches' completions, and a graph replay's completion
holds every tensor of the graph, until ~32 later launches sweep them; an LLM on a GPU now
releases them when dropped (llm._release_when_dropped), which `_nofix` scenarios detach.
Each scenario builds
a random-weight model, does something with it, drops every name of it, collects, and prints
whether the LLM and its embedding tensor are still alive and the bytes still allocated; where
something survives, the chains of objects holding it (gc referrers, up to a module, a frame
or a class) show who.

    PYTHONPATH=src python benchmarks/probes/engine_free_probe.py --size tiny
"""
from __future__ import annotations

import argparse
import gc
import sys
import traceback
import types
import weakref
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # benchmarks/

from tilesafe.engine import LLM, SamplingParams                     # noqa: E402

GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
SAMPLED = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=6, ignore_eos=True, seed=1)


def describe(o) -> str:
    if isinstance(o, dict):
        keys = list(o)[:6]
        return f"dict({len(o)}) keys {[str(k)[:40] for k in keys]}"
    if isinstance(o, (list, tuple, set)):
        return f"{type(o).__name__}({len(o)})"
    if isinstance(o, types.FrameType):
        return f"frame {o.f_code.co_name} {o.f_code.co_filename}:{o.f_lineno}"
    if isinstance(o, types.FunctionType):
        return f"function {o.__qualname__} ({o.__module__})"
    if isinstance(o, types.CellType):
        return "cell"
    if isinstance(o, types.ModuleType):
        return f"module {o.__name__}"
    if isinstance(o, torch.Tensor):
        return f"tensor {tuple(o.shape)} {o.dtype}"
    return f"{type(o).__module__}.{type(o).__qualname__}"


def holders(target, depth: int = 10, breadth: int = 4) -> list[str]:
    """Chains of referrers from `target` outwards, each ending at a module's globals, a class
    or `depth` (the probe's own frames and lists left out)."""
    lines, seen, mine = [], {id(target)}, set()
    mine.add(id(sys._getframe()))

    def walk(o, level: int, prefix: str) -> None:
        if level == depth:
            return
        refs = gc.get_referrers(o)
        mine.add(id(refs))
        refs = [r for r in refs if id(r) not in seen and id(r) not in mine
                and not (isinstance(r, types.FrameType) and r.f_code.co_filename == __file__)]
        mine.add(id(refs))
        for r in refs[:breadth]:
            seen.add(id(r))
            if isinstance(r, dict) and "__name__" in r and "__loader__" in r:
                lines.append(f"{prefix}<- globals of module {r['__name__']}")
                continue
            lines.append(f"{prefix}<- {describe(r)}")
            if isinstance(r, (types.ModuleType, type)):
                continue
            walk(r, level + 1, prefix + "  ")
    walk(target, 0, "")
    return lines


def allocated() -> int:
    """Bytes torch holds on the GPU (0 on a CPU-only machine: a smoke run of the probe)."""
    if not torch.cuda.is_available():
        return 0
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def scenario(name: str, size: str, use: str, device: str) -> dict:
    gc.collect()
    before = allocated()
    out = {"scenario": name}
    try:
        kw = {"use_graph": False, "prefill_graphs": False} if use == "eager" else {}
        llm = LLM.from_random(size, device=device, max_model_len=128, max_num_seqs=2, progress=False, **kw)
        out["built_bytes"] = allocated() - before
        if name.endswith("_nofix") and getattr(llm, "_release", None):   # as before the engine released it
            llm._release.detach()
        if use in ("generate", "eager", "bench"):
            prompt = {"prompt_token_ids": list(range(100, 120))}
            llm.generate(prompt, GREEDY)
            llm.generate([prompt, prompt], GREEDY)
            llm.generate(prompt, SAMPLED)
        if use == "bench":            # what benchmarks/engine.py's short engine does besides
            import engine_check
            from torch_qwen3 import TorchQwen3Step
            base = TorchQwen3Step(llm, 64)
            engine_check.check(llm, base, list(range(100, 108)), 4)
            if torch.cuda.is_available():
                base.step_seconds(20)
            del base
        llm_ref, embed_ref = weakref.ref(llm), weakref.ref(llm.model.w.embed)
        del llm
    except Exception as e:
        traceback.print_exc()
        out["error"] = f"{type(e).__name__}: {e}"[:300]
        return out
    gc.collect()
    out["llm_alive"], out["embed_alive"] = llm_ref() is not None, embed_ref() is not None
    out["left_bytes"] = allocated() - before
    target = llm_ref() or embed_ref()
    if target is not None:
        out["holders"] = holders(target)
    del target
    if name.endswith("_nofix") and torch.cuda.is_available():    # what the LLM's release does
        from tilesafe.runtime.future import synchronize_and_release
        synchronize_and_release(torch.cuda.current_device())
        gc.collect()
        out["after_release_bytes"] = allocated() - before
        out["embed_alive_after_release"] = embed_ref() is not None
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--scenarios", default="build,generate_nofix,generate,eager,bench",
                    help="build, generate, eager, bench; _nofix: without the LLM's release when dropped")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    rows = []
    for name in args.scenarios.split(","):
        use = name.removesuffix("_nofix")
        r = scenario(name, args.size, use, args.device)
        rows.append(r)
        for line in r.pop("holders", []):
            print(f"  [{name}] {line}")
        print(r, flush=True)
    print(f"{'scenario':10} {'built MB':>9} {'left MB':>8} llm_alive embed_alive")
    for r in rows:
        if "error" in r:
            print(f"{r['scenario']:10} error: {r['error']}")
        else:
            print(f"{r['scenario']:10} {r['built_bytes'] / 1e6:9.1f} {r['left_bytes'] / 1e6:8.1f} "
                  f"{r['llm_alive']!s:9} {r['embed_alive']}")


if __name__ == "__main__":
    main()
