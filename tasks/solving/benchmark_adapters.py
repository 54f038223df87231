"""Solution adapters of the catalogue's benchmarks (``ape benchmarks``), by dotted path.

GSM8K's two answer extractions follow lm-evaluation-harness's ``gsm8k`` task (its
``strict-match`` and ``flexible-extract`` filters), so that a score says which one it is:

``gsm8k_strict``
    the first number after ``#### `` (the format of the dataset's answers); a reply without
    one fails to parse, as the harness scores it wrong;
``gsm8k_flexible``
    the last number in the reply.

Both then drop commas, ``$`` and a final period, as the harness's ``regexes_to_ignore``
do before its exact match, and the checker compares with the item's ``target``.

``python_code`` takes the Python code of a reply (its first fenced block that defines a
function, or the whole reply), for HumanEval and MBPP, whose tests ``code_exec`` runs in
APE's sandbox.
"""

from __future__ import annotations

import ast
import re

from ape.schemas.benchmark_items import normalize_number

_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def gsm8k_strict(text: str) -> str:
    """The number after ``#### `` (the first such), normalized."""
    match = _STRICT.search(text)
    if match is None:
        raise ValueError("no '#### N' in the reply (strict-match)")
    return normalize_number(match.group(1))


def gsm8k_flexible(text: str) -> str:
    """The last number of the reply, normalized."""
    found = [next(group for group in match if group) for match in _FLEXIBLE.findall(text)]
    if not found:
        raise ValueError("no number in the reply (flexible-extract)")
    return normalize_number(found[-1])


def python_code(text: str) -> str:
    """The Python code of a reply: its first fenced block defining a function, else the reply.

    Raises ValueError when no function is defined or the code is not valid Python (the
    session then ends PARSING_FAILED: a failed problem, as the benchmarks score it).
    """
    blocks = [body for lang, body in _FENCE.findall(text) if lang.lower() in ("", "python", "py", "python3")]
    code = next((b for b in blocks or [text] if re.search(r"^\s*def \w+", b, re.MULTILINE)), None)
    if code is None:
        raise ValueError("the answer defines no function; reply with the whole function in a ```python block")
    try:
        ast.parse(code)
    except SyntaxError as exc:
        raise ValueError(f"the code is not valid Python: {exc.msg} (line {exc.lineno})") from None
    return code.strip("\n") + "\n"
