"""The ``oracle`` mock's logic: answer from an item field with a set accuracy.

A mock for any benchmark: it knows the answer (the item's ``field``) and gives it with
probability ``accuracy``, else a wrong one. Which items it gets right is drawn from
``seed`` and the item's id (and the session's run index with ``sampling``), never from
the prompt, the call order or the worker, so a run's grades are the same with 1 or 64
solver workers, on every resume, and in every process. The chat mock
(:mod:`ape.tasks.models.mocks.chat`) writes the answer through a mustache ``template``; the
log-likelihood mock (:mod:`ape.tasks.models.mocks.scorer`) makes the gold choice (or, when
wrong, another one) the most likely.

A wrong answer is one the benchmark's checker fails and its adapter still reads, where
that can be known from the value alone:

- a number (also a numeric string: "72") becomes a different number, off by 1 to 3;
- a boolean its negation;
- with ``choices`` (an item field listing the choices): another choice, in the form of
  the right one (the text, its index from 0, or its letter A, B, ...);
- any other text a made-up word that is not the answer (``wrong`` sets the text instead:
  for code, a stub that parses and fails its tests).
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from langchain_core.prompts.string import mustache_template_vars
from langchain_core.utils import mustache

__all__ = ["format_value", "is_right", "item_field", "render_answer", "unit", "wrong_value"]

LETTERS = string.ascii_uppercase
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def unit(*parts: object) -> float:
    """A number in [0, 1) fixed by ``parts`` (the same in every process)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_right(seed: int, item_id: str, run_index: int, accuracy: float, *, sampling: bool) -> bool:
    """Whether the oracle answers this session right: one seeded draw per item (per session
    with ``sampling``), so about ``accuracy`` of the items (sessions) come out right."""
    key: tuple[object, ...] = (seed, "oracle", item_id, run_index) if sampling else (seed, "oracle", item_id)
    return unit(*key) < accuracy


def item_field(item: Any, name: str) -> Any:
    """The item's field (or alias, or property) ``name``; KeyError naming it when it has none."""
    if isinstance(item, dict):
        if name in item:
            return item[name]
    else:
        if hasattr(item, name):
            return getattr(item, name)
        fields = getattr(type(item), "model_fields", {})
        for field_name, info in fields.items():
            if info.alias == name:
                return getattr(item, field_name)
    raise KeyError(name)


def format_value(value: Any) -> str:
    """The text of an answer value: numbers without a needless ".0", lists and tables as JSON."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _other_index(index: int, count: int, key: tuple[object, ...]) -> int:
    """A seeded index in range(count) other than ``index``."""
    step = 1 + int(unit(*key, "choice") * (count - 1))
    return (index + step) % count


def _wrong_choice(value: Any, choices: Sequence[Any], key: tuple[object, ...]) -> Any:
    texts = [str(c) for c in choices]
    if len(texts) < 2:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(texts):
        return _other_index(value, len(texts), key)
    text = str(value).strip()
    if text in texts:
        return texts[_other_index(texts.index(text), len(texts), key)]
    if len(text) == 1 and text.upper() in LETTERS[: len(texts)]:
        letter = LETTERS[_other_index(LETTERS.index(text.upper()), len(texts), key)]
        return letter if text.isupper() else letter.lower()
    if text.isdigit() and int(text) < len(texts):
        return str(_other_index(int(text), len(texts), key))
    return None


def _wrong_number(value: float, key: tuple[object, ...]) -> float:
    offset = 1 + int(unit(*key, "offset") * 3)  # 1, 2 or 3
    return value - offset if unit(*key, "sign") < 0.5 else value + offset


def wrong_value(value: Any, key: tuple[object, ...], choices: Sequence[Any] | None = None) -> Any:
    """A value that is not ``value`` (module docstring), fixed by ``key``."""
    if choices is not None:
        other = _wrong_choice(value, choices, key)
        if other is not None:
            return other
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        wrong = _wrong_number(value, key)
        return int(wrong) if isinstance(value, int) else wrong
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        number = float(value.strip())
        return format_value(_wrong_number(int(number) if number.is_integer() else number, key))
    word = "".join(LETTERS[int(unit(*key, "word", i) * 26)] for i in range(6)).lower()
    return f"not-{word}"


def _context(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    return dict(dump(mode="json", by_alias=True)) if callable(dump) else {}


@lru_cache(maxsize=64)
def _tokens(template: str) -> tuple[tuple[str, str], ...]:
    """The template's mustache tokens with HTML escaping off (an answer is no HTML: code keeps its ``<``)."""
    return tuple(("no escape", key) if tag == "variable" else (tag, key) for tag, key in mustache.tokenize(template))


def render_answer(template: str, item: Any, answer: str) -> str:
    """``template`` rendered with the item's fields and ``answer``; ValueError naming a variable
    the item lacks (an empty string there would pass for an answer)."""
    context = {**_context(item), "answer": answer}
    missing = sorted(set(mustache_template_vars(template)) - set(context))
    if missing:
        raise ValueError(
            f"the oracle's template uses {{{{ {missing[0]} }}}}, which is neither 'answer' nor a field of the item"
        )
    return mustache.render(list(_tokens(template)), context)
