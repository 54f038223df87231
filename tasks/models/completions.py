"""Log-likelihoods from an OpenAI-compatible ``/v1/completions`` endpoint (``provider = "openai"``).

For each continuation one request: ``prompt = context + continuation``, ``echo: true``
(the prompt comes back with its tokens), ``logprobs: 1``, ``max_tokens: 1`` and
``temperature: 0``. ``max_tokens`` is 1, not 0: llama-cpp-python reads 0 as "until the
context is full". The answer's ``logprobs`` hold, per token, its text (``tokens``), its
start in characters (``text_offset``) and its log-probability given the tokens before it
(``token_logprobs``; null for the first). The continuation's tokens are those that start
at or after the end of the context and before the end of the prompt (the generated token
starts at its end, and is left out), so a token that straddles the boundary counts as the
context's, as lm-evaluation-harness's ``gguf`` model splits llama-cpp-python's answers.
That parse is :func:`continuation_score`, shared with the canary.

Requests go through the model's retry policy and rate limiter like chat calls: a dropped
connection or a 429 is retried, a 404 (no completions route: a chat-only server) is not.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError
from ape.tasks.models.limits.meter import meter_for
from ape.tasks.models.limits.policy import Limiter, RetryPolicy, limiter_for
from ape.tasks.models.score_types import ContinuationScore, Scored, ScoreRequest

__all__ = ["CompletionsScorer", "EchoLogprobs", "LogprobsMissing", "completions_scorer", "continuation_score"]


class LogprobsMissing(ValueError):
    """The endpoint's answer lacks the prompt's log-probabilities a continuation needs."""


@dataclass(frozen=True)
class EchoLogprobs:
    """The ``logprobs`` of one completions answer: per token its text, start and log-probability."""

    tokens: list[str]
    offsets: list[int]
    logprobs: list[float | None]
    top: list[Mapping[str, float] | None]

    @classmethod
    def parse(cls, choice: Mapping[str, Any]) -> EchoLogprobs:
        """From one ``choices[i]`` of the answer (a dict); LogprobsMissing when absent."""
        logprobs = choice.get("logprobs")
        if not isinstance(logprobs, Mapping):
            raise LogprobsMissing("the answer has no 'logprobs'")
        tokens, offsets, values = logprobs.get("tokens"), logprobs.get("text_offset"), logprobs.get("token_logprobs")
        if not (isinstance(tokens, list) and isinstance(offsets, list) and isinstance(values, list)):
            raise LogprobsMissing("the answer's logprobs lack tokens, text_offset or token_logprobs")
        if not len(tokens) == len(offsets) == len(values):
            raise LogprobsMissing("the answer's tokens, text_offset and token_logprobs differ in length")
        top = logprobs.get("top_logprobs")
        tops = list(top) if isinstance(top, list) and len(top) == len(tokens) else [None] * len(tokens)
        return cls(list(tokens), [int(o) for o in offsets], list(values), tops)


def continuation_score(echo: EchoLogprobs, start: int, end: int) -> ContinuationScore:
    """The summed log-probability and token count of the prompt's characters ``[start, end)``:
    the tokens that start in that range (module docstring). LogprobsMissing when none does,
    or one of them has no log-probability (a server that echoes none for the prompt)."""
    picked = [i for i, offset in enumerate(echo.offsets) if start <= offset < end]
    if not picked:
        raise LogprobsMissing(
            f"no token starts within characters {start}..{end} of the prompt: the endpoint echoed "
            f"{len(echo.tokens)} token(s), so it returned no prompt tokens (no echo) or merged the "
            "continuation into the prompt's last token"
        )
    raw: list[Any] = [echo.logprobs[i] for i in picked]  # numbers (numpy's too, in process) or null
    values = [float(v) for v in raw if isinstance(v, numbers.Real) and not isinstance(v, bool) and not math.isnan(v)]
    if len(values) != len(raw):
        raise LogprobsMissing("the endpoint returned no log-probability for some prompt tokens")
    greedy = None
    tops = [echo.top[i] for i in picked]
    if all(tops):
        greedy = all(
            max((top or {}).values(), default=-math.inf) <= value + 1e-9
            for top, value in zip(tops, values, strict=True)
        )
    return ContinuationScore(sum(values), len(values), greedy)


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) else dict(value)


class CompletionsScorer:
    """Scores continuations through ``/v1/completions`` (module docstring)."""

    def __init__(self, client: Any, model: str, retry: RetryPolicy, limiter: Limiter, model_id: str):
        self.client = client
        self.model = model
        self.retry = retry
        self.limiter = limiter
        self.model_id = model_id

    def complete(self, prompt: str, *, echo: bool) -> dict[str, Any]:
        """One completions request of one token at temperature 0, with log-probabilities."""

        def attempt() -> dict[str, Any]:
            with self.limiter.acquire(), meter_for(self.model_id).request():  # counted for the live view
                answer = self.client.completions.create(
                    model=self.model, prompt=prompt, max_tokens=1, temperature=0, logprobs=1, echo=echo
                )
            return _as_dict(answer)

        return self.retry.call(attempt)

    def score(self, request: ScoreRequest) -> Scored:
        scores: list[ContinuationScore] = []
        prompt_tokens = completion_tokens = 0
        counted = True
        start = len(request.context)
        for continuation in request.continuations:
            prompt = request.context + continuation
            answer = self.complete(prompt, echo=True)
            choices: Sequence[Any] = answer.get("choices") or []
            if not choices:
                raise LogprobsMissing("the endpoint's answer has no choices")
            scores.append(continuation_score(EchoLogprobs.parse(_as_dict(choices[0])), start, len(prompt)))
            usage = answer.get("usage") or {}
            if isinstance(usage, Mapping) and isinstance(usage.get("prompt_tokens"), int):
                prompt_tokens += int(usage["prompt_tokens"])
                completion_tokens += int(usage.get("completion_tokens") or 0)
            else:
                counted = False
        return Scored(
            scores=tuple(scores),
            calls=len(request.continuations),
            input_tokens=prompt_tokens if counted else None,
            output_tokens=completion_tokens if counted else None,
        )


def completions_scorer(cfg: ModelConfig) -> CompletionsScorer:
    """The scorer of an ``openai`` ``[model]`` with a ``base_url`` (checked by the caller)."""
    try:
        import openai
    except ImportError:
        raise ApeError(
            "provider 'openai' needs the openai package",
            where=f"[model] '{cfg.model_id}'",
            hint="pip install 'ape-bench[openai]'",
        ) from None
    if not cfg.model:
        raise ApeError(
            "provider 'openai' needs 'model', the endpoint's model name",
            where=f"[model] '{cfg.model_id}'",
            hint='local servers accept any name, e.g. model = "local"',
        )

    key = os.environ.get(cfg.api_key_env, "").strip() if cfg.api_key_env else ""
    client = openai.OpenAI(base_url=cfg.base_url, api_key=key or "not-needed", timeout=cfg.timeout_s, max_retries=0)
    return CompletionsScorer(
        client, cfg.model, RetryPolicy.from_config(cfg), limiter_for(cfg.model_id, cfg), cfg.model_id
    )
