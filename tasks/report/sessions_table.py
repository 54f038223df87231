"""Saved results to the sessions table: one row per session, typed by :data:`SESSIONS_SCHEMA`.

The columns are documented in :mod:`ape.tasks.report.build` (``sessions.parquet``); every
aggregate of the report (:mod:`ape.tasks.stats.aggregate`, :mod:`ape.tasks.stats.calibration`) takes
this table as a pandas frame (:func:`load_sessions`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from ape.schemas.errors import ApeError
from ape.schemas.results import OutputBatch, SessionResult
from ape.tasks.storage.run_files import DEFAULT_SAVE_FILE, RunFiles, find_runs
from ape.tasks.storage.save import scan_results

log = logging.getLogger(__name__)

SESSIONS_SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("line", pa.int64()),
        ("saved_at", pa.timestamp("us", tz="UTC")),
        ("model_id", pa.string()),
        ("item_id", pa.string()),
        ("run_index", pa.int64()),
        ("outcome", pa.string()),
        ("error_type", pa.string()),
        ("error_message", pa.string()),
        ("check_status", pa.string()),
        ("check_score", pa.float64()),
        ("check_runtime_s", pa.float64()),
        ("check_error_type", pa.string()),
        ("check_error_message", pa.string()),
        ("check_metadata", pa.string()),
        ("metric", pa.string()),
        ("score", pa.float64()),
        ("correct", pa.bool_()),
        ("confidence", pa.float64()),
        ("token_nll", pa.float64()),
        ("token_count", pa.int64()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("reasoning_tokens", pa.int64()),
        ("reasoning_cut", pa.bool_()),
        ("steps", pa.int64()),
        ("latency_s", pa.float64()),
        ("category", pa.string()),
        ("cached", pa.bool_()),
        ("solution", pa.string()),
        ("raw_output", pa.string()),
        ("cluster", pa.string()),
        ("cost", pa.float64()),
        ("cached_cost", pa.float64()),
        ("expected", pa.string()),
        ("prompt_hash", pa.string()),
        ("batch", pa.bool_()),
        ("end_reason", pa.string()),
    ]
)


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=str, ensure_ascii=False)


def session_row(session: SessionResult, batch: OutputBatch, source: Path, line: int) -> dict[str, Any]:
    """Flatten one saved session into a sessions.parquet row."""
    check = session.check
    return {
        "source": str(source),
        "line": line,
        "saved_at": batch.saved_at,
        "model_id": session.model_id,
        "item_id": session.item_id,
        "run_index": session.run_index,
        "outcome": session.outcome.value,
        "error_type": session.error.type if session.error else None,
        "error_message": session.error.message if session.error else None,
        "check_status": check.status.value if check else None,
        "check_score": check.score if check else None,
        "check_runtime_s": check.runtime_s if check else None,
        "check_error_type": check.error.type if check and check.error else None,
        "check_error_message": check.error.message if check and check.error else None,
        "check_metadata": _json_text(check.metadata) if check and check.metadata else None,
        "metric": session.metric,
        "score": session.score,
        "correct": session.correct,
        "confidence": session.confidence,
        "token_nll": session.token_nll,
        "token_count": session.token_count,
        "input_tokens": session.input_tokens,
        "output_tokens": session.output_tokens,
        "reasoning_tokens": session.reasoning_tokens,
        "reasoning_cut": session.reasoning_cut,
        "steps": session.steps,
        "latency_s": session.latency_s,
        "category": session.category,
        "cached": session.cached,
        "solution": _json_text(session.solution),
        "raw_output": session.raw_output,
        "cluster": session.cluster,
        "cost": session.cost,
        "cached_cost": session.cached_cost,
        "expected": _expected(check),
        "prompt_hash": session.prompt_hash,
        "batch": session.batch,
        "end_reason": session.end_reason,
    }


def _expected(check: Any) -> str | None:
    """The reference a failed check compared with, when the checker recorded it."""
    if check is None or check.status.value != "FAILED" or "expected" not in check.metadata:
        return None
    value = check.metadata["expected"]
    return value if isinstance(value, str) else _json_text(value)


def latest_batches(path: Path) -> dict[tuple[str, str], tuple[OutputBatch, int]]:
    """The batches of one results file keyed by (model, item); a later line replaces an earlier one.

    Read by :func:`ape.tasks.storage.save.scan_results`, the same reader a resumed run uses, so the
    report counts exactly what the run considers saved: a torn last line and damaged lines
    are left out with a warning naming the file and line (the next run moves damaged lines
    to a quarantine file and redoes their items).
    """
    scan = scan_results(path)
    for number, _, reason in scan.damaged:
        log.warning("%s:%d: skipping a damaged line (%s)", path, number, reason[:200])
    if scan.torn:
        log.warning("%s: skipping a partly written last line", path)
    return {(batch.model_id, batch.item_id): (batch, number) for number, batch in scan.batches}


def session_table(runs: Sequence[RunFiles], where: str) -> pa.Table:
    """All sessions of ``runs`` (from :func:`ape.tasks.storage.run_files.find_runs`) as an Arrow table
    with :data:`SESSIONS_SCHEMA`; ``where`` names what was searched when there are none."""
    files = [run.results for run in runs]
    if not files:
        raise ApeError(
            f"no {DEFAULT_SAVE_FILE} found, nor a run's metadata naming its results file",
            where=where,
            hint="pass the output folder of a finished or partial run",
        )
    merged: dict[tuple[str, str], tuple[OutputBatch, int, Path]] = {}
    for path in files:
        for key, (batch, number) in latest_batches(path).items():
            if key in merged and merged[key][2] != path:
                log.warning(
                    "item %r of model %r is in both %s and %s; keeping the latter",
                    key[1],
                    key[0],
                    merged[key][2],
                    path,
                )
            merged[key] = (batch, number, path)
    # a stable order, whatever order the items finished in: aggregates come out bit-identical
    rows = [
        session_row(session, batch, path, number)
        for _, (batch, number, path) in sorted(merged.items(), key=lambda kv: kv[0])
        for session in sorted(batch.sessions, key=lambda s: s.run_index)
    ]
    return pa.Table.from_pylist(rows, schema=SESSIONS_SCHEMA)


def searched(output_dirs: Sequence[Path]) -> str:
    """The folders a reader searched, for its error messages."""
    return ", ".join(str(d) for d in output_dirs) or "(no folders given)"


def load_sessions(output_dirs: Sequence[Path]) -> pd.DataFrame:
    """One row per saved session under ``output_dirs`` (columns: see :mod:`ape.tasks.report.build`)."""
    return session_table(find_runs(output_dirs), searched(output_dirs)).to_pandas()
