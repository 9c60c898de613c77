"""A tensor-parallel rank that dies mid-run is a TensorParallelError naming it, raised by
rank 0's next call within seconds (gloo sees the closed connection), not a hang; the LLM
then refuses further calls. Its own module: it kills its LLM's other rank."""
import os
import signal
import sys
import time

import pytest

from tilesafe.engine import LLM, SamplingParams
from tilesafe.engine.parallel import TensorParallelError


def here() -> int:
    return sys._getframe(1).f_lineno


def test_a_rank_that_dies_is_an_error_not_a_hang(checkpoint):
    folder, _ = checkpoint()
    llm = LLM(str(folder), device="cpu", max_model_len=32, max_num_seqs=2, progress=False,
              tensor_parallel_size=2, tp_timeout=60)
    try:
        params = SamplingParams(temperature=0, max_tokens=3)
        assert len(llm.generate([{"prompt_token_ids": [1, 2, 3]}], params)[0].outputs[0].token_ids) == 3
        worker = llm._tp.processes[0]
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(timeout=30)
        start = time.monotonic()
        line = here() + 2
        with pytest.raises(TensorParallelError) as info:
            llm.generate([{"prompt_token_ids": [4, 5]}], params)
        assert time.monotonic() - start < 30                  # well under tp_timeout: no wait for a timeout
        assert info.value.message == f"tensor parallelism: rank 1 exited with code {-signal.SIGKILL}; " \
                                     "the LLM cannot continue"
        assert info.value.loc.file == __file__ and info.value.loc.line == line
        with pytest.raises(TensorParallelError, match="was closed, or one of its ranks failed"):
            llm.generate([{"prompt_token_ids": [4, 5]}], params)
    finally:
        llm.close()
