"""The ranks of a tensor-parallel LLM: starting them, the process group, the command channel.

Two ways to get N ranks:
- `LLM(..., tensor_parallel_size=N)` in a plain process: this process is rank 0 (the driver)
  and starts ranks 1..N-1 itself (torch.multiprocessing, spawn), each running `_rank_main`;
- under `torchrun --nproc-per-node N` (its RANK / WORLD_SIZE / MASTER_ADDR variables are
  set): every process runs the script; rank 0's `LLM(...)` returns the LLM, the other
  ranks' `LLM(...)` serve rank 0 until it closes, then exit the process.

Rank 0 decides everything (prompts, stops, sampling) and sends each model call (a prefill's
prompts, a decode step's ids and positions) to the other ranks over a gloo group kept for
commands; every rank then runs the same call on its share of the weights, the collectives
inside it over the default group (NCCL on GPUs, gloo on CPUs). The default group has a
timeout (`tp_timeout`), so a rank that stops answering fails a collective instead of hanging
it; the command group waits without one (a driver may sit idle between requests), and a
third group with the timeout carries the ranks' status exchanges (a rank stuck loading its
weights fails rank 0's start-up after `tp_timeout`).
"""
from __future__ import annotations

import datetime
import os
import socket
import sys
import traceback
from dataclasses import dataclass, field

from .parallel import tp_error

IDLE = datetime.timedelta(days=7)      # the command group: workers wait for the driver's next request


@dataclass
class RankGroup:
    rank: int
    world: int
    device: str                  # this rank's device: "cpu" or "cuda:<local rank>"
    ctrl: object                 # the gloo group commands travel on (no timeout: idle between requests)
    timed: object = None         # a gloo group with tp_timeout, for the ranks' status exchanges
    processes: list = field(default_factory=list)   # the workers this driver spawned
    torchrun: bool = False
    closed: bool = False
    header: object = None        # (2 + 3 rows,) i64: a decode step's ids, positions, slots, or "object follows"
    owns: bool = True            # this group made the default process group (False: torchrun's script did)

    # -- commands (rank 0 sends, the others receive) ----------------------------------------
    # Every command starts with one broadcast of `header`: a decode step (the common case, once
    # per token) travels in it whole; any other command is a pickled object broadcast after it.

    def set_rows(self, rows: int) -> None:
        """Size the header for decode steps of up to `rows` sequences (every rank the same)."""
        import torch
        self.header = torch.zeros(2 + 3 * rows, dtype=torch.int64)

    def send(self, *command) -> None:
        import torch.distributed as dist
        self._usable()
        try:
            self.header[0] = 0
            dist.broadcast(self.header, src=0, group=self.ctrl)
            dist.broadcast_object_list([command], src=0, group=self.ctrl)
        except (RuntimeError, ValueError) as e:
            raise self.failure(e) from None

    def send_step(self, ids: list[int], positions: list[int], slots: list[int]) -> None:
        """A decode step: one broadcast of a few integers."""
        import torch.distributed as dist
        self._usable()
        b = len(ids)
        h = self.header.numpy()        # the same memory, written without two torch.tensor a token
        h[0], h[1] = 1, b
        h[2:2 + 3 * b] = ids + positions + slots
        try:
            dist.broadcast(self.header, src=0, group=self.ctrl)
        except (RuntimeError, ValueError) as e:
            raise self.failure(e) from None

    def recv(self) -> tuple:
        import torch.distributed as dist
        dist.broadcast(self.header, src=0, group=self.ctrl)
        if int(self.header[0]) == 1:
            b = int(self.header[1])
            values = self.header[2:2 + 3 * b].tolist()
            return "decode", values[:b], values[b:2 * b], values[2 * b:]
        box = [None]
        dist.broadcast_object_list(box, src=0, group=self.ctrl)
        return box[0]

    def exchange(self, value) -> list:
        """Every rank's `value`, in rank order (on every rank)."""
        import torch.distributed as dist
        out = [None] * self.world
        try:
            dist.all_gather_object(out, value, group=self.timed)
        except (RuntimeError, ValueError) as e:
            raise self.failure(e) from None
        return out

    # -- failures and the end ---------------------------------------------------------------

    def failure(self, e: Exception):
        """The error for a failed collective or command: which ranks exited, if known. The
        group is unusable afterwards."""
        gone = self.exited()
        self.close(kill=True)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        who = "; ".join(f"rank {r} exited with code {c}" for r, c in gone) or f"a rank failed ({first})"
        return tp_error(f"tensor parallelism: {who}; the LLM cannot continue",
                        help="see the failed rank's error above; make a new LLM")

    def exited(self) -> list[tuple[int, int]]:
        return [(r, p.exitcode) for r, p in enumerate(self.processes, start=1) if p.exitcode is not None]

    def _usable(self) -> None:
        if self.closed:
            raise tp_error("this tensor-parallel LLM was closed, or one of its ranks failed",
                           help="make a new LLM")

    def close(self, kill: bool = False) -> None:
        """Rank 0: tell the other ranks to exit, wait for them, end the process groups."""
        import torch.distributed as dist
        if self.closed:
            return
        self.closed = True
        if self.rank == 0 and not kill:
            try:
                self.header[0] = 0
                dist.broadcast(self.header, src=0, group=self.ctrl)
                dist.broadcast_object_list([("exit",)], src=0, group=self.ctrl)
            except (RuntimeError, ValueError):
                kill = True
        for p in self.processes:
            p.join(timeout=5 if kill else 60)          # a rank that does not exit is ended
            if p.is_alive():
                p.kill()
                p.join()
        if dist.is_initialized():
            try:
                for g in ([None] if self.owns else [self.ctrl, self.timed]):   # None: the default, and every group
                    dist.destroy_process_group(g)
            except Exception:    # torch's and the backends' errors: a group whose peers are gone
                if not kill:
                    raise


def world_of(tensor_parallel_size: int) -> tuple[int, dict | None]:
    """(world size, torchrun's environment or None). Under torchrun the world is its
    WORLD_SIZE, which tensor_parallel_size must equal when it asks for more than one rank."""
    if not isinstance(tensor_parallel_size, int) or isinstance(tensor_parallel_size, bool) or tensor_parallel_size < 1:
        raise tp_error(f"tensor_parallel_size must be a positive int, got {tensor_parallel_size!r}",
                       help="pass the number of GPUs to split the model over (1: no tensor parallelism)")
    env = torchrun_env()
    if env is None or tensor_parallel_size == 1:
        return tensor_parallel_size, None
    if env["world"] != tensor_parallel_size:
        raise tp_error(f"tensor_parallel_size {tensor_parallel_size} does not match torchrun's WORLD_SIZE "
                       f"{env['world']}", help="start torchrun with --nproc-per-node equal to tensor_parallel_size")
    return tensor_parallel_size, env


def torchrun_env() -> dict | None:
    """torchrun's variables (the one place they are read), or None outside torchrun."""
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        return None
    try:
        return {"world": int(os.environ["WORLD_SIZE"]), "rank": int(os.environ["RANK"]),
                "local_rank": int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))}
    except ValueError:
        raise tp_error("torchrun's RANK / WORLD_SIZE / LOCAL_RANK are not integers",
                       help="start the script with torchrun, or unset RANK and WORLD_SIZE") from None


def start(world: int, env: dict | None, device: str, spec: dict, timeout: float, run) -> RankGroup:
    """Rank 0 of a new group (its workers spawned), or this torchrun process's rank.

    Each spawned worker joins the group and calls `run(spec, group)` (the LLM's: build this
    rank's share, then serve rank 0; its exit status): the LLM hands it in, so this module
    starts ranks without importing the LLM that starts it."""
    if env is not None:
        return join(env["rank"], world, _device(device, env["local_rank"]), "env://", timeout, torchrun=True)
    import torch.multiprocessing as mp
    init = f"tcp://127.0.0.1:{_free_port()}"
    ctx = mp.get_context("spawn")
    processes = [ctx.Process(target=_rank_main, args=(r, world, _device(device, r), init, spec, timeout, run),
                             daemon=True, name=f"tilesafe-tp-rank{r}") for r in range(1, world)]
    for p in processes:
        p.start()
    try:
        group = join(0, world, _device(device, 0), init, timeout)
    except BaseException:
        for p in processes:
            p.kill()
        raise
    group.processes = processes
    if device != "cpu":
        _watch(group)
    return group


def _rank_main(rank: int, world: int, device: str, init: str, spec: dict, timeout: float, run) -> None:
    """A spawned rank's process: join the group, then `run(spec, group)` until rank 0 says
    exit. An error is printed and ends the process with status 1; rank 0 learns of it at
    start-up (the ranks exchange their status once the weights are loaded) or from its next
    collective."""
    try:
        status = run(spec, join(rank, world, device, init, timeout))
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
    sys.exit(status)


def _watch(group: RankGroup) -> None:
    """NCCL does not notice a peer that died: a collective waiting for it spins until the
    watchdog's timeout ends the whole process. So a thread waits for the spawned workers to
    exit and, if one does while the group is in use, aborts the NCCL communicator: the
    waiting collective returns, and rank 0's next command names the dead rank (gloo sees the
    closed connection at once)."""
    import threading
    from multiprocessing.connection import wait

    def watch():
        wait([p.sentinel for p in group.processes])
        if not group.closed:
            import torch.distributed.distributed_c10d as c10d
            abort = getattr(c10d, "_abort_process_group", None)    # torch's (experimental) abort
            if abort is not None:
                try:
                    abort()
                except Exception:   # the group may be ending on its own: nothing more to do
                    pass
    threading.Thread(target=watch, name="tilesafe-tp-watch", daemon=True).start()


def join(rank: int, world: int, device: str, init: str, timeout: float, torchrun: bool = False) -> RankGroup:
    """Join (or, on rank 0, open) the default process group and the command group."""
    import torch
    import torch.distributed as dist
    # Under torchrun the script may have made the default group itself: the LLM then uses it
    # (and leaves it to the script at the end), if it is this rank's of this world.
    reuse = torchrun and dist.is_initialized() and dist.get_world_size() == world and dist.get_rank() == rank
    if dist.is_initialized() and not reuse:
        raise tp_error("a torch.distributed process group is already initialised in this process",
                       help="one tensor-parallel LLM per process: close() the other one first")
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(torch.device(device))
    try:
        if not reuse:
            dist.init_process_group(backend, init_method=init, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=timeout))
        ctrl = dist.new_group(backend="gloo", timeout=IDLE)
        timed = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout))
    except (RuntimeError, ValueError) as e:      # a rendezvous that timed out, a port in use
        raise tp_error(f"tensor parallelism: rank {rank} of {world} could not join the process group: "
                       f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}",
                       help="every rank must start within tp_timeout; check that no rank failed to start") from None
    return RankGroup(rank, world, device, ctrl, timed, torchrun=torchrun, owns=not reuse)


def _device(device: str, local_rank: int) -> str:
    return "cpu" if device == "cpu" else f"cuda:{local_rank}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
