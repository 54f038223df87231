"""What identifies a model's answers: the model part of cache keys and resume fingerprints.

A fingerprint holds what changes answers (provider, model, class, arguments,
endpoint, sampling, log-probabilities) and leaves out what does not: secrets,
the display name, retry, timeout and rate-limit settings, and the mock model's
timing and bookkeeping arguments.
"""

from __future__ import annotations

import re
from typing import Any

from ape.schemas.config import DEFAULT_REASONING_TAGS, ModelConfig
from ape.tasks.models.local.llama_server import is_llama_cpp, model_file
from ape.tasks.models.requests import request_settings

__all__ = ["model_fingerprint"]

# Argument names whose values are secrets: never part of a fingerprint.
_SECRET_ARG = re.compile(r"(^|_)(api_?key|key|token|secret|password|credentials?)$|header", re.I)
# Mock arguments that change timing or bookkeeping, not answers.
_MOCK_NON_BEHAVIOUR = frozenset({"latency_s", "call_log", "transient_failures"})


def model_fingerprint(cfg: ModelConfig) -> dict[str, Any]:
    """What identifies a model's answers, for cache keys.

    Includes provider, model name, class path, arguments, endpoint, sampling
    settings and whether log-probabilities are asked for (they change the
    confidence), as :func:`ape.tasks.models.requests.request_settings` decides them for the
    requests themselves. Leaves out API keys and other secret-looking arguments, the
    display name, and retry, timeout and rate-limit settings: none of them
    change what the model answers.
    """
    provider = cfg.provider.strip().lower() if cfg.provider else None
    args = {k: v for k, v in cfg.args.items() if not _SECRET_ARG.search(k)}
    if provider == "mock":
        args = {k: v for k, v in args.items() if k not in _MOCK_NON_BEHAVIOUR}
    asked = request_settings(cfg)
    if is_llama_cpp(cfg):
        # the port changes every run; the file (by name and size) is what answers
        file = model_file(cfg)
        return {
            "provider": "llama-cpp",
            "model": cfg.model,
            "file": {"name": file.name, "bytes": file.stat().st_size},
            "args": dict(sorted(args.items())),
            "temperature": asked.temperature,
            "max_tokens": asked.max_tokens,
            "logprobs": asked.logprobs,
            **reasoning_fingerprint(cfg),
        }
    return {
        "provider": provider,
        "model": cfg.model,
        "class": cfg.class_,
        "args": dict(sorted(args.items())),
        "base_url": cfg.base_url.rstrip("/") if cfg.base_url else None,
        "temperature": asked.temperature,
        "max_tokens": asked.max_tokens,
        "logprobs": asked.logprobs,
        **reasoning_fingerprint(cfg),
    }


def reasoning_fingerprint(cfg: ModelConfig) -> dict[str, Any]:
    """``reasoning_effort`` (what the model may think) and ``reasoning_tags`` (what of its reply
    is graded), only where set: a model without them keeps the fingerprint it had before
    they existed, so its cached answers and history stay its own."""
    found: dict[str, Any] = {}
    if cfg.reasoning_effort is not None:
        found["reasoning_effort"] = cfg.reasoning_effort
    if tuple(cfg.reasoning_tags) != DEFAULT_REASONING_TAGS:
        found["reasoning_tags"] = list(cfg.reasoning_tags)
    return found
