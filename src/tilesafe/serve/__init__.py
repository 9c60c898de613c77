"""Serving: the paged KV cache's block manager (more of issue 19 — scheduler, async engine,
OpenAI-compatible server — builds on it)."""
from .block_manager import BlockManager, BlockManagerError, BlockStats

__all__ = ["BlockManager", "BlockManagerError", "BlockStats"]
