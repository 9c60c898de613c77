"""Serving (issue 19): the paged KV cache's block manager, continuous batching over the
engine's model (`EngineCore`, `Scheduler`), the asyncio engine (`AsyncLLM`) and the
OpenAI-compatible server (`build_app`, `tilesafe serve`).

The server's pieces import FastAPI, uvicorn and prometheus-client (the `serve` extra) only
when asked for."""
from .block_manager import BlockManager, BlockManagerError, BlockStats

__all__ = ["BlockManager", "BlockManagerError", "BlockStats", "AsyncLLM", "EngineCore", "Scheduler", "StreamOutput",
           "ServerMetrics", "build_app", "BackgroundServer"]

_LAZY = {"AsyncLLM": "async_llm", "EngineCore": "engine_core", "Scheduler": "scheduler", "StreamOutput": "outputs",
         "ServerMetrics": "metrics", "build_app": "api_server", "BackgroundServer": "server_thread"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
