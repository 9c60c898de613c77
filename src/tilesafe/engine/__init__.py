"""tilesafe.engine: a Qwen3 inference engine whose every kernel is a safe tilesafe kernel."""
from .config import Qwen3Config
from .errors import CheckpointError, RequestError
