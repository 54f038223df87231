"""The ``choice`` checker of ``[choices]`` runs: is the model's most likely choice the gold one?

It re-derives the answer from the saved log-likelihoods with its own metric rather than
trusting the solution's ``choice``, so a run whose ``[choices] metric`` changed is
re-scored from its saved (or cached) log-likelihoods without asking the model again.
The grade follows the metric (``acc`` or ``acc_norm``); both are in the metadata, so
the transcript and the reports show each.
"""

from __future__ import annotations

from typing import Any

from ape.schemas.check import Failed, Passed
from ape.schemas.choices import CHOICE_LETTERS, ChoicesConfig
from ape.tasks.solving.choices import choice_texts, gold_index, predictions

__all__ = ["ChoiceChecker"]


class ChoiceChecker:
    """Grades a log-likelihood session against the item's gold choice (module docstring)."""

    def __init__(self, cfg: ChoicesConfig):
        self.cfg = cfg
        self.metric = cfg.metric  # the leaderboard's metric name: acc or acc_norm

    def __call__(self, item: Any, solution: Any) -> Passed | Failed:
        if not isinstance(solution, dict) or "loglikelihoods" not in solution or "chars" not in solution:
            raise ValueError("a choice session's solution holds loglikelihoods and chars; this one does not")
        gold = gold_index(item, self.cfg, choice_texts(item, self.cfg))
        lls = [float(v) for v in solution["loglikelihoods"]]
        acc, acc_norm = predictions(lls, [int(v) for v in solution["chars"]])
        chosen = acc_norm if self.metric == "acc_norm" else acc
        metadata = {
            "metric": self.metric,
            "gold": gold,
            "choice": chosen,
            "acc": float(acc == gold),
            "acc_norm": float(acc_norm == gold),
        }
        if chosen == gold:
            return Passed(metadata=metadata)
        return Failed(
            f"chose {CHOICE_LETTERS[chosen]}, the gold choice is {CHOICE_LETTERS[gold]}",
            metadata=metadata,
        )
