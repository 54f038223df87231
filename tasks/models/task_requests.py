"""What of a harness task's generation arguments a model does not send, in one line each.

The loader fills the task's stop sequences, token limit and greedy decoding into every
``[model]`` that sets none of its own (:mod:`ape.tasks.storage.lm_eval_requests`); this
reads what is sent through :func:`ape.tasks.models.requests.request_settings`, the same
decision the client, the fingerprint and the provenance read, and names each difference.
"""

from __future__ import annotations

from typing import Any

from ape.schemas.config import ModelConfig
from ape.tasks.models.requests import request_settings
from ape.tasks.storage.lm_eval_requests import takes_stop

__all__ = ["overridden"]

_TASK_NAMES = {"stop": "until", "max_tokens": "max_gen_toks", "temperature": "do_sample and temperature"}


def overridden(cfg: ModelConfig, asks: dict[str, Any]) -> list[str]:
    """One line per task setting this model does not send as the task asks: its section
    sets another value (which is sent), or its client takes no stop sequences."""
    name = cfg.model_id
    if cfg.class_ is not None and asks:
        return [f"model '{name}': a class model's requests are its own; the task's {sorted(asks)} are not sent"]
    sent = request_settings(cfg).model_dump()
    lines = []
    for field, value in asks.items():
        if field == "stop" and not takes_stop(cfg):
            lines.append(
                f"model '{name}': the task's until {value!r} is not sent (this client takes no stop "
                "sequences); answers are cut at the first of them before scoring"
            )
        elif sent.get(field) != value:
            lines.append(
                f"model '{name}': [model] {field} = {sent.get(field)!r} is sent, not the task's "
                f"{_TASK_NAMES[field]} ({field} = {value!r})"
            )
    return lines
