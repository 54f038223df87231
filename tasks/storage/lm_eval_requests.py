"""A harness task's generation arguments written into ``[model]`` (``[task] lm_eval``).

The task asks for stop sequences, a token limit and greedy decoding
(:func:`ape.tasks.storage.lm_eval_tasks.generation_asks`); the loader writes them into each
``[model]`` section that sets none of its own (:func:`fill_model`), so the client, the
fingerprint that keys the cache and the provenance all read them through
:func:`ape.tasks.models.requests.request_settings`, the one decision of what is sent. A
setting the section gives itself wins (:mod:`ape.tasks.models.task_requests` says so).

Stop sequences travel as ``args.stop``, which only the OpenAI-compatible clients
(``provider = "openai"``, ``"llama-cpp"``) take; the mock has no stop sequences, and every
model's answers are cut at the first of them before scoring in any case.
"""

from __future__ import annotations

from typing import Any

from ape.schemas.config import ModelConfig

__all__ = ["fill_model", "takes_stop"]


def takes_stop(cfg: ModelConfig) -> bool:
    """Whether stop sequences can be sent to this model's client as ``args.stop``."""
    return cfg.class_ is None and (cfg.provider or "").strip().lower() in {"openai", "llama-cpp"}


def given(cfg: ModelConfig, field: str) -> bool:
    """Whether the section sets the request field ``field`` itself (directly or in ``args``)."""
    if field in cfg.args:
        return True
    return field in {"temperature", "max_tokens"} and getattr(cfg, field) is not None


def fill_model(cfg: ModelConfig, asks: dict[str, Any]) -> None:
    """Write the task's ``asks`` into ``cfg`` where the section sets none of its own."""
    if cfg.class_ is not None:  # a class model's args are its constructor's, not request fields
        return
    if "temperature" in asks and not given(cfg, "temperature"):
        cfg.temperature = asks["temperature"]
    if "max_tokens" in asks and not given(cfg, "max_tokens"):
        cfg.max_tokens = asks["max_tokens"]
    if "stop" in asks and takes_stop(cfg) and not given(cfg, "stop"):
        cfg.args = {**cfg.args, "stop": list(asks["stop"])}
