"""tilesafe.engine: a Qwen3 inference engine whose every kernel is a safe tilesafe kernel.

    from tilesafe.engine import LLM, SamplingParams
    llm = LLM(model_dir, device="cuda", dtype="bfloat16", max_model_len=4096)
    out = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=32))[0]
    print(out.outputs[0].text)
"""
from .config import Qwen3Config
from .errors import CheckpointError, RequestError
from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestOutput
from .parallel import TensorParallelError
from .sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "CheckpointError",
           "RequestError", "Qwen3Config", "TensorParallelError"]
