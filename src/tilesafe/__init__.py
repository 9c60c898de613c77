"""tilesafe: safe tile kernels for Python.

Kernels are Python functions over tiles; tilesafe proves before launch that they cannot
race, write through read-only inputs, write outside their own tile or read memory nobody
wrote, then runs them on the reference (NumPy) backend or through Triton.
"""
# The one source of the version: pyproject.toml reads this line (setuptools `attr:`).
__version__ = "0.1.0"

from .dtypes import DType, bf16, bool_, f8e4m3fn, f8e5m2, f16, f32, f64, i8, i16, i32, i64, u8
from .errors import AliasError, CompileError, KernelError, LaunchError, OwnershipError, SanitizerError, TileSafeError
from .lang.annotations import Const, Mut, MutLast, MutTiles, Ptr, Ref
from .lang.objects import function
from .lang.prefetch import prefetch
from .lang.stubs import (abs, argmax, argmin, astype, atomic_add, atomic_cas, atomic_max, atomic_min, block_id,
                         broadcast_to, ceil, cos, cumsum, dot, erf, exp, exp2, expand_dims, floor, fma, gather, join,
                         last_arrival, load, load_ptr, load_tile_like, log, log2, max, maximum, min, minimum, mma, num_blocks,
                         num_tiles, permute, print, reshape, rsqrt, scalar, sigmoid, sin, sqrt, static_assert,
                         store_ptr, sum, tanh, transpose, valid, where)
from .runtime.autotune import Autotuned, autotune
from .runtime.autotune_config import AUTO as auto, Config
from .runtime import distributed
from .runtime.constructors import arange, empty, from_torch, full, ones, rand, randn, tensor, zeros
from .runtime.freeze import freeze
from .runtime.future import Future
from .runtime.graph import Graph, graph
from .runtime.streams import stream
from .runtime.kernel import Kernel, kernel
from .runtime.partition import Partition
from .runtime.schedule import Schedule, schedule
from .runtime.scatter_index import check_scatter_index
from .runtime.spec import spec
from .runtime.tensor import Tensor
from .settings import SETTINGS as settings, backend, current_backend, pdl, strict_sync

from .lang import memory as _memory  # noqa: F401  (registers the memory ops)
