"""Shared memory is safe: phases separated by `simt.barrier()` (checked at definition).

Within a phase each thread writes only its own permits of a shared array; after the barrier
every thread may read it. Refused, at the offending access:
- a read of a shared array written earlier in the same phase (not yet separated by a barrier);
- a write after reads of the same array in the same phase (another thread may still read);
- two walks writing one array in the same phase (their permits may overlap across threads);
- atomic updates (`s.add(i, v)`) in a phase that also writes or reads the array: atomics
  commute with each other, so they get a phase of their own.
A loop is followed twice, so a write at the bottom of an iteration meets the reads at the top
of the next; both branches of an `if` start from the same state and are merged.
"""
from __future__ import annotations

import ast

from .kernel_info import resolve_op


def check_phases(src, info, scope) -> None:
    if info.shared:
        _Phases(src, info, scope).block(src.tree.body, {})


class _Phases:
    def __init__(self, src, info, scope):
        self.src, self.shared, self.scope = src, set(info.shared), scope

    def block(self, stmts, state):
        for s in stmts:
            state = self.stmt(s, state)
        return state

    def stmt(self, s, state):
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) \
                and resolve_op(s.value.func, self.scope) == "barrier":
            return {}
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Attribute) \
                and isinstance(s.value.func.value, ast.Name) and s.value.func.value.id in self.shared:
            for a in s.value.args:
                self.reads(a, state)
            self.atomic(s.value, s.value.func.value.id, state)
            return state
        if isinstance(s, ast.If):
            self.reads(s.test, state)
            return _merge(self.block(s.body, _copy(state)), self.block(s.orelse, _copy(state)))
        if isinstance(s, (ast.For, ast.While)):
            head = s.iter if isinstance(s, ast.For) else s.test
            self.reads(head, state)
            once = self.block(s.body, _copy(state))
            twice = self.block(s.body, _merge(state, once))
            return _merge(state, twice)
        targets = s.targets if isinstance(s, ast.Assign) else [getattr(s, "target", None)]
        values = [getattr(s, "value", None)]
        for v in values:
            if v is not None:
                self.reads(v, state)
        for t in targets:
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in self.shared:
                self.write(t, state)
            elif t is not None and not isinstance(t, ast.Name):
                self.reads(t, state)
        return state

    def write(self, target, state):
        name = target.value.id
        entry = state.setdefault(name, _entry())
        if entry["a"] is not None:
            raise self.src.error(target, f"write to shared array `{name}` in the phase it is updated atomically "
                                         f"(line {self.src.loc(entry['a']).line}): the update may come first",
                                 help="put simt.barrier() between the writes and the atomic updates")
        if entry["r"] is not None:
            raise self.src.error(target, f"write to shared array `{name}` after reads of it in the same phase "
                                         f"(line {self.src.loc(entry['r']).line}): another thread may still read it",
                                 help="put simt.barrier() between the reads and this write")
        walk = self.walk_of(target)
        if entry["w"] is not None and entry["w"] is not walk:
            raise self.src.error(target, f"shared array `{name}` is written by two walks in one phase: their "
                                         "permits may overlap across threads",
                                 help="put simt.barrier() between the two walks")
        entry["w"] = walk

    def atomic(self, call, name, state):
        entry = state.setdefault(name, _entry())
        if entry["w"] is not None or entry["r"] is not None:
            what, node = ("written", entry["w"]) if entry["w"] is not None else ("read", entry["r"])
            where = f" (line {self.src.loc(node).line})" if isinstance(node, ast.AST) else ""
            raise self.src.error(call, f"atomic update of shared array `{name}` in the phase it is {what}{where}: "
                                       "other threads may not be done with it",
                                 help="put simt.barrier() before the atomic updates")
        entry["a"] = entry["a"] or call

    def walk_of(self, target):
        return target.slice.id   # the permit's name stands for its walk

    def reads(self, node, state):
        for sub in ast.walk(node):
            name = _read_name(sub)
            if name in self.shared:
                entry = state.setdefault(name, _entry())
                if entry["a"] is not None:
                    raise self.src.error(sub, f"read of shared array `{name}` before a barrier: it is updated "
                                              "atomically in this phase",
                                         help="call simt.barrier() after the atomic updates and before this read")
                if entry["w"] is not None:
                    raise self.src.error(sub, f"read of shared array `{name}` before a barrier: it was written in "
                                              "this phase, and other threads may not have written their part yet",
                                         help="call simt.barrier() after the writes and before this read")
                if entry["r"] is None:
                    entry["r"] = sub


def _read_name(node):
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        return node.value.id
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
            and isinstance(node.func.value, ast.Name):
        return node.func.value.id
    return None


def _entry():
    return {"w": None, "r": None, "a": None}


def _copy(state):
    return {name: dict(entry) for name, entry in state.items()}


def _merge(a, b):
    out = {}
    for name in set(a) | set(b):
        x, y = a.get(name, _entry()), b.get(name, _entry())
        out[name] = {k: x[k] or y[k] for k in ("w", "r", "a")}
    return out
