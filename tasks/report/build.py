"""The report: saved results in, Parquet tables, a JSON envelope, markdown and a chart out.

:func:`build_report` reads every results file under the given folders (``results.jsonl``,
or the ``[run] save_file`` a run recorded in its metadata; see :mod:`ape.tasks.storage.run_files`),
calls no model, and writes into the report folder:

``sessions.parquet`` - one row per session
    source (string): the results file the row came from; line (int64): its line number;
    saved_at (timestamp[us, UTC]): when the item's batch was saved;
    model_id, item_id (string); run_index (int64): which of the runs_per_data sessions;
    outcome (string): SOLVED, PARSING_FAILED, GAVE_UP, TRUNCATED or ERROR;
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
    expected (string, null): for a failed check, the reference the checker compared with;
    prompt_hash (string, null): sha256 of the rendered prompt (system prompt first, when
    there is one), 16 hex digits; what run health compares (:mod:`ape.tasks.report.health`);
    batch (bool): answered through the provider's batch API (``[model] batch``), priced at
    ``batch_price_factor``.

``leaderboard.parquet`` - one row per ranked model, best first (a model whose every session
errored has no result: it is listed apart in ``report.json``'s ``unranked`` and in
``leaderboard.md``, and left out of this table, ``pairwise``, ``categories`` and
``calibration_bins``; :mod:`ape.tasks.report.unranked`)
    rank (int64), model_id (string), n_items, n_sessions, runs_per_data (int64),
    mean_score, score_se, ci_low, ci_high (float64, null): mean item score, its standard
    error and 95% interval (method in ci_method); pass_rate (float64): share of sessions
    correct; pass@K (float64, null): one column per reported k when runs_per_data > 1;
    solved, parsing_failed, gave_up, truncated, error (int64): sessions per outcome
    (truncated: the final answer was cut at the token limit, ``[model] max_tokens``);
    check_errors, cached, batched (int64); mean_latency_s, mean_input_tokens,
    mean_output_tokens (float64, null); ci_method (string): wilson, wilson-clustered,
    bca or bca-clustered; n_effective (float64); pass_rate_low, pass_rate_high (float64):
    Wilson interval of the pass rate; total_input_tokens, total_output_tokens,
    total_cost, cost_per_session, cost_per_correct (float64, null); rank_low, rank_high
    (int64): the rank interval; tie_group (int64): models that cannot be told apart;
    injection_flags (int64): sessions whose answer the judge checker flagged as addressed to
    the grader (:mod:`ape.tasks.checking.injection`); infrastructure_errors (int64): sessions
    that ended with an infrastructure error (a sandbox that would not start), left out of
    every other column (:mod:`ape.tasks.report.infrastructure`).

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

``report.json`` (the :class:`ape.schemas.report.Envelope`, with each model's run ``health``
from :mod:`ape.tasks.report.health`; for ``[choices]`` runs each model's acc and acc_norm,
:mod:`ape.tasks.stats.choice_metrics`; with the judge checker its ``judge`` part,
:mod:`ape.tasks.report.judge_agreement`), ``leaderboard.md`` (the
markdown of :func:`ape.tasks.report.markdown.markdown_table`) and ``summary.png`` (:mod:`ape.tasks.report.chart`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from ape.schemas.errors import ApeError
from ape.schemas.report import CalibrationEntry, Envelope, StageChainsEntry, Summary
from ape.tasks.report.chart import write_summary_chart
from ape.tasks.report.envelope import error_envelope, leaderboard_rows, pairwise_rows, summary_of, write_envelope
from ape.tasks.report.health import DEFAULT_MIN_SESSIONS, DEFAULT_SHARE, injection_counts, run_health
from ape.tasks.report.infrastructure import infrastructure_counts, infrastructure_mask
from ape.tasks.report.judge_agreement import find_calibration, judge_report
from ape.tasks.report.markdown import markdown_table
from ape.tasks.report.parquet_tables import INT_LEADERBOARD, INT_PAIRWISE, write_frame
from ape.tasks.report.provenance import environment, recorded_provenance
from ape.tasks.report.sessions_table import searched, session_table
from ape.tasks.report.unranked import split_unranked
from ape.tasks.stats.aggregate import (
    CATEGORY_COLUMNS,
    PAIRWISE_COLUMNS,
    aggregate,
    category_breakdown,
    pairwise_diffs,
    rank_intervals,
)
from ape.tasks.stats.calibration import bins_frame, calibration_by_model
from ape.tasks.stats.choice_metrics import choice_metrics
from ape.tasks.storage.run_files import RunFiles, find_runs, run_files_in
from ape.tasks.storage.stage_chains import read_chains, record_command, record_folder

log = logging.getLogger("ape")


def with_injection_flags(leaderboard: pd.DataFrame, counts: dict[str, int]) -> pd.DataFrame:
    """The leaderboard with each model's flagged sessions (``injection_flags``, 0 for none)."""
    frame = leaderboard.copy()
    frame["injection_flags"] = frame["model_id"].astype(str).map(counts).fillna(0).astype("int64")
    return frame


def stage_chains_of(runs: list[RunFiles], report_dir: Path) -> dict[str, StageChainsEntry]:
    """Model id -> its stage chains, from each run folder's ``stage_chains.json`` (results
    without one, from before it existed or outside a flow run, have no entry)."""
    entries: dict[str, StageChainsEntry] = {}
    for run in runs:
        try:
            chains = read_chains(run.folder)
        except ApeError as exc:  # the report does not depend on it: say so and go on
            log.warning("%s", exc)
            continue
        if chains is None:
            continue
        left_out = chains.chains_left_out
        command = record_command(record_folder(run.folder, report_dir)) if left_out else None
        entries[run.model_id] = StageChainsEntry(
            recorded=chains.chains_recorded, left_out=left_out, record_command=command
        )
    return entries


def recount_stage_chains(report_dir: Path, model_dirs: list[Path]) -> None:
    """The report in ``report_dir`` (when there is one) counts the stage chains as the model
    folders' ``stage_chains.json`` say now (after ``ape record``): ``report.json`` and
    ``leaderboard.md`` rewritten, nothing else. A missing report, or one of another
    version, is left alone: the files say it."""
    path = report_dir / "report.json"
    try:
        envelope = Envelope.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    entries = stage_chains_of([run_files_in(model) for model in model_dirs], report_dir)
    envelope = envelope.model_copy(update={"stage_chains": {**envelope.stage_chains, **entries}})
    write_envelope(path, envelope)
    leaderboard = report_dir / "leaderboard.md"
    if leaderboard.is_file():
        leaderboard.write_text(markdown_table(envelope), encoding="utf-8")


def build_report(
    output_dirs: list[Path],
    report_dir: Path,
    *,
    wall_seconds: float | None = None,
    extra_summary: dict | None = None,
    raise_on_error: bool = True,
    health_share: float = DEFAULT_SHARE,
    health_min_sessions: int = DEFAULT_MIN_SESSIONS,
) -> Envelope:
    """Read every results file under ``output_dirs`` and write the report into ``report_dir``.

    On failure ``report.json`` still gets written, holding the error and whatever parts
    were computed; then the exception propagates (or, with ``raise_on_error=False``,
    the error envelope is returned), so a caller can exit non-zero. ``health_share`` and
    ``health_min_sessions`` are the run-health thresholds (:mod:`ape.tasks.report.health`).
    """
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    partial: dict[str, Any] = {}
    stage = "reading results"
    try:
        runs = find_runs(output_dirs)  # one walk of the folders for the sessions and provenance
        table = session_table(runs, searched(output_dirs))
        pq.write_table(table, report_dir / "sessions.parquet")
        sessions = table.to_pandas()
        summary = summary_of(sessions, wall_seconds=wall_seconds, extra_summary=extra_summary)
        partial["summary"] = summary

        summary.provenance = {"report": environment(), "runs": recorded_provenance(runs)}
        partial["stage_chains"] = stage_chains_of(runs, report_dir)

        stage = "run health"
        partial["health"] = run_health(sessions, share=health_share, min_sessions=health_min_sessions)

        stage = "aggregating the leaderboard"
        ranked, leaderboard, categories = _leaderboard(sessions, summary, partial, report_dir)

        stage = "comparing models pairwise"
        pairwise = pairwise_diffs(ranked)
        write_frame(pairwise[PAIRWISE_COLUMNS], report_dir / "pairwise.parquet", INT_PAIRWISE)
        partial["pairwise"] = pairwise_rows(pairwise)
        leaderboard = rank_intervals(leaderboard, pairwise)
        write_frame(leaderboard, report_dir / "leaderboard.parquet", INT_LEADERBOARD)
        partial["leaderboard"] = leaderboard_rows(leaderboard, categories)

        stage = "calibration"
        calibration = calibration_by_model(ranked)
        write_frame(bins_frame(calibration), report_dir / "calibration_bins.parquet", {"index", "count"})
        partial["calibration"] = {
            model_id: CalibrationEntry(**report.model_dump()) for model_id, report in calibration.items()
        }

        stage = "acc and acc_norm"
        partial["choices"] = choice_metrics(ranked)

        stage = "the judge's calibration"
        partial["judge"] = judge_report(ranked, find_calibration([report_dir, *map(Path, output_dirs)]))

        stage = "writing the report"
        envelope = Envelope(**partial)
        write_envelope(report_dir / "report.json", envelope)
        (report_dir / "leaderboard.md").write_text(markdown_table(envelope), encoding="utf-8")
        write_summary_chart(envelope, report_dir / "summary.png")
        return envelope
    except Exception as exc:
        envelope = _write_failed(report_dir, exc, stage, partial)
        if raise_on_error:
            raise
        return envelope


def _leaderboard(
    sessions: pd.DataFrame, summary: Summary, partial: dict[str, Any], report_dir: Path
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The ranked sessions, the leaderboard before its rank intervals and the categories;
    ``categories.parquet`` written, the counts set on ``summary`` and the parts on ``partial``."""
    # a model whose every session errored has no result: listed apart, never ranked
    # (ape.tasks.report.unranked); everything below that compares models uses `ranked`
    ranked, partial["unranked"] = split_unranked(sessions)
    # infrastructure errors (a sandbox that would not start) are counted apart and scored
    # nowhere (ape.tasks.report.infrastructure); ape retry redoes them
    infrastructure = infrastructure_counts(ranked)
    summary.infrastructure_errors = int(infrastructure_mask(sessions).sum())
    ranked = ranked[~infrastructure_mask(ranked)]
    leaderboard = with_injection_flags(aggregate(ranked), injection_counts(ranked))
    leaderboard["infrastructure_errors"] = (
        leaderboard["model_id"].astype(str).map(infrastructure).fillna(0).astype("int64")
    )
    summary.injection_flags = int(leaderboard["injection_flags"].sum()) if len(leaderboard) else 0
    categories = category_breakdown(ranked)
    write_frame(categories[CATEGORY_COLUMNS], report_dir / "categories.parquet", {"n_items"})
    partial["leaderboard"] = leaderboard_rows(leaderboard, categories)
    return ranked, leaderboard, categories


def _write_failed(report_dir: Path, exc: Exception, stage: str, partial: dict[str, Any]) -> Envelope:
    """The ``report.json`` of a report that failed at ``stage``: the error (with where and
    what to do, for an :class:`ApeError`) beside every part computed before it, so a reader
    of the file sees how far the report got and why it stopped."""
    details: dict[str, Any] = {"stage": stage}
    if isinstance(exc, ApeError):
        details.update(where=exc.where, hint=exc.hint)
        message = exc.message
    else:
        message = str(exc) or type(exc).__name__
    envelope = error_envelope(type(exc).__name__, message, details, **partial)
    write_envelope(report_dir / "report.json", envelope)
    return envelope
