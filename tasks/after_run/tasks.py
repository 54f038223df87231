"""The benchmark flow's tasks after the models ran: the report from the saved results (files
and artifacts in the Prefect UI), and the new run joining the history (compared, alerted on).
Thin Prefect wrappers over the plain functions of :mod:`ape.tasks.report` and this package.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from ape.schemas.config import ApeConfig
from ape.schemas.report import Envelope
from ape.tasks.after_run.alerts import artifact_key, publish
from ape.tasks.after_run.join_history import explain_moves, flagged_items, join_history
from ape.tasks.report.build import build_report
from ape.tasks.report.envelope import write_envelope
from ape.tasks.report.lm_eval_scores import report_scores
from ape.tasks.report.markdown import calibration_table, markdown_table
from ape.tasks.storage.runs import RunInfo, finish_run

log = logging.getLogger("ape")


@task(name="report", task_run_name="report[{config.name}]", cache_policy=NO_CACHE, persist_result=False)
def report_task(config: ApeConfig, wall_seconds: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Leaderboard, pairwise comparison and calibration from the saved results (no model calls)."""

    files = [config.output_dir_for(m) / config.run.save_file for m in config.model]
    harness = report_scores(config)  # [task] lm_eval: the harness's own aggregation beside the leaderboard
    if harness is not None:
        extra = {**(extra or {}), "lm_eval": harness}
    envelope = build_report(
        [f for f in files if f.exists()],
        config.run.output,
        wall_seconds=wall_seconds,
        extra_summary={"benchmark": config.name, **(extra or {})},
        health_share=config.run.health_share,
        health_min_sessions=config.run.health_min_sessions,
    )
    table = markdown_table(envelope)
    try:
        key = artifact_key(config.name)
        create_markdown_artifact(
            markdown=f"# {config.name}: leaderboard\n\n{table}", key=f"{key}-leaderboard", description="APE leaderboard"
        )
        create_markdown_artifact(
            markdown=_calibration_markdown(envelope), key=f"{key}-calibration", description="APE calibration"
        )
    except Exception as exc:  # no API available: the files are the report
        log.debug("artifacts unavailable: %s", exc)
    return envelope.model_dump(mode="json")


def _calibration_markdown(envelope: Envelope) -> str:

    return "\n".join(["# Calibration", "", *calibration_table(envelope)])


@task(name="join-history", task_run_name="join-history[{info.run_id}]", cache_policy=NO_CACHE, persist_result=False)
def join_history_task(config: ApeConfig, top: Path, info: RunInfo, envelope: dict[str, Any]) -> list[dict[str, Any]]:
    """History entry, comparisons with the previous run and the baseline, ``latest``, alerts."""

    report = Envelope.model_validate(envelope)
    rows = explain_moves(config, top, info, join_history(config, top, info, report))
    summary = report.summary.model_copy(update={"flagged_items": flagged_items(top)})
    report = report.model_copy(update={"regressions": rows, "summary": summary})
    write_envelope(config.run.output / "report.json", report)
    (config.run.output / "leaderboard.md").write_text(markdown_table(report), encoding="utf-8")
    finish_run(top, info)
    publish(config, top, info.run_id, rows)
    return [row.model_dump(mode="json") for row in rows]
