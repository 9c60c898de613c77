"""The host side of one decode step: its inputs sent, its tokens read back, one sync a token.

A decode step's inputs (token, position, cache length and cache row of each row, then each
row's block table) are written into a host staging buffer, pinned on a GPU, and copied to
the step's device buffer without waiting (`non_blocking`): a copy from pageable memory, or a
`torch.tensor` made per token, costs a stream synchronisation and an allocation each. The
outputs (tokens and their log-probabilities) come back through pinned buffers by two queued
copies and one synchronisation, instead of one synchronising copy each. That sync is the
only host wait of a step; the staging buffer is rewritten only after it (or after a full
sync, if an error left a copy in flight).

Two layouts of the same buffer — ids, positions, lengths, cache rows (B each), then the
(B, W) block tables:
- the offline engine's slot cache (`send`): W = 1, row i's table is [its cache slot];
- the serving engine's paged cache (`send_paged`, Activations from `paged_activations`):
  W = the blocks of a max_model_len sequence. A batch of n real rows fills rows 0..n-1;
  rows n..B-1 are padding (token 0 at position 0, length 1, cache row -1: the KV write
  skips it, a table of zeros: its attention reads block 0's first row, finite). A table
  row is written incrementally: a row that holds the same request's table as last step
  (the block manager's live list) gets only its new entries, so a step costs O(new
  blocks), not O(batch x max_blocks); rows in a run with the same table (a prompt's rows
  in a serving row step, which move between steps) are copies of the run's first row.

Launched ahead (`send_ahead`): the serving engine may launch a decode step before reading
the tokens of the one before, when it feeds the same rows their next tokens: the tokens'
copies back are queued first (the next step overwrites them), the next inputs are the last
ones one position further — staged in one of two spare pinned buffers, each rewritten only
after its own copy ran — and each row's token goes from the device's tokens to its ids by a
queued device copy. `receive` then waits for the tokens' copies alone, not for the step
launched after them: the host prepares step N + 1 while step N runs.
"""
from __future__ import annotations

import dataclasses

import torch

from .model import Activations


def paged_activations(a: Activations, width: int) -> Activations:
    """`a` with an input buffer whose block tables hold `width` entries a row (the paged
    cache's layout): ids, positions, lens, slots (B each), then tables (B, width), one
    buffer so the step's inputs reach the device in one copy."""
    b = a.ids.shape[0]
    buf = torch.zeros(b * (4 + width), dtype=torch.int32, device=a.ids.device)
    return dataclasses.replace(a, inputs=buf, ids=buf[:b], positions=buf[b:2 * b], lens=buf[2 * b:3 * b],
                               slots=buf[3 * b:4 * b], tables=buf[4 * b:].view(b, width))


class StepIO:
    def __init__(self, a: Activations):
        self.inputs, self.tokens, self.chosen = a.inputs, a.tokens, a.chosen
        self.cuda = a.inputs.device.type == "cuda"
        self.batch, self.width = a.tables.shape
        self.staged = torch.zeros(a.inputs.shape, dtype=torch.int32, pin_memory=self.cuda)
        self.rows = self.staged.numpy()      # the same memory, written without torch's per-op cost
        flat, b = self.rows.reshape(-1), self.batch
        self._ids, self._positions, self._lens, self._cache_rows = (flat[k * b:(k + 1) * b] for k in range(4))
        self._tables = flat[4 * b:].reshape(b, self.width)
        self._table_of: list = [None] * b    # the live table list each row's entries were copied from
        self._table_len = [0] * b            # how many of its entries are in the row
        self.out_tokens = torch.empty(a.tokens.shape, dtype=a.tokens.dtype, pin_memory=self.cuda)
        self.out_chosen = torch.empty(a.chosen.shape, dtype=a.chosen.dtype, pin_memory=self.cuda)
        self.in_flight = False               # a copy from `staged` may still be queued
        self.ids = a.ids
        self._last = self.rows               # the host copy of the inputs last sent
        self._spare: list = []               # send_ahead's two (pinned tensor, its numpy, copy event)
        self._received = None                # the event after the tokens' queued copies back (start_receive)

    def send(self, ids: list[int], positions: list[int], slots: list[int], max_model_len: int) -> None:
        """The slot cache: rows ids, positions, cache lengths, cache rows, slots (the tables)."""
        self._wait()
        r = self.rows
        r[0] = ids
        r[1] = positions
        r[2] = r[1] + 1
        r[3] = [s * max_model_len + p for s, p in zip(slots, positions)]   # Python ints: overflow raises
        r[4] = slots
        self._copy()

    def send_paged(self, ids: list[int], positions: list[int], cache_rows: list[int], tables: list[list[int]]) -> None:
        """The paged cache: row i (i < n = len(ids)) feeds ids[i] at positions[i], writes its KV
        at cache row cache_rows[i] and reads its keys through tables[i] (the block manager's
        live list of the request's blocks: only grown while the request runs); rows n.. are
        padding."""
        self._wait()
        self._last = self.rows
        n, b = len(ids), self.batch
        self._ids[:n] = ids
        self._positions[:n] = positions
        self._lens[:n] = self._positions[:n] + 1
        self._cache_rows[:n] = cache_rows
        if n < b:
            self._ids[n:], self._positions[n:], self._lens[n:], self._cache_rows[n:] = 0, 0, 1, -1
        owner, length, t = self._table_of, self._table_len, self._tables
        i, m = 0, len(tables)
        while i < m:
            table = tables[i]
            k = len(table)
            if owner[i] is table:            # the same request's table: only its new blocks
                if k != length[i]:
                    t[i, length[i]:k] = table[length[i]:]
            else:
                t[i, :k] = table
                t[i, k:] = 0
            j = i + 1                        # rows after it with the same table (a prompt's rows in a
            while j < m and tables[j] is table:      # serving row step): copies of its row, one numpy op
                j += 1
            if j > i + 1:
                t[i + 1:j] = t[i]
            owner[i:j] = [table] * (j - i)
            length[i:j] = [k] * (j - i)
            i = j
        for i in range(n, b):
            if owner[i] is not None or length[i]:
                t[i] = 0
                owner[i], length[i] = None, 0
        self._copy()

    def send_ahead(self, n: int, cache_rows: list[int], tables: list[list[int]]) -> None:
        """Inputs of the next step of the same rows, sent before this step's tokens are read:
        row i < n feeds this step's token i at its position + 1 (length + 1), writes its KV
        at cache_rows[i] and reads through tables[i] (the table it had, or that table grown
        by one block: only its last entry is written); the rows past n stay padding. This
        step's tokens are queued back first."""
        self.start_receive()
        if not self._spare:
            self._spare = [self._spare_buffer() for _ in range(2)]
        spare = self._spare.pop(0)
        self._spare.append(spare)
        staged, rows, copied = spare
        if copied is not None:
            copied.synchronize()              # its last copy ran (two steps ago): free to rewrite
        rows[:] = self._last
        flat, b = rows.reshape(-1), self.batch
        flat[b:b + n] += 1                    # positions
        flat[2 * b:2 * b + n] += 1            # lengths
        flat[3 * b:3 * b + n] = cache_rows
        t = flat[4 * b:].reshape(b, self.width)
        for i, table in enumerate(tables):
            t[i, len(table) - 1] = table[-1]
        self.inputs.copy_(staged, non_blocking=True)
        if copied is not None:
            copied.record()
        self.ids[:n].copy_(self.tokens[:n], non_blocking=True)   # device to device, after the step
        self._last = rows

    def _spare_buffer(self) -> tuple:
        staged = torch.zeros(self.staged.shape, dtype=torch.int32, pin_memory=self.cuda)
        return staged, staged.numpy(), torch.cuda.Event() if self.cuda else None

    def start_receive(self) -> None:
        """Queue the copies of the step's tokens back now (a step launched after it rewrites them)."""
        if self._received is None:
            self.out_tokens.copy_(self.tokens, non_blocking=True)
            self.out_chosen.copy_(self.chosen, non_blocking=True)
            self._received = torch.cuda.Event() if self.cuda else True
            if self.cuda:
                self._received.record()

    def receive(self, n: int | None = None) -> tuple[list[int], list[float]]:
        """The step's tokens and their log-probabilities (of its first n rows), once it has run."""
        if not self.cuda and self._received is None:
            return self.tokens[:n].tolist(), self.chosen[:n].tolist()
        self.start_receive()
        if self.cuda:
            self._received.synchronize()      # those copies only: a step launched ahead runs on
        self._received = None
        self.in_flight = False
        return self.out_tokens[:n].tolist(), self.out_chosen[:n].tolist()

    def _wait(self) -> None:
        if self.in_flight:                   # a step that raised before reading its tokens back
            torch.cuda.synchronize(self.inputs.device)

    def _copy(self) -> None:
        self.in_flight = self.cuda
        self.inputs.copy_(self.staged, non_blocking=True)
