"""A safe arithmetic evaluator: the calculator tool's engine and the arithmetic mock model's.

It walks the expression's syntax tree and allows numbers, operators and a few math
functions only, with bounds on the input length and the size of powers, so neither a
model nor a data file can run code or exhaust memory through it.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
    "floor": math.floor,
    "ceil": math.ceil,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 1000
MAX_RESULT_BITS = 100_000


def calculate(expression: str) -> int | float:
    """Evaluate arithmetic by walking its syntax tree: numbers, operators and a few math
    functions only, so a model cannot run code through it."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {exc.msg}") from None
    value = _evaluate(tree.body)
    if isinstance(value, complex):
        raise ValueError("the result is not a real number")
    return value


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and (
            abs(right) > MAX_EXPONENT or (isinstance(left, int) and left.bit_length() * abs(right) > MAX_RESULT_BITS)
        ):
            raise ValueError(f"the power {ast.unparse(node)} is too large to compute")
        return _BINARY[type(node.op)](left, right)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        return _FUNCTIONS[node.func.id](*(_evaluate(arg) for arg in node.args))
    allowed = ", ".join([*_FUNCTIONS, *_CONSTANTS])
    raise ValueError(
        f"unsupported element '{ast.unparse(node)}'; use numbers, + - * / // % **, parentheses and {allowed}"
    )
