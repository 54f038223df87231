"""The log-probability canary: an endpoint must echo *right* prompt log-probabilities before a
``[choices]`` run is scored on it.

Two ways a ``/v1/completions`` endpoint can fail log-likelihood scoring without an error:

- it returns log-probabilities only for the tokens it generates and ignores ``echo``
  (llama.cpp's own ``llama-server`` does, llama.cpp issue #27174): every continuation
  then scores the same, and lm-evaluation-harness reports chance without a word;
- it echoes them shifted by one position: llama-cpp-python's server, for a model whose
  tokenizer adds no BOS token, reports for each prompt token the probability the model
  gives it *after* reading it (llama-cpp-python issue #1983); the scores are then noise.

The test needs no tokenizer and no reference numbers, only the endpoint's own
consistency: ask it to generate one token greedily after a probe prompt (a generated
token's log-probability is the one thing every such server gets right), then send the
prompt with that token appended and ``echo``: the echoed log-probability of that last
prompt token must equal the generated one (within :data:`TOLERANCE`). Two requests per
probe; a probe whose token comes back as more than one echoed token (the text
re-tokenized differently) is skipped for the next. An endpoint that fails is refused
with :class:`ape.tasks.checking.canary.CanaryFailed`, one line, before any item is
scored (``ape run`` and ``ape validate`` exit 2).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from ape.schemas.config import ApeConfig, ModelConfig
from ape.tasks.checking.canary import CanaryFailed, one_line
from ape.tasks.models.completions import CompletionsScorer, EchoLogprobs, LogprobsMissing, continuation_score
from ape.tasks.models.scoring import build_scorer

__all__ = ["PROBES", "TOLERANCE", "check_endpoint", "run_logprob_canary"]

log = logging.getLogger("ape")

PROBES = ("The capital of France is", "One, two, three, four,", "The opposite of hot is")
TOLERANCE = 0.02  # nats; a shifted log-probability is off by whole nats, a rounding by 1e-5
HINT = (
    "no item was scored; use an endpoint that echoes prompt log-probabilities (vLLM; llama-cpp-python's "
    "server for a model with a BOS token), or provider 'llama-cpp', which scores in process"
)


def _refuse(cfg: ModelConfig, cause: str) -> CanaryFailed:
    return CanaryFailed(
        f"log-probability canary of model '{cfg.model_id}' at {cfg.base_url} failed: {one_line(cause)}",
        where=f"[model] '{cfg.model_id}' base_url",
        hint=HINT,
    )


def _generated(answer: dict[str, Any]) -> tuple[str, float | None]:
    """(text, log-probability) of the one token a non-echo request generated."""
    choice = (answer.get("choices") or [{}])[0]
    text = str(choice.get("text") or "")
    logprobs = choice.get("logprobs") or {}
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    value = values[0] if isinstance(values, list) and values else None
    return text, float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def check_endpoint(scorer: CompletionsScorer, cfg: ModelConfig) -> str:
    """Probe one endpoint (module docstring); the probe that passed, or CanaryFailed."""
    for probe in PROBES:
        try:
            text, generated = _generated(scorer.complete(probe, echo=False))
        except Exception as exc:
            raise _refuse(
                cfg,
                f"/v1/completions answered {type(exc).__name__}: {exc}; a chat-only endpoint has "
                "no completions route, and log-likelihood scoring needs one",
            ) from None
        if generated is None:
            raise _refuse(cfg, "it returns no log-probabilities at all (logprobs is ignored)")
        if not text:
            continue  # it ended the text at once: nothing to compare; the next probe
        try:
            answer = scorer.complete(probe + text, echo=True)
            echo = EchoLogprobs.parse((answer.get("choices") or [{}])[0])
            echoed = continuation_score(echo, len(probe), len(probe + text))
        except LogprobsMissing as exc:
            raise _refuse(
                cfg,
                f"it returns log-probabilities only for generated tokens, none for the prompt ({exc}); "
                "every choice would score alike (llama.cpp's llama-server does this, its issue #27174)",
            ) from None
        except Exception as exc:
            raise _refuse(cfg, f"an echo request answered {type(exc).__name__}: {exc}") from None
        if echoed.token_count != 1:
            continue  # the token came back re-tokenized: no like-for-like comparison
        if not math.isclose(echoed.loglikelihood, generated, abs_tol=TOLERANCE):
            raise _refuse(
                cfg,
                f"its prompt log-probabilities are wrong: {text!r} after {probe!r} has log-probability "
                f"{generated:.4f} when generated but {echoed.loglikelihood:.4f} when echoed (shifted by one "
                "token, as llama-cpp-python's server reports them for models without a BOS token, its issue #1983)",
            )
        return probe
    log.warning(
        "log-probability canary of model '%s': no probe could be compared (the endpoint re-tokenized every one); "
        "its prompt log-probabilities are unchecked",
        cfg.model_id,
    )
    return ""


def run_logprob_canary(config: ApeConfig) -> int:
    """Probe every endpoint a ``[choices]`` run scores on; the number probed. Models scored in
    process (mock, llama-cpp) need no probe: their log-likelihoods are computed here."""

    if config.choices is None:
        return 0
    probed = 0
    for cfg in config.model:
        scorer = build_scorer(cfg, config.base_dir)
        if isinstance(scorer, CompletionsScorer):
            check_endpoint(scorer, cfg)
            probed += 1
    return probed
