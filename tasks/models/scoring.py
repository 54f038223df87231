"""Models that score text instead of writing it: log-likelihood requests for ``[choices]`` runs.

A :class:`Scorer` answers one :class:`ScoreRequest` (a prompt and the continuations of
its choices) with the summed log-probability of each continuation's tokens given the
prompt and the number of those tokens, as lm-evaluation-harness's ``loglikelihood``
requests do. Which model can do that, from a ``[model]`` section (:func:`build_scorer`):

- ``provider = "mock"``: :class:`ape.tasks.models.mocks.scorer.MockScorer`, made-up but
  deterministic log-likelihoods, for demos, dry runs and tests;
- ``provider = "llama-cpp"``: the GGUF file, loaded *in this process* by llama-cpp-python
  (:mod:`ape.tasks.models.local.llama_inprocess`); its server is not started for such runs,
  since that server's prompt log-probabilities are shifted by one token for models
  that add no BOS token (SmolLM2 among them; llama-cpp-python issue #1983);
- ``provider = "openai"`` with a ``base_url``: any OpenAI-compatible ``/v1/completions``
  endpoint that echoes the prompt's log-probabilities (``echo`` with ``logprobs``:
  llama-cpp-python's server for models with a BOS token, vLLM), through
  :mod:`ape.tasks.models.completions`. A canary (:mod:`ape.tasks.checking.logprob_canary`)
  refuses, before the run, one that returns log-probabilities only for generated tokens
  or shifted ones.

Every other model (chat-only providers, ``class = ...`` chat models and adapters) is
refused with one line that says what is missing: a chat model gives log-probabilities
of what it writes, never of a text it is handed.
"""

from __future__ import annotations

from pathlib import Path

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError
from ape.tasks.models.completions import completions_scorer
from ape.tasks.models.local.llama_inprocess import llama_scorer
from ape.tasks.models.local.llama_server import is_llama_cpp
from ape.tasks.models.mocks.scorer import mock_scorer
from ape.tasks.models.score_types import ContinuationScore, Scored, Scorer, ScoreRequest
from ape.tasks.models.sdk_types import build_response_types

__all__ = ["ContinuationScore", "ScoreRequest", "Scored", "Scorer", "build_scorer", "check_can_score"]

SCORING_PROVIDERS = ("mock", "llama-cpp", "openai")


def _where(cfg: ModelConfig) -> str:
    return f"[model] '{cfg.model_id}'"


def _provider(cfg: ModelConfig) -> str | None:
    if cfg.class_ is not None:
        return None
    if is_llama_cpp(cfg):
        return "llama-cpp"
    return (cfg.provider or "").strip().lower()


def scores_in_process(cfg: ModelConfig) -> bool:
    """Whether ``cfg``'s log-likelihoods are computed in this process (mock, llama-cpp), so no
    endpoint's prompt log-probabilities need probing (:mod:`ape.tasks.checking.logprob_canary`)."""
    return _provider(cfg) in ("mock", "llama-cpp")


def check_can_score(cfg: ModelConfig) -> None:
    """Raise one located :class:`ApeError` when ``cfg`` cannot score continuations."""
    provider = _provider(cfg)
    need = (
        "log-likelihood scoring ([choices]) needs a model that scores a given text: provider 'mock', "
        "'llama-cpp', or 'openai' with a base_url whose /v1/completions echoes prompt log-probabilities"
    )
    if provider is None:
        raise ApeError(
            f"'{cfg.class_}' is a chat model or adapter: it cannot score continuations; {need}",
            where=_where(cfg),
            hint="remove [choices] to generate answers with this model, or use one of those providers",
        )
    if provider not in SCORING_PROVIDERS:
        raise ApeError(
            f"provider '{provider}' is chat-only: it has no prompt log-probabilities; {need}",
            where=f"{_where(cfg)} provider",
            hint="remove [choices] to generate answers with this model, or use one of those providers",
        )
    if provider == "openai" and not cfg.base_url:
        raise ApeError(
            "api.openai.com's models are chat models: none echoes prompt log-probabilities on /v1/completions; " + need,
            where=f"{_where(cfg)} base_url",
            hint="set base_url to a completions server (vLLM, llama-cpp-python), or use provider 'llama-cpp'",
        )


def build_scorer(cfg: ModelConfig, base_dir: Path) -> Scorer:
    """The scorer of one ``[model]`` section (module docstring); ApeError when it has none."""
    check_can_score(cfg)
    provider = _provider(cfg)
    if provider == "mock":
        return mock_scorer(cfg, base_dir)
    if provider == "llama-cpp":
        return llama_scorer(cfg)
    scorer = completions_scorer(cfg)
    build_response_types()  # openai's Completion, before worker threads parse one: pydantic's lazy build races
    return scorer
