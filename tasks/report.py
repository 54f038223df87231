"""The report: saved results in, Parquet tables, a JSON envelope, markdown and a chart out.

:func:`build_report` reads every ``results.jsonl`` under the given folders (no model
is called) and writes into the report folder:

``sessions.parquet`` - one row per session
    source (string): the results.jsonl the row came from; line (int64): its line number;
    saved_at (timestamp[us, UTC]): when the item's batch was saved;
    model_id, item_id (string); run_index (int64): which of the runs_per_data sessions;
    outcome (string): SOLVED, PARSING_FAILED, GAVE_UP or ERROR;
    error_type, error_message (string, null): the solver failure, if any;
    check_status (string, null): PASSED, FAILED, ERROR, null when no check ran;
    check_score (float64, null), check_runtime_s (float64, null);
    check_error_type, check_error_message (string, null): when the checker raised;
    check_metadata (string, null): the checker's metadata as JSON text;
    metric (string, null): the built-in metric, null for user checkers;
    score (float64): the session's score (0 without a checkable solution);
    correct (bool): whether the score counts as correct;
    confidence (float64, null): the model's self-reported confidence in [0, 1];
    token_nll (float64, null); token_count, input_tokens, output_tokens (int64, null);
    steps (int64): model calls; latency_s (float64): solve + adapt wall time;
    category (string, null); cached (bool): answered from the result cache;
    solution (string, null): the parsed solution as JSON text; raw_output (string, null);
    cluster (string, null): the item's ``[data] cluster_field`` value;
    cost (float64, null): the session's tokens at the model's prices;
    expected (string, null): for a failed check, the reference the checker compared with.

``leaderboard.parquet`` - one row per model, best first
    rank (int64), model_id (string), n_items, n_sessions, runs_per_data (int64),
    mean_score, score_se, ci_low, ci_high (float64, null): mean item score, its standard
    error and 95% interval (method in ci_method); pass_rate (float64): share of sessions
    correct; pass@K (float64, null): one column per reported k when runs_per_data > 1;
    solved, parsing_failed, gave_up, error (int64): sessions per outcome;
    check_errors, cached (int64); mean_latency_s, mean_input_tokens,
    mean_output_tokens (float64, null); ci_method (string): wilson, wilson-clustered,
    bca or bca-clustered; n_effective (float64); pass_rate_low, pass_rate_high (float64):
    Wilson interval of the pass rate; total_input_tokens, total_output_tokens,
    total_cost, cost_per_session, cost_per_correct (float64, null); rank_low, rank_high
    (int64): the rank interval; tie_group (int64): models that cannot be told apart.

``categories.parquet`` - per model and category (empty without categories)
    model_id, category (string), n_items (int64), mean_score, pass_rate (float64).

``pairwise.parquet`` - one row per pair of models (A ranked above B; differences A - B)
    model_a, model_b (string), n_items (int64): items both answered;
    mean_a, mean_b, mean_diff, ci_low, ci_high (float64, null): paired BCa bootstrap;
    wins, ties, losses (int64): items where A scored higher, equal, lower;
    a_only, b_only (int64): items only A / only B passed; test (string): exact, chi2
    or none; statistic (float64, null): chi-square value; p_value (float64);
    ci_method (string); correlation (float64, null): of the two models' item scores;
    mde_80 (float64, null): minimum difference detectable at 80% power; p_holm
    (float64): Holm-corrected p_value; significant (bool): p_holm < 0.05.

``calibration_bins.parquet`` - the reliability diagram, one row per model and bin
    model_id (string), index (int64), lower, upper (float64): bin edges;
    count (int64); accuracy, mean_confidence (float64, null when the bin is empty).

``report.json`` (the :class:`ape.schemas.report.Envelope`), ``leaderboard.md`` (the
markdown of :func:`markdown_table`) and ``summary.png`` (:mod:`tasks.chart`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ape.schemas.errors import ApeError
from ape.schemas.report import (
    CalibrationEntry,
    CategoryScore,
    Envelope,
    ErrorDetail,
    LeaderboardRow,
    OutcomeCounts,
    PairwiseRow,
    Summary,
)
from ape.schemas.results import OutputBatch, SessionResult
from ape.tasks.aggregate import (
    CATEGORY_COLUMNS,
    OUTCOME_COLUMNS,
    PAIRWISE_COLUMNS,
    aggregate,
    category_breakdown,
    pairwise_diffs,
    rank_intervals,
)
from ape.tasks.calibrate import bins_frame, calibration_by_model
from ape.tasks.chart import write_summary_chart
from ape.tasks.provenance import environment
from ape.tasks.save import atomic_write_text, scan_results

log = logging.getLogger(__name__)

RESULTS_FILE = "results.jsonl"

SESSIONS_SCHEMA = pa.schema([
    ("source", pa.string()), ("line", pa.int64()), ("saved_at", pa.timestamp("us", tz="UTC")),
    ("model_id", pa.string()), ("item_id", pa.string()), ("run_index", pa.int64()),
    ("outcome", pa.string()), ("error_type", pa.string()), ("error_message", pa.string()),
    ("check_status", pa.string()), ("check_score", pa.float64()), ("check_runtime_s", pa.float64()),
    ("check_error_type", pa.string()), ("check_error_message", pa.string()),
    ("check_metadata", pa.string()), ("metric", pa.string()), ("score", pa.float64()),
    ("correct", pa.bool_()), ("confidence", pa.float64()), ("token_nll", pa.float64()),
    ("token_count", pa.int64()), ("input_tokens", pa.int64()), ("output_tokens", pa.int64()),
    ("steps", pa.int64()), ("latency_s", pa.float64()), ("category", pa.string()),
    ("cached", pa.bool_()), ("solution", pa.string()), ("raw_output", pa.string()),
    ("cluster", pa.string()), ("cost", pa.float64()), ("expected", pa.string()),
])  # fmt: skip

_INT_LEADERBOARD = {"rank", "n_items", "n_sessions", "runs_per_data", "check_errors", "cached",
                    "rank_low", "rank_high", "tie_group", *OUTCOME_COLUMNS.values()}  # fmt: skip
_STRING_COLUMNS = {"model_id", "model_a", "model_b", "category", "test", "ci_method"}
_BOOL_COLUMNS = {"significant"}
_INT_PAIRWISE = {"n_items", "wins", "ties", "losses", "a_only", "b_only"}


# --- loading ------------------------------------------------------------------------------


def results_files(output_dirs: Iterable[Path]) -> list[Path]:
    """Every results.jsonl under each folder (recursively, sorted), in the order given.

    A path that is a file is taken as a results file itself.
    """
    found: list[Path] = []
    for folder in map(Path, output_dirs):
        if folder.is_file():
            found.append(folder)
        elif folder.is_dir():
            found.extend(sorted(folder.rglob(RESULTS_FILE)))
        else:
            raise ApeError("no such folder", where=str(folder), hint="give the run's output folder")
    return found


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
        "steps": session.steps,
        "latency_s": session.latency_s,
        "category": session.category,
        "cached": session.cached,
        "solution": _json_text(session.solution),
        "raw_output": session.raw_output,
        "cluster": session.cluster,
        "cost": session.cost,
        "expected": _expected(check),
    }


def _expected(check: Any) -> str | None:
    """The reference a failed check compared with, when the checker recorded it."""
    if check is None or check.status.value != "FAILED" or "expected" not in check.metadata:
        return None
    value = check.metadata["expected"]
    return value if isinstance(value, str) else _json_text(value)


def read_batches(path: Path) -> dict[tuple[str, str], tuple[OutputBatch, int]]:
    """The batches of one results file keyed by (model, item); a later line replaces an earlier one.

    Read by :func:`ape.tasks.save.scan_results`, the same reader a resumed run uses, so the
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


def session_table(output_dirs: Iterable[Path]) -> pa.Table:
    """All sessions under ``output_dirs`` as an Arrow table with :data:`SESSIONS_SCHEMA`."""
    output_dirs = list(output_dirs)
    files = results_files(output_dirs)
    if not files:
        raise ApeError(
            f"no {RESULTS_FILE} found",
            where=", ".join(str(d) for d in output_dirs) or "(no folders given)",
            hint="pass the output folder of a finished or partial run",
        )
    merged: dict[tuple[str, str], tuple[OutputBatch, int, Path]] = {}
    for path in files:
        for key, (batch, number) in read_batches(path).items():
            if key in merged and merged[key][2] != path:
                log.warning(
                    "item %r of model %r is in both %s and %s; keeping the latter",
                    key[1], key[0], merged[key][2], path,
                )  # fmt: skip
            merged[key] = (batch, number, path)
    # a stable order, whatever order the items finished in: aggregates come out bit-identical
    rows = [
        session_row(session, batch, path, number)
        for _, (batch, number, path) in sorted(merged.items(), key=lambda kv: kv[0])
        for session in sorted(batch.sessions, key=lambda s: s.run_index)
    ]
    return pa.Table.from_pylist(rows, schema=SESSIONS_SCHEMA)


def load_sessions(output_dirs: list[Path]) -> pd.DataFrame:
    """One row per saved session under ``output_dirs`` (columns: see the module docstring)."""
    return session_table(output_dirs).to_pandas()


def run_provenance(output_dirs: Iterable[Path]) -> dict[str, Any]:
    """Model id -> the ``provenance`` each run recorded in the metadata.json beside its results."""
    found: dict[str, Any] = {}
    for results in results_files(output_dirs):
        meta = results.parent / "metadata.json"
        if not meta.is_file():
            candidates = sorted(results.parent.glob("*.json"))
            meta = next((c for c in candidates if c.name != "report.json"), meta)
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("provenance"), dict):
            found[str(data.get("model") or results.parent.name)] = data["provenance"]
    return found


# --- frames to the envelope ------------------------------------------------------------------


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
                outcomes=OutcomeCounts(**{o: record[c] for o, c in OUTCOME_COLUMNS.items()}),
                check_errors=record["check_errors"],
                cached=record["cached"],
                mean_latency_s=record["mean_latency_s"],
                mean_input_tokens=record["mean_input_tokens"],
                mean_output_tokens=record["mean_output_tokens"],
                by_category=by_category,
                **{key: record.get(key) for key in _EXTRA_LEADERBOARD},
            )
        )
    return rows


_EXTRA_LEADERBOARD = (
    "ci_method", "n_effective", "pass_rate_low", "pass_rate_high", "rank_low", "rank_high",
    "tie_group", "total_input_tokens", "total_output_tokens", "total_cost", "cost_per_session",
    "cost_per_correct",
)  # fmt: skip


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
    with the same permissions as any other file the user creates (not mkstemp's 0600)."""
    path = Path(path)
    atomic_write_text(path, envelope.model_dump_json(indent=2) + "\n")
    return path


# --- markdown ----------------------------------------------------------------------------


def _cell(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _interval(mean: float | None, low: float | None, high: float | None) -> str:
    if mean is None:
        return "-"
    if low is None or high is None:
        return f"{mean:.3f}"
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _rank(row: LeaderboardRow) -> str:
    if row.rank_low is None or row.rank_high is None or row.rank_low == row.rank_high:
        return str(row.rank)
    return f"{row.rank} ({row.rank_low}-{row.rank_high})"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def calibration_table(envelope: Envelope) -> list[str]:
    """The calibration table's markdown lines (the leaderboard and the Prefect artifact)."""
    header = ["Model", "ECE", "Brier", "Populated bins", "With confidence", "Without"]
    rows = [
        [_cell(model_id), _cell(c.ece), _cell(c.brier), f"{c.populated_bins}/{c.n_bins}",
         str(c.n), str(c.missing)]
        for model_id, c in envelope.calibration.items()
    ]  # fmt: skip
    return _table(header, rows)


def markdown_table(envelope: Envelope) -> str:
    """The report as markdown: leaderboard, per-category, pairwise and calibration tables,
    then the summary and provenance lines."""
    lines: list[str] = []
    if envelope.error is not None:
        lines += [f"**Report failed** ({envelope.error.type}): {_cell(envelope.error.message)}", ""]
    if envelope.leaderboard:
        with_k = any(row.pass_at_k for row in envelope.leaderboard)
        with_cost = any(row.total_cost is not None for row in envelope.leaderboard)
        header = ["Rank (range)", "Group", "Model", "Items", "Mean score [95% CI]", "CI method",
                  "Pass rate [95% CI]"]  # fmt: skip
        header += ["pass@k"] if with_k else []
        header += ["Solved", "Parse failed", "Gave up", "Error", "Check errors", "Latency s", "Tokens in/out"]
        header += ["Cost", "Cost/correct"] if with_cost else []
        rows = []
        for row in envelope.leaderboard:
            cells = [_rank(row), _cell(row.tie_group), _cell(row.model_id), str(row.n_items),
                     _interval(row.mean_score, row.ci_low, row.ci_high), _cell(row.ci_method),
                     _interval(row.pass_rate, row.pass_rate_low, row.pass_rate_high)]  # fmt: skip
            if with_k:
                cells.append(", ".join(f"@{k} {v:.3f}" for k, v in row.pass_at_k.items()) or "-")
            tokens = f"{_cell(row.mean_input_tokens, 0)}/{_cell(row.mean_output_tokens, 0)}"
            cells += [str(row.outcomes.SOLVED), str(row.outcomes.PARSING_FAILED),
                      str(row.outcomes.GAVE_UP), str(row.outcomes.ERROR), str(row.check_errors),
                      _cell(row.mean_latency_s, 2), tokens]  # fmt: skip
            if with_cost:
                cells += [_money(row.total_cost), _money(row.cost_per_correct)]
            rows.append(cells)
        lines += ["## Leaderboard", "", *_table(header, rows), "",
                  "Rank (range): the places a model could hold given the Holm-corrected pairwise "
                  "tests; models in one group are not significantly different from its first.", ""]  # fmt: skip
    categories = sorted({c for row in envelope.leaderboard for c in row.by_category})
    if categories:
        header = ["Model", *(_cell(c) for c in categories)]
        rows = [
            [_cell(row.model_id)]
            + [
                f"{_cell(row.by_category[c].mean_score)} ({row.by_category[c].n_items})"
                if c in row.by_category else "-"
                for c in categories
            ]
            for row in envelope.leaderboard
        ]  # fmt: skip
        lines += ["## By category (mean score, items)", "", *_table(header, rows), ""]
    if envelope.pairwise:
        header = ["A", "B", "Items", "Mean diff A-B [95% CI]", "CI method", "Win/tie/loss",
                  "Only A / only B passed", "p (McNemar)", "p Holm", "r", "MDE 80%"]  # fmt: skip
        rows = [
            [_cell(p.model_a), _cell(p.model_b), str(p.n_items),
             _interval(p.mean_diff, p.ci_low, p.ci_high), _cell(p.ci_method),
             f"{p.wins}/{p.ties}/{p.losses}", f"{p.a_only}/{p.b_only}",
             f"{_cell(p.p_value)} ({p.test})" if p.p_value is not None else "-",
             _cell(p.p_holm) + (" *" if p.significant else ""), _cell(p.correlation, 2),
             _cell(p.mde_80)]
            for p in envelope.pairwise
        ]  # fmt: skip
        lines += ["## Pairwise", "", *_table(header, rows), "",
                  "r: correlation of the two models' item scores; MDE 80%: the smallest "
                  "difference this comparison detects with 80% power; * significant after Holm.",
                  ""]  # fmt: skip
    if envelope.calibration:
        lines += ["## Calibration", "", *calibration_table(envelope), ""]
    if envelope.regressions:
        header = ["Model", "Against run", "Verdict", "Items", "Score diff [95% CI]", "Passed now/before only",
                  "p (exact McNemar)", "Detectable change"]  # fmt: skip
        rows = [
            [_cell(r.model_id), f"{r.against} {r.reference_run_id}", f"**{r.verdict}**", str(r.n_items),
             _interval(r.mean_diff, r.ci_low, r.ci_high), f"{r.current_only}/{r.reference_only}",
             _cell(r.p_value), _cell(r.min_detectable_change)]
            for r in envelope.regressions
        ]  # fmt: skip
        notes = [f"- {r.model_id} vs {r.against}: {_cell(r.note)}" for r in envelope.regressions if r.note]
        lines += ["## Changes since earlier runs", "", *_table(header, rows), *notes, ""]
    summary = envelope.summary
    wall = f", {summary.wall_seconds:.1f} s" if summary.wall_seconds is not None else ""
    lines.append(f"{summary.tasks} tasks, {summary.models} models, {summary.sessions} sessions{wall}")
    lines += _provenance_lines(summary.provenance)
    return "\n".join(lines) + "\n"


def _provenance_lines(provenance: Mapping[str, Any]) -> list[str]:
    runs = provenance.get("runs") or {}
    report = provenance.get("report") or {}
    if not runs and not report:
        return []
    first: Mapping[str, Any] = next(iter(runs.values()), {})
    parts = [f"APE {report.get('ape_version') or first.get('ape_version') or '?'}"]
    if first.get("config_sha256"):
        parts.append(f"config sha256 {first['config_sha256'][:12]}")
    if first.get("data_sha256"):
        parts.append(f"data sha256 {first['data_sha256'][:12]}")
    if first.get("git_commit"):
        parts.append(f"git {first['git_commit'][:10]}" + (" (dirty)" if first.get("git_dirty") else ""))
    return ["", "Provenance: " + ", ".join(parts) + " (full record in report.json)"]


# --- Parquet -----------------------------------------------------------------------------


def _frame_schema(frame: pd.DataFrame, ints: set[str]) -> pa.Schema:
    fields = []
    for column in frame.columns:
        if column in _STRING_COLUMNS:
            kind = pa.string()
        elif column in _BOOL_COLUMNS:
            kind = pa.bool_()
        elif column in ints:
            kind = pa.int64()
        else:
            kind = pa.float64()
        fields.append((column, kind))
    return pa.schema(fields)


def write_frame(frame: pd.DataFrame, path: Path, ints: Iterable[str] = ()) -> Path:
    """Write a report table with explicit column types (stable even when the table is empty)."""
    table = pa.Table.from_pandas(frame, schema=_frame_schema(frame, set(ints)), preserve_index=False)
    pq.write_table(table, path)
    return path


# --- the whole report ----------------------------------------------------------------------


def build_report(
    output_dirs: list[Path],
    report_dir: Path,
    *,
    wall_seconds: float | None = None,
    extra_summary: dict | None = None,
    raise_on_error: bool = True,
) -> Envelope:
    """Read every results.jsonl under ``output_dirs`` and write the report into ``report_dir``.

    On failure ``report.json`` still gets written, holding the error and whatever parts
    were computed; then the exception propagates (or, with ``raise_on_error=False``,
    the error envelope is returned), so a caller can exit non-zero.
    """
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    partial: dict[str, Any] = {}
    stage = "reading results"
    try:
        table = session_table(output_dirs)
        pq.write_table(table, report_dir / "sessions.parquet")
        sessions = table.to_pandas()
        summary = summary_of(sessions, wall_seconds=wall_seconds, extra_summary=extra_summary)
        partial["summary"] = summary

        summary.provenance = {"report": environment(), "runs": run_provenance(output_dirs)}

        stage = "aggregating the leaderboard"
        leaderboard = aggregate(sessions)
        categories = category_breakdown(sessions)
        write_frame(categories[CATEGORY_COLUMNS], report_dir / "categories.parquet", {"n_items"})
        partial["leaderboard"] = leaderboard_rows(leaderboard, categories)

        stage = "comparing models pairwise"
        pairwise = pairwise_diffs(sessions)
        write_frame(pairwise[PAIRWISE_COLUMNS], report_dir / "pairwise.parquet",
                    _INT_PAIRWISE)  # fmt: skip
        partial["pairwise"] = pairwise_rows(pairwise)
        leaderboard = rank_intervals(leaderboard, pairwise)
        write_frame(leaderboard, report_dir / "leaderboard.parquet", _INT_LEADERBOARD)
        partial["leaderboard"] = leaderboard_rows(leaderboard, categories)

        stage = "calibration"
        calibration = calibration_by_model(sessions)
        write_frame(bins_frame(calibration), report_dir / "calibration_bins.parquet",
                    {"index", "count"})  # fmt: skip
        partial["calibration"] = {
            model_id: CalibrationEntry(**report.model_dump()) for model_id, report in calibration.items()
        }

        stage = "writing the report"
        envelope = Envelope(**partial)
        write_envelope(report_dir / "report.json", envelope)
        (report_dir / "leaderboard.md").write_text(markdown_table(envelope), encoding="utf-8")
        write_summary_chart(envelope, report_dir / "summary.png")
        return envelope
    except Exception as exc:
        details: dict[str, Any] = {"stage": stage}
        if isinstance(exc, ApeError):
            details.update(where=exc.where, hint=exc.hint)
            message = exc.message
        else:
            message = str(exc) or type(exc).__name__
        envelope = error_envelope(type(exc).__name__, message, details, **partial)
        write_envelope(report_dir / "report.json", envelope)
        if raise_on_error:
            raise
        return envelope
