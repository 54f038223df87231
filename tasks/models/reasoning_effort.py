"""``[model] reasoning_effort``: one scale of how much a reasoning model may think, mapped
onto what each provider's requests can say (the table in docs/reasoning.md).

- OpenAI-compatible (``openai``, ``llama-cpp``): ``reasoning_effort`` in the request, with
  the level's name; ``"none"`` on a local server also sends
  ``chat_template_kwargs: {"enable_thinking": false}``, which the chat templates of local
  reasoning models (Qwen 3, DeepSeek R1 distills under vLLM or llama.cpp) read to leave the
  thinking out. OpenAI has no ``"max"``.
- Anthropic: extended thinking, ``thinking = {"type": "enabled", "budget_tokens": N}`` with
  the budget of the level (:data:`ANTHROPIC_BUDGETS`), ``{"type": "disabled"}`` for
  ``"none"``; ``max_tokens`` must exceed the budget, since Anthropic counts thinking in it.
- ``mock``: any level (a mock has nothing to send).

A level a provider cannot express, or a model that takes no level (a ``class`` model,
another integration), is a config error naming the key, the model and the values it
accepts: a setting silently dropped would leave the model thinking as much as it likes.
"""

from __future__ import annotations

from typing import Any

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError

__all__ = ["ANTHROPIC_BUDGETS", "OPENAI_LEVELS", "check_reasoning_effort", "merge_args", "reasoning_effort_args"]

OPENAI_LEVELS = ("none", "minimal", "low", "medium", "high")
# Anthropic's thinking budget (tokens) per level; 1,024 is the smallest it accepts
ANTHROPIC_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "max": 32000}
_ANTHROPIC_LEVELS = ("none", *ANTHROPIC_BUDGETS)
_ANY = ("none", "minimal", "low", "medium", "high", "max")


def _provider(cfg: ModelConfig) -> str | None:
    if cfg.class_ is not None:
        return None
    name = (cfg.provider or "").strip().lower()
    return "openai" if name == "llama-cpp" or cfg.model_path is not None else name


def _accepted(provider: str | None) -> tuple[str, ...]:
    if provider == "mock":
        return _ANY
    if provider == "openai":
        return OPENAI_LEVELS
    if provider == "anthropic":
        return _ANTHROPIC_LEVELS
    return ()


def check_reasoning_effort(cfg: ModelConfig) -> None:
    """Raise :class:`ApeError` when the model cannot express its ``reasoning_effort``."""
    level = cfg.reasoning_effort
    if level is None:
        return
    where = f"[model] '{cfg.model_id}' reasoning_effort"
    provider = _provider(cfg)
    accepted = _accepted(provider)
    if not accepted:
        source = f"provider '{cfg.provider}'" if provider else f"class '{cfg.class_}'"
        raise ApeError(
            f"reasoning_effort = '{level}' cannot be sent to {source}",
            where=where,
            hint="reasoning_effort applies to providers openai, llama-cpp, anthropic and mock; "
            "for another model pass its own setting in args",
        )
    if level not in accepted:
        raise ApeError(
            f"reasoning_effort = '{level}' cannot be expressed for provider '{cfg.provider}'",
            where=where,
            hint=f"accepted values: {', '.join(accepted)}",
        )
    budget = ANTHROPIC_BUDGETS.get(level) if provider == "anthropic" else None
    if budget is not None and (cfg.max_tokens is None or cfg.max_tokens <= budget):
        raise ApeError(
            f"reasoning_effort = '{level}' gives Anthropic a thinking budget of {budget} tokens, "
            f"which max_tokens ({cfg.max_tokens}) must exceed",
            where=f"[model] '{cfg.model_id}' max_tokens",
            hint=f"set max_tokens above {budget} (the thinking counts in it), or lower reasoning_effort",
        )
    if budget is not None and cfg.temperature is not None and cfg.temperature != 1.0:
        raise ApeError(
            "Anthropic's extended thinking takes no temperature but 1",
            where=f"[model] '{cfg.model_id}' temperature",
            hint="remove temperature, or set reasoning_effort = 'none'",
        )


def reasoning_effort_args(cfg: ModelConfig, *, local: bool) -> dict[str, Any]:
    """The client arguments that ask for ``cfg.reasoning_effort`` (``{}`` when unset).

    ``local``: an OpenAI-compatible server on this machine or network (not a hosted API),
    whose chat template may be told to leave the thinking out. ``extra_body`` is returned
    for merging into the client's own (:func:`merge_args`)."""
    check_reasoning_effort(cfg)
    level = cfg.reasoning_effort
    provider = _provider(cfg)
    if level is None or provider == "mock":
        return {}
    if provider == "anthropic":
        if level == "none":
            return {"thinking": {"type": "disabled"}}
        return {"thinking": {"type": "enabled", "budget_tokens": ANTHROPIC_BUDGETS[level]}}
    args: dict[str, Any] = {"reasoning_effort": level}
    if level == "none" and local:
        args["extra_body"] = {"chat_template_kwargs": {"enable_thinking": False}}
    return args


def merge_args(kwargs: dict[str, Any], extra: dict[str, Any]) -> None:
    """Add ``extra`` to a client's ``kwargs``, merging ``extra_body`` into the one there."""
    for key, value in extra.items():
        if key == "extra_body":
            kwargs["extra_body"] = {**(kwargs.get("extra_body") or {}), **value}
        else:
            kwargs[key] = value
