"""A kernel's Python source: its AST, and where each node is in the user's file."""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass

from ..errors import KernelError, Loc


@dataclass(frozen=True)
class KernelSource:
    fn: object
    tree: ast.FunctionDef
    file: str
    line_offset: int    # add to an AST line number to get the file's line
    col_offset: int     # indentation removed by dedent

    @staticmethod
    def of(fn) -> "KernelSource":
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError):
            raise KernelError(f"cannot read the source of `{getattr(fn, '__name__', fn)}`",
                              help="define kernels in a .py file (not in an interactive prompt)") from None
        text = "".join(lines)
        dedented = textwrap.dedent(text)
        indent = len(lines[0]) - len(lines[0].lstrip())
        module = ast.parse(dedented)
        tree = next(n for n in module.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        return KernelSource(fn, tree, inspect.getsourcefile(fn) or "<unknown>", first - 1, indent)

    def loc(self, node: ast.AST) -> Loc:
        line = getattr(node, "lineno", self.tree.lineno)
        col = getattr(node, "col_offset", 0)
        end_line = getattr(node, "end_lineno", line)
        end_col = getattr(node, "end_col_offset", col + 1)
        width = (end_col - col) if end_line == line else 1
        return Loc(self.file, line + self.line_offset, col + 1 + self.col_offset, max(1, width))

    def error(self, node: ast.AST, message: str, help: str | None = None, cls=KernelError):
        return cls(message, self.loc(node), help)

    def globals_and_closure(self) -> dict:
        """Names the kernel can see outside its body: closure cells shadow globals."""
        scope = dict(getattr(self.fn, "__globals__", {}))
        code = getattr(self.fn, "__code__", None)
        closure = getattr(self.fn, "__closure__", None) or ()
        if code is not None:
            for name, cell in zip(code.co_freevars, closure):
                try:
                    scope[name] = cell.cell_contents
                except ValueError:   # an empty cell: the name is not bound yet
                    pass
        return scope
