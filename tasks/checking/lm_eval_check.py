"""The checker of ``[task] lm_eval`` runs: each answer scored by the harness's own task.

A session's answer is cut at the item's stop sequences (as the harness's model back ends
cut a generation at ``until``), then the task's own filter pipelines
(``filter_list``: strict-match, flexible-extract, ...) and its ``process_results`` give one
value per metric and filter, exactly as ``lm_eval.evaluator.evaluate`` computes them for a
document. The first filter's first metric is the session's score (``exact_match`` of
``strict-match`` for GSM8K); all of them are kept in the check's metadata under
``lm_eval``. The task's aggregated metrics (means, corpus-level metrics, group
aggregation) come from the harness after the run (:mod:`ape.tasks.report.lm_eval_scores`).

A ``multiple_choice`` document's solution is the choices' log-likelihoods (a ``[choices]``
session's dict); the task's ``process_results`` reads them as the harness reads its model's
``(loglikelihood, is_greedy)`` pairs and gives acc, acc_norm and the task's other metrics.
Its ``acc`` and ``acc_norm`` are also kept at the top of the metadata, where the report's
acc/acc_norm table (:mod:`ape.tasks.stats.choice_metrics`) reads them.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

from ape.schemas.check import Failed, Passed
from ape.schemas.config import TaskConfig
from ape.schemas.lm_eval import LmEvalItem
from ape.tasks.storage.lm_eval_tasks import load_tasks


def cut_at_stops(text: str, until: list[str]) -> str:
    """``text`` up to the first of the stop sequences, as the harness's back ends return it."""
    for stop in until:
        if stop:
            text = text.split(stop)[0]
    return text


def document_metrics(task: Any, item: LmEvalItem, answer: str) -> dict[str, Any]:
    """``{"metric,filter": value}`` of one answer to one document, by the task's own code."""
    instance_type = importlib.import_module("lm_eval.api.instance").Instance
    instance = instance_type(
        request_type="generate_until",
        doc=item.doc,
        arguments=(item.context, {"until": item.until, **item.generation_kwargs}),
        idx=0,
        metadata=(item.task, item.doc_id, 1),
    )
    instance.resps = [cut_at_stops(answer, item.until)]
    for ensemble in getattr(task, "_filters", []):
        ensemble.apply([instance])
    filtered = instance.filtered_resps or {"none": instance.resps[0]}
    found: dict[str, Any] = {}
    for key, response in filtered.items():
        for metric, value in task.process_results(item.doc, [response]).items():
            found[f"{metric},{key}"] = value
    return found


def choice_results(solution: Any) -> list[tuple[float, bool]]:
    """The harness's ``(loglikelihood, is_greedy)`` per choice from a choice session's solution."""
    if not isinstance(solution, dict) or "loglikelihoods" not in solution:
        raise ValueError("a multiple-choice session's solution holds the choices' loglikelihoods; this one does not")
    lls = [float(v) for v in solution["loglikelihoods"]]
    greedy = solution.get("greedy") or [None] * len(lls)
    return [(ll, bool(g)) for ll, g in zip(lls, greedy, strict=True)]


def choice_metrics(task: Any, item: LmEvalItem, solution: Any) -> dict[str, Any]:
    """``{"metric,none": value}`` of one multiple-choice document, by the task's ``process_results``."""
    found = task.process_results(item.doc, choice_results(solution))
    return {f"{metric},none": value for metric, value in found.items()}


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class LmEvalChecker:
    """Scores an answer with the harness task named by ``[task]`` (the loader sets ``args``)."""

    def __init__(self, task: dict[str, Any], base_dir: str) -> None:
        self._loaded = load_tasks(TaskConfig.model_validate(task), Path(base_dir))

    def __call__(self, item: LmEvalItem, solution: Any) -> Passed | Failed:
        task = self._loaded["tasks"].get(item.task)
        if task is None:
            raise ValueError(f"item {item.id}: no task '{item.task}' in the loaded harness tasks")
        if item.choices:
            metrics = choice_metrics(task, item, solution)
        else:
            metrics = document_metrics(task, item, solution if isinstance(solution, str) else str(solution))
        numbers = {key: number for key, value in metrics.items() if (number := _number(value)) is not None}
        if not numbers:
            raise ValueError(f"task '{item.task}' gave no numeric metric per document ({sorted(metrics)})")
        primary, value = next(iter(numbers.items()))
        if len(item.choices) == 1 and "acc,none" in numbers:  # a loglikelihood task's perplexity is no score
            primary, value = "acc,none", numbers["acc,none"]
        score = min(1.0, max(0.0, value))
        metadata: dict[str, Any] = {"lm_eval": numbers, "metric": primary}
        if item.choices and "acc,none" in numbers and "acc_norm,none" in numbers:
            metadata |= {"acc": numbers["acc,none"], "acc_norm": numbers["acc_norm,none"], "metric": "acc"}
        if value >= 1.0:
            return Passed(score=score, metadata=metadata)
        return Failed(f"{primary} = {value:g}", score=score, metadata=metadata)
