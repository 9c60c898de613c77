"""What to write instead of Python syntax a kernel does not support: the help line of the
error for each unsupported statement and expression (the definition check and the
lowering both name it)."""
import ast

STATEMENT_HELP = {
    ast.Break: "kernel loops cannot break early; use a `while` loop with a condition",
    ast.Continue: "use `if` around the rest of the loop body",
    ast.Assert: "use ts.static_assert(cond) for compile-time checks, or a kernel precondition",
    ast.With: "kernels have no context managers",
    ast.Try: "kernels cannot raise or catch exceptions",
    ast.Raise: "kernels cannot raise exceptions; use ts.static_assert for compile-time checks",
    ast.Global: "kernels cannot write module state",
    ast.Nonlocal: "kernels cannot write enclosing state",
    ast.FunctionDef: "define helpers at module level with @ts.function",
    ast.AnnAssign: "drop the annotation: types are inferred",
    ast.Delete: "names in a kernel cannot be deleted",
    ast.Import: "import at module level",
    ast.ImportFrom: "import at module level",
}

EXPRESSION_HELP = {
    ast.Lambda: "define a helper with @ts.function instead",
    ast.ListComp: "build tiles with ts operations (ts.arange, ts.where, ...)",
    ast.Dict: "kernels have no dictionaries",
    ast.JoinedStr: "use ts.print(\"name\", value) to print",
    ast.NamedExpr: "assign on its own line",
}


def help_for(node: ast.AST) -> str:
    """The help line for an unsupported statement or expression."""
    kind = type(node)
    return STATEMENT_HELP.get(kind) or EXPRESSION_HELP.get(kind) or "rewrite it with supported syntax"
