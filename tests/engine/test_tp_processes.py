"""The processes of tensor parallelism: a rank that dies mid-run is a TensorParallelError
naming it, raised by rank 0's next call within seconds (gloo sees the closed connection),
not a hang, and the LLM then refuses further calls; under torchrun rank 0's script goes on
past `LLM(...)` with the tokens of one rank while rank 1 serves it and exits. A module of its
own: each test makes (and ends) its own process group."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tilesafe.engine import LLM, SamplingParams
from tilesafe.engine.parallel import TensorParallelError


SRC = Path(__file__).resolve().parents[2] / "src"


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


@pytest.mark.parametrize("script_inits", [False, True], ids=["llm-inits-the-group", "script-inits-the-group"])
def test_torchrun_ranks_run_one_script(checkpoint, tmp_path, script_inits):
    """The LLM makes the process group from torchrun's variables, or uses the one the script made."""
    folder, _ = checkpoint()
    params = SamplingParams(temperature=0, max_tokens=5)
    want = LLM(str(folder), device="cpu", max_model_len=32, progress=False).generate(
        [{"prompt_token_ids": [9, 8, 7]}], params)[0].outputs[0].token_ids
    script = tmp_path / "tp_script.py"
    script.write_text(textwrap.dedent(f"""
        import os
        import torch.distributed as dist
        from tilesafe.engine import LLM, SamplingParams
        if {script_inits}:
            dist.init_process_group("gloo")
        llm = LLM({str(folder)!r}, device="cpu", max_model_len=32, progress=False, tensor_parallel_size=2,
                  tp_timeout=60)
        print("past LLM() on rank", os.environ["RANK"], flush=True)
        out = llm.generate([{{"prompt_token_ids": [9, 8, 7]}}], SamplingParams(temperature=0, max_tokens=5))
        print("tokens", out[0].outputs[0].token_ids, flush=True)
        llm.close()
        print("group left to the script:", dist.is_initialized(), flush=True)
    """))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-port", str(port), str(script)], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
                             filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))})
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert "past LLM() on rank 0" in lines and "past LLM() on rank 1" not in lines
    assert f"tokens {want}" in lines
    assert f"group left to the script: {script_inits}" in lines
