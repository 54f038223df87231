"""The scoring stage of a ``[choices]`` run: log-likelihoods instead of a generated answer.

A session of such a run (see :mod:`ape.schemas.choices` for the config) is:

1. :func:`choice_texts` and :func:`gold_index` read the item's choices and gold choice;
   :func:`score_request` builds the continuations (``delimiter + text`` or ``delimiter +
   letter``) and moves the prompt's trailing whitespace to their front;
2. :func:`score_choices` asks the scorer (:mod:`ape.tasks.models.scoring`) and records one
   ``CHOICE`` transcript entry per choice; failures become an ERROR record, as a failed
   model call does in a generated session. This is the cached stage: what it returns
   depends on the prompt, the item and the model only;
3. :func:`choose` (after the cache, so a changed ``metric`` needs no model call) picks the
   answer by ``acc`` and ``acc_norm`` and sets the session's confidence: the softmax of
   the choices' log-likelihoods at the chosen answer (lm-evaluation-harness's
   ``prob_norm``), so calibration, ECE and Brier read a real probability per answer.

The solution saved with the session is a dict: ``choice`` (the index the metric chose),
``label`` (its letter), ``acc`` and ``acc_norm`` (each rule's index), ``loglikelihoods``,
``token_counts``, ``chars`` (what acc_norm divides by), ``probabilities`` and ``greedy``
(whether each choice is the model's greedy text, None where the scorer does not say); the
``choice`` checker (:mod:`ape.tasks.checking.choice`) grades it against the gold.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from ape.schemas.choices import CHOICE_LETTERS, ChoicesConfig
from ape.schemas.errors import ApeError
from ape.schemas.results import ErrorInfo, Outcome
from ape.schemas.transcript import EntryKind, SolveRecord, TranscriptEntry
from ape.tasks.models.scoring import Scored, Scorer, ScoreRequest

__all__ = [
    "check_item",
    "choice_texts",
    "choose",
    "gold_index",
    "predictions",
    "score_choices",
    "score_request",
    "softmax",
]


def item_value(item: Any, name: str) -> Any:
    """The field ``name`` of an item (a DataModel, or a mapping in tests); ValueError naming it."""
    if isinstance(item, dict):
        if name in item:
            return item[name]
    elif hasattr(item, name):
        return getattr(item, name)
    raise ValueError(f"the item has no field '{name}'")


def choice_texts(item: Any, cfg: ChoicesConfig) -> list[str]:
    """The item's choices as texts, in order; ValueError naming the field when unusable."""
    if cfg.fields is not None:
        values = [item_value(item, name) for name in cfg.fields]
    else:
        raw = item_value(item, str(cfg.field))
        if not isinstance(raw, (list, tuple)):
            raise ValueError(f"[choices] field '{cfg.field}' holds a {type(raw).__name__}, not a list of choices")
        values = list(raw)
    if len(values) < cfg.min_choices:
        fewest = "one or more" if cfg.min_choices == 1 else "two or more"
        raise ValueError(f"the item has {len(values)} choice(s); a multiple-choice item needs {fewest}")
    if len(values) > len(CHOICE_LETTERS):
        raise ValueError(f"the item has {len(values)} choices; at most {len(CHOICE_LETTERS)} are supported")
    return [str(value) for value in values]


def gold_index(item: Any, cfg: ChoicesConfig, choices: Sequence[str]) -> int:
    """The gold choice's index (``[choices] gold`` read as ``gold_is`` says); ValueError if unusable."""
    value = item_value(item, cfg.gold)
    kind = cfg.gold_is
    text = str(value).strip()
    if kind in ("auto", "index") and isinstance(value, int) and not isinstance(value, bool):
        index = value
    elif kind == "auto" and text in choices:
        index = list(choices).index(text)
    elif kind in ("auto", "letter") and len(text) == 1 and text.upper() in CHOICE_LETTERS:
        index = CHOICE_LETTERS.index(text.upper())
    elif kind in ("auto", "index") and text.isdigit():
        index = int(text)
    elif kind == "text" and str(value) in choices:
        index = list(choices).index(str(value))
    else:
        raise ValueError(
            f"[choices] gold '{cfg.gold}' is {value!r}, which is no {'choice' if kind == 'auto' else kind} "
            f"of the item's {len(choices)} choices"
        )
    if not 0 <= index < len(choices):
        raise ValueError(f"[choices] gold '{cfg.gold}' is {value!r}: the item has only {len(choices)} choices")
    return index


def check_item(item: Any, cfg: ChoicesConfig) -> int:
    """What a session will read of ``item``, read before the run (the data scan of
    :func:`ape.flows.preflight.preflight`): its choices and its gold choice's index;
    ValueError saying what is wrong, so a bad gold is one line before any model call."""
    return gold_index(item, cfg, choice_texts(item, cfg))


def continuations(cfg: ChoicesConfig, choices: Sequence[str]) -> list[str]:
    """What is scored after the prompt for each choice (``delimiter + text`` or ``+ letter``)."""
    if cfg.continuation == "letter":
        return [cfg.delimiter + CHOICE_LETTERS[i] for i in range(len(choices))]
    return [cfg.delimiter + text for text in choices]


def score_request(prompt: str, cfg: ChoicesConfig, choices: Sequence[str], gold: int | None) -> ScoreRequest:
    """The scorer's request: the prompt without trailing whitespace, which goes to the front of
    every continuation (a prompt ending "Answer: " scores " Paris" after "Answer:")."""
    context = prompt.rstrip()
    moved = prompt[len(context) :]
    return ScoreRequest(context, tuple(moved + c for c in continuations(cfg, choices)), gold)


def normalised_lengths(cfg: ChoicesConfig, choices: Sequence[str]) -> list[int]:
    """What acc_norm divides by: the length in characters of each choice's text (the letter
    when the letter is scored), without the delimiter, as lm-evaluation-harness does."""
    if cfg.continuation == "letter":
        return [1] * len(choices)
    return [max(1, len(text)) for text in choices]


def _first_max(values: Sequence[float]) -> int:
    """The index of the largest value, the first on ties (as numpy's argmax)."""
    best = 0
    for index, value in enumerate(values):
        if value > values[best]:
            best = index
    return best


def predictions(lls: Sequence[float], chars: Sequence[int]) -> tuple[int, int]:
    """(acc's choice, acc_norm's choice): the highest log-likelihood, and the highest per character."""
    return _first_max(lls), _first_max([ll / n for ll, n in zip(lls, chars, strict=True)])


def softmax(lls: Sequence[float]) -> list[float]:
    """The choice distribution: exp(ll) normalised over the choices."""
    top = max(lls)
    weights = [math.exp(ll - top) for ll in lls]
    total = sum(weights)
    return [w / total for w in weights]


def _entry(kind: EntryKind, t: float, content: str | None = None, **data: Any) -> TranscriptEntry:
    return TranscriptEntry(kind=kind, t=t, content=content, data=data)


def score_choices(scorer: Scorer, prompt: str, item: BaseModel, cfg: ChoicesConfig) -> SolveRecord:
    """The cached stage (module docstring): every choice's log-likelihood; failures become ERROR."""
    started = time.perf_counter()
    entries = [_entry(EntryKind.PROMPT, 0.0, prompt)]  # a system prompt is refused by the plan
    try:
        choices = choice_texts(item, cfg)
        gold = gold_index(item, cfg, choices)
        request = score_request(prompt, cfg, choices, gold)
        scored: Scored = scorer.score(request)
        if len(scored.scores) != len(choices):
            raise ValueError(f"the model scored {len(scored.scores)} of {len(choices)} continuations")
    except ApeError:
        raise
    except Exception as exc:
        error = ErrorInfo.from_exception(exc)
        entries.append(TranscriptEntry(kind=EntryKind.MODEL_ERROR, t=time.perf_counter() - started, error=error))
        return SolveRecord(
            outcome=Outcome.ERROR, error=error, latency_s=time.perf_counter() - started, transcript=entries
        )
    chars = normalised_lengths(cfg, choices)
    now = time.perf_counter() - started
    for index, (continuation, score) in enumerate(zip(request.continuations, scored.scores, strict=True)):
        entries.append(
            _entry(
                EntryKind.CHOICE,
                now,
                continuation,
                index=index,
                label=CHOICE_LETTERS[index],
                loglikelihood=score.loglikelihood,
                token_count=score.token_count,
                chars=chars[index],
                greedy=score.greedy,
            )
        )
    solution = {
        "loglikelihoods": [s.loglikelihood for s in scored.scores],
        "token_counts": [s.token_count for s in scored.scores],
        "chars": chars,
        "continuations": list(request.continuations),
        "greedy": [s.greedy for s in scored.scores],
    }
    return SolveRecord(
        outcome=Outcome.SOLVED,
        solution=solution,
        steps=scored.calls,
        input_tokens=scored.input_tokens,
        output_tokens=scored.output_tokens,
        latency_s=now,
        transcript=entries,
    )


def choose(record: SolveRecord, metric: str) -> SolveRecord:
    """The answer by ``metric`` (acc or acc_norm), its confidence and the final solution dict.

    A record that is not SOLVED, or already chosen, comes back as it is."""
    data = record.solution
    if record.outcome is not Outcome.SOLVED or not isinstance(data, dict) or "loglikelihoods" not in data:
        return record
    lls = [float(v) for v in data["loglikelihoods"]]
    chars = [int(v) for v in data["chars"]]
    acc, acc_norm = predictions(lls, chars)
    chosen = acc_norm if metric == "acc_norm" else acc
    probabilities = softmax(lls)
    solution = {
        "choice": chosen,
        "label": CHOICE_LETTERS[chosen],
        "acc": acc,
        "acc_norm": acc_norm,
        "loglikelihoods": lls,
        "token_counts": list(data["token_counts"]),
        "chars": chars,
        "probabilities": probabilities,
    }
    if data.get("greedy") is not None:  # whether each choice is the model's own greedy text (not all scorers say)
        solution["greedy"] = list(data["greedy"])
    continuation = str(data.get("continuations", [""] * len(lls))[chosen])
    t = record.latency_s
    entry = _entry(EntryKind.PARSED, t, None, attempt=1, solution=solution, metric=metric)
    chosen_record = record.model_copy(
        update={
            "solution": solution,
            "raw_output": continuation,
            "confidence": probabilities[chosen],
            "token_nll": -lls[chosen],
            "token_count": int(data["token_counts"][chosen]),
            "transcript": [*record.transcript, entry],
        }
    )
    return chosen_record.keep_value(solution)
