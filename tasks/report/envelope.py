"""The report's frames to the JSON envelope (:class:`ape.schemas.report.Envelope`) and its file."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from ape.schemas.report import (
    CategoryScore,
    Envelope,
    ErrorDetail,
    LeaderboardRow,
    OutcomeCounts,
    PairwiseRow,
    Summary,
)
from ape.tasks.stats.aggregate import OUTCOME_COLUMNS
from ape.tasks.storage.save import atomic_write_text


def _clean(value: Any) -> Any:
    """NaN and pandas' missing markers become None (JSON null)."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return _clean(value.item())
    return value


def leaderboard_rows(leaderboard: pd.DataFrame, categories: pd.DataFrame) -> list[LeaderboardRow]:
    rows = []
    for record in leaderboard.to_dict("records"):
        record = {key: _clean(value) for key, value in record.items()}
        model_id = record["model_id"]
        by_category = {
            str(c["category"]): CategoryScore(
                n_items=int(c["n_items"]),
                mean_score=_clean(c["mean_score"]),
                pass_rate=_clean(c["pass_rate"]),
            )
            for c in categories[categories["model_id"] == model_id].to_dict("records")
        }
        rows.append(
            LeaderboardRow(
                rank=record["rank"],
                model_id=model_id,
                n_items=record["n_items"],
                n_sessions=record["n_sessions"],
                runs_per_data=record["runs_per_data"],
                mean_score=record["mean_score"],
                score_se=record["score_se"],
                ci_low=record["ci_low"],
                ci_high=record["ci_high"],
                pass_rate=record["pass_rate"],
                pass_at_k={
                    key.split("@", 1)[1]: value
                    for key, value in record.items()
                    if key.startswith("pass@") and value is not None
                },
                pass_hat_k={
                    key[5:]: [value, _finite(record.get(f"{key}_low")), _finite(record.get(f"{key}_high"))]
                    for key, value in record.items()
                    if key.startswith("pass^") and "_" not in key and value is not None
                },
                outcomes=OutcomeCounts(**{o: record[c] for o, c in OUTCOME_COLUMNS.items()}),
                check_errors=record["check_errors"],
                cached=record["cached"],
                batched=record.get("batched", 0),
                mean_latency_s=record["mean_latency_s"],
                mean_input_tokens=record["mean_input_tokens"],
                mean_output_tokens=record["mean_output_tokens"],
                by_category=by_category,
                injection_flags=int(record.get("injection_flags") or 0),
                infrastructure_errors=int(record.get("infrastructure_errors") or 0),
                **{key: record.get(key) for key in _EXTRA_LEADERBOARD},
            )
        )
    return rows


_EXTRA_LEADERBOARD = (
    "ci_method",
    "n_effective",
    "pass_rate_low",
    "pass_rate_high",
    "rank_low",
    "rank_high",
    "tie_group",
    "total_input_tokens",
    "total_output_tokens",
    "total_cost",
    "cost_per_session",
    "cost_per_correct",
    "cached_cost",
    "mean_reasoning_tokens",
    "total_reasoning_tokens",
    "truncated_reasoning",
    "truncated_answer",
)


def pairwise_rows(pairwise: pd.DataFrame) -> list[PairwiseRow]:
    return [
        PairwiseRow(**{key: _clean(value) for key, value in record.items()}) for record in pairwise.to_dict("records")
    ]


def sandboxes_of(sessions: pd.DataFrame) -> list[str]:
    """The code_exec sandbox kinds the checks ran in (``sandbox`` in their metadata)."""
    kinds: set[str] = set()
    if "check_metadata" not in sessions:
        return []
    for text in sessions["check_metadata"].dropna():
        if '"sandbox"' not in text:
            continue
        try:
            kind = json.loads(text).get("sandbox")
        except (ValueError, AttributeError):
            continue
        if isinstance(kind, str):
            kinds.add(kind)
    return sorted(kinds)


def summary_of(
    sessions: pd.DataFrame,
    *,
    wall_seconds: float | None,
    extra_summary: Mapping[str, Any] | None,
) -> Summary:
    """Run-level facts; ``extra_summary`` adds keys but may not overwrite computed ones."""
    computed = Summary(
        tasks=int(sessions["item_id"].nunique()) if len(sessions) else 0,
        models=int(sessions["model_id"].nunique()) if len(sessions) else 0,
        sessions=len(sessions),
        wall_seconds=wall_seconds,
        runs_per_data=(int(sessions.groupby(["model_id", "item_id"]).size().max()) if len(sessions) else None),
        sources=sorted({str(s) for s in sessions["source"]}) if "source" in sessions else [],
        sandbox=sandboxes_of(sessions),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    extra = dict(extra_summary or {})
    clash = sorted(set(extra) & set(Summary.model_fields))
    if clash:
        raise ValueError(f"extra_summary may not set the computed summary keys {clash}; rename them")
    return Summary(**computed.model_dump(), **extra)


def error_envelope(error_type: str, message: str, details: Any = None, **partial: Any) -> Envelope:
    """An envelope that reports a failure; ``partial`` holds any parts computed before it."""
    return Envelope(error=ErrorDetail(type=error_type, message=message, details=details), **partial)


def write_envelope(path: Path, envelope: Envelope) -> Path:
    """Write the envelope as indented JSON, atomically (a reader never sees half a file),
    with the mode of any file the run creates (0600, or 0640 shared with the group)."""
    path = Path(path)
    atomic_write_text(path, envelope.model_dump_json(indent=2) + "\n")
    return path


def _finite(value: object) -> float | None:
    """A bound of an interval, None when there is none (NaN: too few items)."""
    if value is None:
        return None
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) else number
