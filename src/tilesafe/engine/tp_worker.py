"""A tensor-parallel rank other than 0: build this rank's share of the model, then run the
model calls rank 0 sends until it says exit (see tp_group.py).

A spawned worker starts in `main`; a torchrun rank > 0 enters `serve` from `LLM(...)`.
"""
from __future__ import annotations

import sys
import traceback


def main(rank: int, world: int, device: str, init: str, spec: dict, timeout: float) -> None:
    """The spawned process: join the group, build the rank (`LLM` with this rank's shards),
    serve. An error is printed and ends the process with status 1; rank 0 learns of it at
    start-up (the ranks exchange their status once the weights are loaded) or from its next
    collective."""
    from . import tp_group
    from .llm import LLM   # a rank is an LLM, and an LLM starts the ranks: this circle is the process model's own
    try:
        group = tp_group.join(rank, world, device, init, timeout)
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
    try:
        llm = LLM._rank(spec, group)
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
    sys.exit(serve(llm))


def serve(llm) -> int:
    """Run rank 0's commands on this rank until "exit"; the process's exit status."""
    import torch
    group = llm._tp
    try:
        with llm._on_device(), torch.inference_mode():
            while True:
                command = group.recv()
                kind = command[0]
                if kind == "prefill":
                    llm._prefill_ids(command[1])
                elif kind == "decode":
                    llm.decode_steps.run(*command[1:])
                elif kind == "weight_bytes":
                    group.exchange(llm._weight_bytes())
                elif kind == "exit":
                    break
    except BaseException:
        traceback.print_exc()
        group.close(kill=True)
        return 1
    group.close()                    # this rank's groups (the default one too, unless torchrun's script made it)
    return 0
