"""Launch contracts: the block shape, shared memory and compute capability a kernel needs.

Checked twice, as the issue asks: when the kernel is defined (a block of at most 1024
threads, static shared memory within the contract and the device: `KernelError`) and when it
is launched (the device's capability: `LaunchError`), before any GPU work.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import KernelError, LaunchError

MAX_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
STATIC_SHARED_LIMIT = 48 * 1024      # bytes of static shared memory a block may declare (CUDA)
DEVICE_SHARED_LIMIT = 227 * 1024     # the most a Hopper block may opt in to
MAX_SM_THREADS = 2048                # resident threads an SM holds (compute capability 7.0 to 9.0)


@dataclass(frozen=True, slots=True)
class Contract:
    """What a SIMT kernel promises and needs.

    block: threads per block, (x,) or (x, y) or (x, y, z) as in CUDA.
    shared_memory: the most shared memory (bytes) the kernel may declare; None: the device limit.
    capability: the least compute capability, e.g. (9, 0).
    blocks_per_sm: None, or how many blocks an SM should hold at once: the GPU compile keeps each
        thread's registers within what that many blocks leave (CUDA's launch bounds), e.g. 8 blocks
        of 256 threads: 32 registers a thread. A performance hint: results are the same.
    """
    block: tuple = (256,)
    shared_memory: int | None = None
    capability: tuple = (7, 0)
    blocks_per_sm: int | None = None

    @property
    def threads(self) -> int:
        return math.prod(self.block)


def check_definition(contract, shared_bytes: int, where, shared_where) -> None:
    """The definition-time half: raises KernelError at `where` (the decorator's line), or for
    shared memory at `shared_where` (the first shared array's declaration)."""
    if not isinstance(contract, Contract):
        raise KernelError(f"contract= takes a simt.Contract, got {type(contract).__name__}", where,
                          help="write @simt.kernel(contract=simt.Contract(block=(256,)))")
    block = contract.block
    if not (isinstance(block, tuple) and 1 <= len(block) <= 3 and all(isinstance(b, int) and b >= 1 for b in block)):
        raise KernelError(f"the contract's block {block!r} must be a tuple of 1 to 3 positive ints", where)
    if contract.threads > MAX_THREADS or any(b > m for b, m in zip(block, MAX_BLOCK)):
        raise KernelError(f"the contract's block {block} has {contract.threads} threads; a block holds at most "
                          f"{MAX_THREADS} (and at most {MAX_BLOCK} per axis)", where,
                          help="use a smaller block and more blocks")
    per_sm = contract.blocks_per_sm
    if per_sm is not None and not (type(per_sm) is int and 1 <= per_sm and per_sm * contract.threads <= MAX_SM_THREADS):
        raise KernelError(f"the contract's blocks_per_sm={per_sm!r} must be a positive int with at most "
                          f"{MAX_SM_THREADS} threads an SM ({contract.threads} a block)", where,
                          help="ask for fewer blocks an SM, or leave blocks_per_sm=None")
    if contract.shared_memory is not None and contract.shared_memory > DEVICE_SHARED_LIMIT:
        raise KernelError(f"the contract's shared memory, {contract.shared_memory} bytes, is more than a block "
                          f"can have ({DEVICE_SHARED_LIMIT} bytes)", where)
    budget = STATIC_SHARED_LIMIT if contract.shared_memory is None else min(contract.shared_memory,
                                                                             STATIC_SHARED_LIMIT)
    if shared_bytes > budget:
        which = "the contract's" if contract.shared_memory is not None and budget == contract.shared_memory \
            else "the device's static"
        raise KernelError(f"the kernel declares {shared_bytes} bytes of shared memory, more than {which} "
                          f"limit of {budget} bytes", shared_where,
                          help="use smaller shared arrays, or raise shared_memory= in the contract")


def check_capability(contract: Contract, device_capability: tuple, device: str, loc) -> None:
    """The launch-time half: the device must have at least the contract's capability."""
    if tuple(device_capability) < tuple(contract.capability):
        need = ".".join(map(str, contract.capability))
        have = ".".join(map(str, device_capability))
        raise LaunchError(f"the kernel's contract needs compute capability {need}, but {device} has {have}", loc,
                          help="launch it on a newer GPU, or lower capability= in the contract "
                               "if the kernel does not need it")
