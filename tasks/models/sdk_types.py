"""Build the lazily built pydantic types a run parses responses into, once, before any worker does.

The OpenAI and Anthropic SDKs declare their models with pydantic's ``defer_build``, and
some of Prefect's client schemas wait for their forward references: each class builds its
validator on first use. Pydantic's rebuild is not thread-safe (``BaseModel.model_rebuild``
says so in its source): when several solver threads parse their first responses at the
same moment, one thread can delete a validator another has just built, and a session
fails with "BaseModel cannot be instantiated directly" on a healthy endpoint. Building the
response types under one lock before the first call removes the race: the builders of a
chat model (``build_model``) and of a completions scorer call :func:`build_response_types`,
and every solver, judge and Dask worker builds its own before its first request. Only the
types a chat or completions response and a run's Prefect calls reach are built (about 20 ms for OpenAI's chat
types); building every OpenAI type would cost about 0.7 s of every run's start.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any, get_args

from pydantic import BaseModel

# Per package (built only when already imported), the roots whose field types are built too.
ROOTS: dict[str, tuple[str, ...]] = {
    "openai": (
        "openai.types.chat:ChatCompletion",
        "openai.types.chat:ChatCompletionChunk",
        "openai.types:Completion",
    ),
    "anthropic": ("anthropic.types:Message", "anthropic.types:RawMessageStreamEvent"),
    "prefect": (
        "prefect.events.schemas.events:Event",
        "prefect.client.schemas.actions:TaskRunCreate",
        "prefect.client.schemas.actions:ArtifactCreate",
        "prefect.client.schemas.objects:Artifact",
        "prefect.client.schemas.actions:GlobalConcurrencyLimitCreate",
        "prefect.client.schemas.responses:GlobalConcurrencyLimitResponse",
    ),
}

_lock = threading.Lock()
_done: set[str] = set()


def build_response_types() -> None:
    """Build every root type of each imported package and the models its fields name; idempotent."""
    with _lock:
        for package, roots in ROOTS.items():
            if package in _done or package not in sys.modules:
                continue
            seen: set[type] = set()
            for root in roots:
                _build(_resolve(root), seen)
            _done.add(package)


def _resolve(root: str) -> Any:
    module, _, name = root.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):  # another version of the package: nothing of ours to build
        return None


def _build(tp: Any, seen: set[type]) -> None:
    """Build ``tp`` if it is an unbuilt model, then the models its fields and arguments name."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp in seen:
            return
        seen.add(tp)
        if not tp.__pydantic_complete__:
            tp.model_rebuild(raise_errors=False)
        for field in tp.model_fields.values():
            _build(field.annotation, seen)
        return
    for arg in get_args(tp):
        _build(arg, seen)
