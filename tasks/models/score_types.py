"""What a log-likelihood scorer takes and gives (:mod:`ape.tasks.models.scoring` picks the
scorer; the providers, ``mock_scorer``, ``llama_inprocess`` and ``completions``, implement it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ScoreRequest:
    """One item's log-likelihood requests: the prompt, then one continuation per choice.

    ``context`` has no trailing whitespace: it was moved to the front of every
    continuation (as lm-evaluation-harness's ``_encode_pair`` does), so a prompt ending in
    "Answer: " scores " Paris", not "Paris" after a space token the prompt kept.
    ``gold`` is the gold choice's index; only the mock model reads it (to play a model
    that knows some answers); real models are never shown it.
    """

    context: str
    continuations: tuple[str, ...]
    gold: int | None = None


@dataclass(frozen=True)
class ContinuationScore:
    """One continuation's summed log-probability given the context, and its token count."""

    loglikelihood: float
    token_count: int
    greedy: bool | None = None  # every token the model's most likely one (None: not reported)


@dataclass(frozen=True)
class Scored:
    """A scorer's answer to one request, with what it cost."""

    scores: tuple[ContinuationScore, ...]
    calls: int  # requests made to the model (one per continuation)
    input_tokens: int | None = None
    output_tokens: int | None = None


class Scorer(Protocol):
    """A model that scores continuations (one method)."""

    def score(self, request: ScoreRequest) -> Scored: ...
