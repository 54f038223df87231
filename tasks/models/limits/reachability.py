"""Is every model endpoint there? One cheap request per model before any session.

A ``[model]`` whose ``base_url`` points at nothing used to run every session to an error
(each after its retries: 85 s for 30 items), and the errors never named the URL. Before a
run starts, :func:`unreachable` sends one ``GET {base_url}/models`` per model with an endpoint, all
at once (a thread each), with a short timeout, and names every endpoint that could not be
reached: a refused connection, a host name that does not resolve, no connection within
:data:`PROBE_TIMEOUT_S`, a TLS handshake that failed, a URL that is no URL.

Only *unreachable* stops a run. Any HTTP answer means something listens there:

- 404 (a server without ``/models``, llama.cpp's older servers, a gateway) and other
  statuses are fine; a 404 from a ``provider = "openai"`` ``base_url`` whose path has no
  ``/v1`` is a warning naming the URL (:func:`path_warnings`): that is the usual reason,
  and every session would otherwise fail with a bare ``Error code: 404``;
- 401 and 403 are a warning, not a stop: the key may be wrong, or only lack the scope to
  list models (an OpenAI key restricted to chat completions gets 401 on ``/models`` and
  still answers chats), so :func:`auth_warnings` names the endpoint and the key's
  variable and the run goes on.

Which models are probed (:func:`probe_target`): ``provider = "openai"`` (its ``base_url``,
else api.openai.com), ``anthropic`` and ``ollama`` (their ``base_url``, else their usual
host), and any other provider that sets ``base_url``. Mocks, ``class`` models and
``llama-cpp`` (APE serves it itself and waits for it) are not. The request carries the
model's key where the provider has a known header for it (openai, anthropic), as the
model's own calls do, so an answer of 401 means something. It honours the proxy settings
of the environment, as the provider clients do.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from ape.schemas.config import ModelConfig
from ape.tasks.models.limits.policy import connection_cause, v1_hint
from ape.tasks.models.local.llama_server import is_llama_cpp

log = logging.getLogger("ape")

PROBE_TIMEOUT_S = 5.0  # a dead endpoint answers a connect at once; a black hole costs this
# Where a provider's client goes without base_url (the other integrations: only with base_url).
DEFAULT_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com/v1",
    "ollama": "http://localhost:11434",
}
DEFAULT_KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


@dataclass(frozen=True)
class Target:
    """One model's endpoint: the URL its calls go to and the request that probes it."""

    model_id: str
    base_url: str
    provider: str
    key_env: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def probe_url(self) -> str:
        return self.base_url.rstrip("/") + "/models"


@dataclass(frozen=True)
class Probe:
    """What one probe found: ``cause`` is set when the endpoint could not be reached;
    ``status`` is the HTTP status of an answer."""

    target: Target
    seconds: float
    status: int | None = None
    cause: str | None = None

    @property
    def reachable(self) -> bool:
        return self.cause is None


def probe_target(cfg: ModelConfig) -> Target | None:
    """The endpoint a ``[model]`` section's calls go to, or None for a model APE does not
    reach over the network on its own (a mock, a ``class``, ``llama-cpp``)."""
    if cfg.class_ is not None or is_llama_cpp(cfg):
        return None
    provider = (cfg.provider or "").strip().lower()
    if provider in ("", "mock"):
        return None
    base = cfg.base_url or _arg_url(cfg) or _default_url(provider)
    if not base:
        return None  # an integration whose host we do not know: its own errors will say
    key_env = cfg.api_key_env or DEFAULT_KEYS.get(provider)
    key = os.environ.get(key_env, "").strip() if key_env else ""
    headers: dict[str, str] = {}
    if key and provider == "openai":
        headers["authorization"] = f"Bearer {key}"
    elif key and provider == "anthropic":
        headers.update({"x-api-key": key, "anthropic-version": "2023-06-01"})
    return Target(cfg.model_id, base, provider, key_env if key else None, headers)


def _arg_url(cfg: ModelConfig) -> str | None:
    """A ``base_url`` given in ``args`` (the constructor's own name for it)."""
    for name in ("base_url", "openai_api_base", "anthropic_api_url"):
        value = cfg.args.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _default_url(provider: str) -> str | None:
    if provider == "ollama" and os.environ.get("OLLAMA_HOST"):
        host = os.environ["OLLAMA_HOST"].strip()
        return host if "://" in host else f"http://{host}"
    return DEFAULT_URLS.get(provider)


def probe(target: Target, timeout_s: float = PROBE_TIMEOUT_S, client: httpx.Client | None = None) -> Probe:
    """One ``GET {base_url}/models``; unreachable only when no HTTP answer came back.
    ``client``: one shared by the probes of a run (its TLS setup costs more than a probe)."""
    started = time.perf_counter()
    try:
        if client is None:
            with httpx.Client(timeout=timeout_s, follow_redirects=False) as own:
                response = own.get(target.probe_url, headers=target.headers)
        else:
            response = client.get(target.probe_url, headers=target.headers)
        return Probe(target, time.perf_counter() - started, status=response.status_code)
    except httpx.ConnectTimeout:
        cause = f"no connection within {timeout_s:g} s"
    except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout):
        # it took the connection: something is there, perhaps busy (a local model loading)
        return Probe(target, time.perf_counter() - started, status=None)
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        cause = f"not a URL a client can call ({exc})"
    except httpx.TransportError as exc:  # connect errors, resets, a proxy that refused
        cause = connection_cause(exc)
    except ValueError as exc:  # a URL httpx cannot even parse
        cause = f"not a URL a client can call ({exc})"
    return Probe(target, time.perf_counter() - started, cause=cause)


def probe_all(targets: Iterable[Target], timeout_s: float = PROBE_TIMEOUT_S) -> list[Probe]:
    """Probe every target at once (one thread each): the check costs one request's time,
    not one per model."""
    targets = list(targets)
    if not targets:
        return []
    limits = httpx.Limits(max_connections=len(targets))
    with (
        httpx.Client(timeout=timeout_s, follow_redirects=False, limits=limits) as client,
        ThreadPoolExecutor(max_workers=min(16, len(targets)), thread_name_prefix="ape-probe") as pool,
    ):
        return list(pool.map(lambda target: probe(target, timeout_s, client), targets))


def unreachable_lines(probes: Iterable[Probe]) -> list[str]:
    """One line per endpoint that could not be reached: the model, the URL and the cause."""
    return [
        f"[model] '{p.target.model_id}': {p.target.base_url} is unreachable: {p.cause} "
        f"(GET {p.target.probe_url}, {p.seconds:.2f} s)"
        for p in probes
        if not p.reachable
    ]


def auth_warnings(probes: Iterable[Probe]) -> list[str]:
    """One line per endpoint that refused the probe's credentials (401, 403): a warning,
    since a key may lack only the scope to list models."""
    lines = []
    for p in probes:
        if p.status not in (401, 403):
            continue
        key = f"the key in {p.target.key_env}" if p.target.key_env else "no key (api_key_env is not set)"
        lines.append(
            f"[model] '{p.target.model_id}': {p.target.probe_url} answered {p.status} to {key}; "
            "if its sessions fail with the same error, check api_key_env"
        )
    return lines


def path_warnings(probes: Iterable[Probe]) -> list[str]:
    """One line per OpenAI-compatible endpoint that answered 404 to ``/models`` from a
    ``base_url`` without ``/v1``: the URL, and the ``/v1`` it probably lacks."""
    lines = []
    for p in probes:
        hint = v1_hint(p.target.probe_url) if p.status == 404 and p.target.provider == "openai" else ""
        if hint:
            suggested = p.target.base_url.rstrip("/") + "/v1"
            lines.append(
                f"[model] '{p.target.model_id}': GET {p.target.probe_url} answered 404{hint}; "
                f'try base_url = "{suggested}"'
            )
    return lines
