"""Calibration: how well a model's self-reported confidence matches how often it is right.

Confidence is what the model reports (a session's ``confidence``); sessions that
report none are left out of every number and counted in ``missing``. With ``n``
sessions that report one, split over equal-width bins ``[0, 0.1), ..., [0.9, 1.0]``
(a confidence of exactly 1.0 falls in the last bin):

- ``ece`` = sum over bins of ``count / n * |accuracy - mean_confidence|``
- ``brier`` = mean of ``(confidence - correct)^2``
- ``populated_bins`` = bins holding at least one session

and each bin keeps its count, accuracy and mean confidence for a reliability diagram.

Sessions cut at the token limit (outcome TRUNCATED) are left out too, and counted in
``truncated``: the confidence such a session reports is the one of an unfinished prefix,
and its "wrong" is a budget, not the model's answer. Counted in, a model that runs out of
tokens would look confidently wrong (overconfident) for what ``max_tokens`` did; raising
it and ``ape retry --outcomes TRUNCATED`` brings those sessions into the numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import pandas as pd

from ape.schemas.report import CalibrationBin, CalibrationEntry
from ape.schemas.results import Outcome


def _is_missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def bin_index(confidence: float, n_bins: int) -> int:
    """The equal-width bin of a confidence in [0, 1]; 1.0 joins the last bin."""
    return min(int(confidence * n_bins), n_bins - 1)


class CalibrationReport(CalibrationEntry):
    """One model's calibration (the envelope's ``calibration[model_id]`` entry)."""

    @classmethod
    def from_predictions(
        cls,
        confidences: Iterable[float | None],
        corrects: Iterable[bool],
        n_bins: int = 10,
    ) -> CalibrationReport:
        """Calibration of paired (confidence, correct) predictions; None confidences are skipped."""
        if n_bins < 1:
            raise ValueError(f"n_bins must be at least 1, got {n_bins}")
        confidences, corrects = list(confidences), list(corrects)
        if len(confidences) != len(corrects):
            raise ValueError(
                f"got {len(confidences)} confidences but {len(corrects)} correct flags; pass one of each per session"
            )
        counts = [0] * n_bins
        hits = [0] * n_bins
        sums = [0.0] * n_bins
        missing, squared_error = 0, 0.0
        for position, (confidence, correct) in enumerate(zip(confidences, corrects)):
            if _is_missing(confidence):
                missing += 1
                continue
            assert confidence is not None  # _is_missing skipped None
            confidence = float(confidence)
            if not 0.0 <= confidence <= 1.0:
                raise ValueError(
                    f"confidence {confidence} at position {position} is outside [0, 1]; "
                    "a model must report a probability"
                )
            hit = bool(correct)
            index = bin_index(confidence, n_bins)
            counts[index] += 1
            hits[index] += hit
            sums[index] += confidence
            squared_error += (confidence - hit) ** 2
        n = sum(counts)
        bins = [
            CalibrationBin(
                index=i,
                lower=i / n_bins,
                upper=(i + 1) / n_bins,
                count=counts[i],
                accuracy=hits[i] / counts[i] if counts[i] else None,
                mean_confidence=sums[i] / counts[i] if counts[i] else None,
            )
            for i in range(n_bins)
        ]
        ece = (
            sum(counts[i] / n * abs(hits[i] / counts[i] - sums[i] / counts[i]) for i in range(n_bins) if counts[i])
            if n
            else None
        )
        return cls(
            ece=ece,
            brier=squared_error / n if n else None,
            populated_bins=sum(1 for c in counts if c),
            n=n,
            missing=missing,
            n_bins=n_bins,
            bins=bins,
        )


TRUNCATED = Outcome.TRUNCATED.value  # a session cut at the token limit


def calibration_by_model(sessions: pd.DataFrame, n_bins: int = 10) -> dict[str, CalibrationReport]:
    """One report per model from a sessions table (columns model_id, confidence, correct, and
    outcome when there is one: TRUNCATED sessions are left out, counted in ``truncated``)."""
    reports: dict[str, CalibrationReport] = {}
    if sessions.empty:
        return reports
    for model_id, group in sessions.groupby("model_id", sort=True):
        cut = group["outcome"].astype(str) == TRUNCATED if "outcome" in group else pd.Series(False, index=group.index)
        kept = group[~cut]
        confidences = [None if _is_missing(v) else float(v) for v in kept["confidence"].tolist()]
        report = CalibrationReport.from_predictions(confidences, kept["correct"].astype(bool).tolist(), n_bins=n_bins)
        report.truncated = int(cut.sum())
        reports[str(model_id)] = report
    return reports


def bins_frame(reports: Mapping[str, CalibrationEntry]) -> pd.DataFrame:
    """The reliability-diagram bins of every model as one long table (calibration_bins.parquet)."""
    rows = [{"model_id": model_id, **bin_.model_dump()} for model_id, report in reports.items() for bin_ in report.bins]
    columns = ["model_id", "index", "lower", "upper", "count", "accuracy", "mean_confidence"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype(
        {
            "index": "int64",
            "lower": "float64",
            "upper": "float64",
            "count": "int64",
            "accuracy": "float64",
            "mean_confidence": "float64",
        }
    )
