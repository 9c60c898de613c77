"""A permits walk's mapping, read from the kernel's source (`out.permits(simt.chunk(4))`).

Each named mapping hands distinct threads distinct elements by construction; `simt.at(e)` is
accepted only for `simt.global_id() * k + c` with compile-time k >= 1 and c >= 0 (checked again
at launch when k or c is a `simt.Const`). The mapping must fit its target's rank and the
contract's block. `ck` is the analysis's checker: its scope, contract and error reporting.
"""
from __future__ import annotations

import ast

from . import mappings as M
from . import stubs
from .kernel_info import Walk, resolve_op
from .static_values import static_int


def walk_of(ck, node, loop, permit, target, shared, rank) -> Walk:
    """The Walk a `target.permits(node)` loop makes; refuses mappings that do not fit the target or the block."""
    op = resolve_op(node.func, ck.scope) if isinstance(node, ast.Call) else None
    if op not in stubs.MAPPINGS:
        raise ck.err(node, "permits come from a mapping: simt.per_thread(), run(k), chunk(k), grid_stride(), "
                             "per_warp(k), per_block(k) or at(...)")
    walk = Walk(loop, permit, target, shared, op, rank=rank)
    threads = ck.contract.threads
    if op == M.AT:
        walk.size, walk.offset = _injective(ck, node)
    elif op in M.WITH_SIZE:
        if len(node.args) > 1 or node.keywords or op in (M.RUN, M.CHUNK) and not node.args:
            raise ck.err(node, f"simt.{op}() takes one size argument")
        walk.size = static_int(ck, node.args[0], f"simt.{op}'s size") if node.args else 0
    elif node.args or node.keywords:
        raise ck.err(node, f"simt.{op}() takes no arguments")
    if shared and op not in (M.THREAD, M.RUN, M.CHUNK, M.WARP):
        raise ck.err(node, f"shared array `{target}` takes per_thread, run, chunk or per_warp permits "
                             f"(within the block), not simt.{op}()")
    if op == M.THREAD and rank != len(ck.contract.block):
        raise ck.err(node, f"simt.per_thread() over rank-{rank} `{target}` needs a rank-{rank} block; the "
                             f"contract's block is {ck.contract.block}",
                       help="make the block's rank match (output axis -1 <-> block axis x)")
    if op == M.CHUNK and rank == 2 and len(ck.contract.block) != 2:
        raise ck.err(node, f"simt.chunk(k) over rank-2 `{target}` needs a rank-2 block; the contract's block is "
                           f"{ck.contract.block}",
                     help="a block (bx, by) covers bx columns and by*k rows (column <-> block axis x)")
    if op in (M.WARP, M.BLOCK) and walk.size == 0 and rank != 2 or op in (M.RUN, M.GRID_STRIDE, M.AT) \
            and rank != 1 or op == M.CHUNK and rank not in (1, 2) or op in (M.WARP, M.BLOCK) and walk.size != 0 \
            and rank != 1:
        raise ck.err(node, f"simt.{op}({'k' if op in M.WITH_SIZE else ''}) does not fit rank-{rank} `{target}`",
                       help="run/grid_stride/at and sized slabs take rank-1 targets, chunk rank 1 or 2; "
                            "per_warp()/per_block() give a row of a rank-2 target")
    if op == M.WARP and threads % 32:
        raise ck.err(node, f"per-warp permits need a block size that is a multiple of 32; the contract's is "
                             f"{threads}")
    return walk

def _injective(ck, call):
    """`simt.at(simt.global_id() * k + c)`: (k, c); anything else may hand two threads one element."""
    if len(call.args) != 1 or call.keywords:
        raise ck.err(call, "simt.at(index) takes one index expression")
    e = call.args[0]
    k, c = 1, 0
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add) and not _is_global_id(ck, e.right):
        c, e = static_int(ck, e.right, "simt.at's offset"), e.left
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        if _is_global_id(ck, e.left):
            k, e = static_int(ck, e.right, "simt.at's stride"), e.left
        elif _is_global_id(ck, e.right):
            k, e = static_int(ck, e.left, "simt.at's stride"), e.right
    if not _is_global_id(ck, e) or isinstance(k, int) and k < 1 or isinstance(c, int) and c < 0:
        shown = ast.unparse(call.args[0])
        raise ck.err(call.args[0], f"permits from `{shown}` overlap: two threads may hold permits to the "
                                     "same element",
                       help="simt.at takes `simt.global_id() * k + c` (k >= 1, c >= 0 compile-time ints); "
                            "give each thread its own element")
    return k, c

def _is_global_id(ck, node):
    return isinstance(node, ast.Call) and resolve_op(node.func, ck.scope) == "global_id" and not node.args
