"""``math_equiv``: a final answer checked for mathematical equivalence, for MATH-style benchmarks.

The reply's last ``\\boxed{...}`` (or its final expression) and the item's answer (LaTeX) are
parsed and compared by `math-verify <https://github.com/huggingface/Math-Verify>`_, which
decides equivalence with sympy: ``\\frac{1}{2}``, ``0.5`` and ``1/2`` agree, as do intervals,
sets and radicals written differently. String comparison would mark such answers wrong.

Used by dotted path: ``[checker] implementation = "ape.tasks.checking.math_equiv:MathEquivChecker"``
with ``args = { field = "answer" }``; needs the ``math`` extra (``pip install 'ape-bench[math]'``).
math-verify's own timeouts use signals, which work only on a process's main thread, so
they are off here: ``[checker] timeout_s`` bounds each check instead.
"""

from __future__ import annotations

import logging
from typing import Any

from ape.schemas.check import Failed, Passed
from ape.schemas.errors import ApeError


class MathEquivChecker:
    """Passed when the reply's final answer equals the item's ``field`` mathematically."""

    def __init__(self, field: str = "answer"):
        try:
            import math_verify  # noqa: PLC0415 - the math extra, only for this checker
        except ImportError:
            raise ApeError(
                "the math_equiv checker needs math-verify, which is not installed",
                where="[checker] implementation",
                hint="pip install 'ape-bench[math]'",
            ) from None
        logging.getLogger("math_verify").setLevel(logging.ERROR)  # its note that its timeouts are off
        self.field = field
        self._verify = math_verify

    def __call__(self, item: Any, solution: Any) -> Passed | Failed:
        reference = str(getattr(item, self.field))
        gold = self._verify.parse(f"${reference}$", parsing_timeout=None)
        answer = self._verify.parse(str(solution), parsing_timeout=None)
        if not answer:
            return Failed(reason="no final answer found in the reply")
        if self._verify.verify(gold, answer, timeout_seconds=None):
            return Passed()
        return Failed(reason=f"{answer[-1]} is not {reference}")
