"""What a model's requests ask for: decided once, read by the client builder and the provenance.

The client (:mod:`ape.tasks.models.build`), the fingerprint that keys the cache and the
history (:mod:`ape.tasks.models.fingerprint`) and the provenance in ``report.json``
(:mod:`ape.tasks.report.provenance`) all read :func:`request_settings`, so what a run
records is what its requests asked: a local endpoint asked for no log-probabilities is not
recorded as having been asked for them.

Rules, by source:

- ``provider = "openai"``: log-probabilities by default from hosted endpoints only
  (:func:`hosted_endpoint`), with ``top_logprobs = 1`` (a llama.cpp server returns none for
  ``logprobs`` alone); ``logprobs = true/false`` decides otherwise.
- ``provider = "llama-cpp"`` and other LangChain integrations: log-probabilities only when
  ``logprobs = true``; ``top_logprobs = 1`` with them for llama-cpp.
- ``provider = "mock"`` and ``class`` models: log-probabilities only when ``logprobs = true``.

``args`` pass straight to the client after these, so a value there (``args.top_logprobs``,
``args.stop``, ...) is what is sent, and is what is recorded.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from ape.schemas.config import ModelConfig

__all__ = ["RequestSettings", "hosted_endpoint", "request_settings"]

# request fields that `args` may set directly and that the settings therefore read from there
_ARG_FIELDS = ("logprobs", "top_logprobs", "temperature", "max_tokens", "stop")


class RequestSettings(BaseModel):
    """What each request of a model asks for (None: not sent, the provider's default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    logprobs: bool
    top_logprobs: int | None
    temperature: float | None
    max_tokens: int | None
    stop: list[str] | None
    batch: bool


def hosted_endpoint(base_url: str | None) -> bool:
    """Whether an OpenAI-compatible ``base_url`` looks hosted (log-probabilities by default).

    No DNS lookup: literal addresses are judged by their range, names by their form.
    None is api.openai.com. Local and private endpoints (llama.cpp, Ollama, vLLM on
    a workstation) are not, since some compute log-probabilities slowly.
    """

    if not base_url:
        return True
    try:
        host = (urlsplit(base_url if "//" in base_url else f"//{base_url}").hostname or "").lower()
    except ValueError:
        return False
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return address.is_global
    if host == "localhost" or "." not in host:
        return False
    return not host.endswith((".localhost", ".local", ".internal", ".lan", ".home.arpa"))


def _provider(cfg: ModelConfig) -> str:
    return (cfg.provider or "").strip().lower() if cfg.class_ is None else ""


def _stop(value: Any) -> list[str] | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else [str(v) for v in value]


def request_settings(cfg: ModelConfig) -> RequestSettings:
    """What ``cfg``'s requests ask for; see the module doc for the rules."""
    provider = _provider(cfg)
    if provider == "openai":
        logprobs = cfg.logprobs if cfg.logprobs is not None else hosted_endpoint(cfg.base_url)
    else:
        logprobs = bool(cfg.logprobs)
    top = 1 if logprobs and provider in {"openai", "llama-cpp"} else None
    asked: dict[str, Any] = {
        "logprobs": logprobs,
        "top_logprobs": top,
        "temperature": cfg.temperature,
        "max_tokens": cfg.max_tokens,
        "stop": None,
    }
    if cfg.class_ is None:  # a class model's args are its own constructor's, not request fields
        for name in _ARG_FIELDS:
            if name in cfg.args:
                asked[name] = cfg.args[name]
    return RequestSettings(
        logprobs=bool(asked["logprobs"]),
        top_logprobs=asked["top_logprobs"],
        temperature=asked["temperature"],
        max_tokens=asked["max_tokens"],
        stop=_stop(asked["stop"]),
        batch=cfg.batch,
    )
