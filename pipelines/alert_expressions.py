"""A rule's `when` and `value`, compiled once into Python over numpy arrays, as `DataFrame.eval` evaluates them.

`DataFrame.eval` parses its expression on every call and builds a resolver (a Series) for every column of the
frame, which made it the largest single cost of an engine step on a live micro-batch (~12 calls a step, a few
milliseconds each). The rules' expressions are few and fixed: each is parsed here once, rewritten with pandas'
own rules for its expression language, compiled, and evaluated on the named columns' arrays.

pandas' rules, kept: `&` and `|` are `and` and `or` (with their precedence: `a > 1 & b < 2` is
`(a > 1) and (b < 2)`), and `and`, `or`, `not` apply element-wise; a chained comparison `a < b < c` is
`(a < b) and (b < c)`. An expression using anything beyond names, numbers, arithmetic, comparisons and boolean
operators (a function call, `in`, a string, an `@` local) is left to `DataFrame.eval` itself.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from dataclasses import dataclass
from types import CodeType
from typing import Any

import numpy as np
import pandas as pd

_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd, ast.BitOr,
              ast.BitXor, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.And, ast.Or, ast.Not,
              ast.Invert, ast.USub, ast.UAdd)
_NODES = (ast.Expression, ast.Name, ast.Load, ast.Constant, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Unsupported(Exception):
    pass


def _with_boolean_precedence(text: str) -> str:
    """pandas' own rewrite: the tokens `&` and `|` become `and` and `or`."""
    tokens = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.OP and tok.string in ("&", "|"):
            tokens.append((tokenize.NAME, "and" if tok.string == "&" else "or"))
        elif tok.type == tokenize.OP and tok.string == "@":
            raise _Unsupported("@ local")
        else:
            tokens.append((tok.type, tok.string))
    return tokenize.untokenize(tokens)


class _ElementWise(ast.NodeTransformer):
    """`and`/`or`/`not` to `&`/`|`/`~`; a chained comparison to the `&` of its links."""

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        values = [self.visit(v) for v in node.values]
        op: ast.operator = ast.BitAnd() if isinstance(node.op, ast.And) else ast.BitOr()
        return functools.reduce(lambda left, right: ast.BinOp(left, op, right), values)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        operand = self.visit(node.operand)
        return ast.UnaryOp(ast.Invert() if isinstance(node.op, ast.Not) else node.op, operand)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        sides = [self.visit(node.left), *(self.visit(c) for c in node.comparators)]
        links: list[ast.expr] = [ast.Compare(sides[i], [op], [sides[i + 1]]) for i, op in enumerate(node.ops)]
        return functools.reduce(lambda left, right: ast.BinOp(left, ast.BitAnd(), right), links)


@dataclass(frozen=True)
class Compiled:
    text: str
    names: tuple[str, ...]      # the columns it reads
    code: CodeType | None       # None: left to DataFrame.eval

    def evaluate(self, frame: pd.DataFrame) -> Any:
        """The expression over `frame`: an array of len(frame), or a scalar when it names no column."""
        if self.code is None or not all(n in frame.columns for n in self.names):
            # Unsupported, or a name that is no column (DataFrame.eval resolves or refuses it, as it always has).
            named = [c for c in frame.columns if c in self.names]
            return frame[named].eval(self.text, engine="python")
        arrays = {n: frame[n].to_numpy() for n in self.names}
        with np.errstate(all="ignore"):  # x / 0 is inf, as pandas gives it, without a warning
            return eval(self.code, {"__builtins__": {}}, arrays)  # our own AST: names, operators, numbers


@functools.cache
def compiled(text: str) -> Compiled:
    try:
        names = tuple(dict.fromkeys(t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
                                    if t.type == tokenize.NAME and t.string not in ("and", "or", "not")))
        tree = ast.parse(_with_boolean_precedence(text).strip(), mode="eval")
        if not all(isinstance(n, (*_NODES, *_OPERATORS)) for n in ast.walk(tree)):
            raise _Unsupported(text)
        if any(isinstance(n, ast.Constant) and not isinstance(n.value, bool | int | float) for n in ast.walk(tree)):
            raise _Unsupported(text)
        if not names or any(n in ("True", "False") for n in names):  # `~True` is -2 in Python: pandas' own way
            raise _Unsupported(text)
        code = compile(ast.fix_missing_locations(_ElementWise().visit(tree)), f"<rule {text!r}>", "eval")
    except (_Unsupported, SyntaxError, tokenize.TokenError):
        return Compiled(text, tuple(sorted(set(_NAME.findall(text)))), None)
    return Compiled(text, names, code)
