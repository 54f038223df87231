"""Calls made to the mock models in this test process, counted per model name.

A test that checks a run called a model N times, or not at all (a cache hit, a saved item,
an injection graded without asking the judge), reads these counts. They are the tests' own
books: the mocks keep none, so the product carries no counter only tests read. Counting
wraps the one method each mock calls per request, installed once for the session by
``tests/conftest.py``; flows run in this process (thread workers) are counted, Dask worker
processes are not.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from ape.tasks.models.mocks.chat import MockChatModel
from ape.tasks.models.mocks.scorer import MockScorer

_LOCK = threading.Lock()
_CHAT: Counter[str] = Counter()  # chat-model calls per model key (its name, else mock/<behaviour>)
_SCORER: Counter[str] = Counter()  # continuations scored per mock scorer name


def _counting(method: Callable[..., Any], counts: Counter[str], key: Callable[[Any, Any], tuple[str, int]]) -> Any:
    @functools.wraps(method)
    def counted(self: Any, request: Any) -> Any:
        name, calls = key(self, request)
        with _LOCK:
            counts[name] += calls
        return method(self, request)

    counted.__ape_counted__ = True  # type: ignore[attr-defined]
    return counted


def install() -> None:
    """Count every mock call from now on (once per process; a second call does nothing)."""
    if getattr(MockChatModel._log_call, "__ape_counted__", False):
        return
    MockChatModel._log_call = _counting(  # type: ignore[method-assign]
        MockChatModel._log_call, _CHAT, lambda model, _messages: (model.model_key, 1)
    )
    MockScorer._log_call = _counting(  # type: ignore[method-assign]
        MockScorer._log_call, _SCORER, lambda scorer, request: (scorer.name, len(request.continuations))
    )


def chat_calls(name: str | None = None) -> int:
    """Calls made by mock chat models called ``name`` (all of them for None)."""
    with _LOCK:
        return _CHAT[name] if name is not None else sum(_CHAT.values())


def scorer_calls(name: str | None = None) -> int:
    """Continuations scored by mock scorers called ``name`` (all of them for None)."""
    with _LOCK:
        return _SCORER[name] if name is not None else sum(_SCORER.values())


def reset() -> None:
    """Start every count at zero."""
    with _LOCK:
        _CHAT.clear()
        _SCORER.clear()
