"""The judge part of the report: agreement with people and bias-corrected scores.

Built from the sessions table (the judge's grade of each session is in its
``check_metadata``) and ``judge_calibration.json`` (:mod:`ape.tasks.checking.judge_labels`),
found in the report folder or one of the output folders read. Without sessions graded by
the judge there is no judge report. The statistics are in
:mod:`ape.tasks.stats.judge_agreement`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ape.schemas.report import JudgeAgreement, JudgeModelScore, JudgeReport
from ape.tasks.common.inert import md_text
from ape.tasks.stats.judge_agreement import MIN_OWN_LABELS, agreement, ppi_mean, raw_mean

CALIBRATION_FILE = "judge_calibration.json"


def find_calibration(folders: list[Path]) -> dict[str, Any] | None:
    """The first readable ``judge_calibration.json`` in ``folders`` (None when there is none)."""
    for folder in folders:
        path = Path(folder) / CALIBRATION_FILE
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ValueError(f"{path} is not readable JSON ({exc}); rerun the benchmark to rewrite it") from None
            return data if isinstance(data, dict) else None
    return None


def _judge_grades(sessions: pd.DataFrame) -> pd.Series:
    """Each session's judge grade (a dict) or None."""

    def parse(text: Any) -> dict[str, Any] | None:
        if not isinstance(text, str):
            return None
        try:
            meta = json.loads(text)
        except ValueError:
            return None
        grade = meta.get("judge") if isinstance(meta, dict) else None
        return grade if isinstance(grade, dict) else None

    return sessions["check_metadata"].map(parse) if "check_metadata" in sessions else pd.Series([], dtype=object)


def judge_report(sessions: pd.DataFrame, calibration: dict[str, Any] | None) -> JudgeReport | None:
    """Agreement and, per model, the raw judge score beside the PPI-corrected one.

    The agreement (:func:`_agreement`) and each model's scores (:func:`_model_score`) are
    built apart: both read the same people-graded rows, but the agreement exists only with a
    calibration file, while the scores are reported (uncorrected) without one."""
    if sessions.empty or "metric" not in sessions or not (sessions["metric"] == "judge").any():
        return None
    grades = _judge_grades(sessions)
    rows = _graded_rows(calibration)
    models = [
        _model_score(model_id, group, grades.loc[group.index], rows)
        for model_id, group in sessions.groupby("model_id", sort=True)
    ]
    spent = calibration or {}
    return JudgeReport(
        judge=_judge_name(calibration, grades),
        agreement=_agreement(calibration, rows) if calibration is not None else None,
        models=models,
        calibration_input_tokens=spent.get("input_tokens"),
        calibration_output_tokens=spent.get("output_tokens"),
        calibration_cost=spent.get("cost"),
    )


def _graded_rows(calibration: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The calibration rows the judge graded: one it failed to grade has no pair to compare."""
    return [r for r in (calibration or {}).get("rows", []) if r.get("judge") is not None]


def _judge_name(calibration: dict[str, Any] | None, grades: pd.Series) -> str:
    """The judge named by the calibration file, else the first judge model seen in the
    sessions' grades (sorted, so the name is stable), else just "judge"."""
    judge_ids = sorted({v["model"] for v in grades if v and v.get("model")})
    return str((calibration or {}).get("judge") or (judge_ids[0] if judge_ids else "judge"))


def _agreement(calibration: dict[str, Any], rows: list[dict[str, Any]]) -> JudgeAgreement:
    """How often the judge gave the people's label, over the graded rows, with the solutions
    it could not grade counted apart so a judge that errs often does not look accurate."""
    labels = list(calibration.get("labels") or [])
    a = agreement([r["human"] for r in rows], [r["judge"] for r in rows], labels)
    return JudgeAgreement(
        n=a.n,
        not_graded=int(calibration.get("errors") or 0),
        accuracy=a.accuracy,
        kappa=a.kappa,
        labels=a.labels,
        confusion=a.confusion,
        mean_human=float(np.mean([r["human_score"] for r in rows])) if rows else None,
        mean_judge=float(np.mean([r["judge_score"] for r in rows])) if rows else None,
    )


def _model_score(model_id: str, group: pd.DataFrame, grades: pd.Series, rows: list[dict[str, Any]]) -> JudgeModelScore:
    # check errors are flagged elsewhere and are no grade: leave them out of both estimates
    usable = group[group["check_status"].fillna("") != "ERROR"]
    judged = usable["check_status"].isin(["PASSED", "FAILED"])
    items = usable.groupby("item_id", sort=False)["score"].mean().to_numpy(dtype=float)
    share = float(judged.mean()) if len(usable) else 0.0
    own = [r for r in rows if r.get("model") == model_id]
    labelled, source = (own, "model") if len(own) >= MIN_OWN_LABELS else (rows, "all" if rows else "none")
    raw = raw_mean(items)
    corrected = (
        ppi_mean(items, [r["human_score"] for r in labelled], [r["judge_score"] for r in labelled], share=share)
        if labelled
        else None
    )
    calls = [v for v in grades if v]
    tokens_in = [v.get("input_tokens") for v in calls if v.get("input_tokens") is not None]
    tokens_out = [v.get("output_tokens") for v in calls if v.get("output_tokens") is not None]
    costs = [v["cost"] for v in calls if v.get("cost") is not None]
    return JudgeModelScore(
        model_id=str(model_id),
        n_items=int(items.size),
        judge_score=raw.estimate,
        judge_low=raw.low,
        judge_high=raw.high,
        corrected_score=corrected.estimate if corrected else None,
        corrected_se=corrected.se if corrected else None,
        corrected_low=corrected.low if corrected else None,
        corrected_high=corrected.high if corrected else None,
        share_judged=share if len(usable) else None,
        n_labels=len(labelled),
        labels_from=source,
        judge_calls=len(calls),
        judge_input_tokens=int(sum(tokens_in)) if tokens_in else None,
        judge_output_tokens=int(sum(tokens_out)) if tokens_out else None,
        judge_cost=float(sum(costs)) if costs else None,
    )


def judge_markdown(report: JudgeReport) -> list[str]:
    """The judge's section of ``leaderboard.md``."""

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    def interval(mean: float | None, low: float | None, high: float | None) -> str:
        if mean is None:
            return "-"
        return f"{mean:.3f}" if low is None or high is None else f"{mean:.3f} [{low:.3f}, {high:.3f}]"

    lines = [f"## Judge ({md_text(report.judge)})", ""]
    agree = report.agreement
    if agree is not None:
        lines.append(
            f"Agreement with people on {agree.n} calibration solutions: accuracy {cell(agree.accuracy)}, "
            f"Cohen's kappa {cell(agree.kappa)}; mean score people {cell(agree.mean_human)}, "
            f"judge {cell(agree.mean_judge)}" + (f"; {agree.not_graded} not graded" if agree.not_graded else "") + "."
        )
        labels = [md_text(label) for label in agree.labels]  # from the calibration file
        lines += ["", "| people \\ judge | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
        for label, counts in zip(labels, agree.confusion, strict=False):
            lines.append(f"| {label} | " + " | ".join(str(c) for c in counts) + " |")
        lines.append("")
    else:
        lines += ["No calibration file: the judge's scores are uncorrected (set [checker] args.calibration_file).", ""]
    with_cost = any(m.judge_cost is not None for m in report.models)
    header = ["Model", "Items", "Judge score [95% CI]", "Corrected score [95% CI]", "Labels", "Judge tokens in/out"]
    header += ["Judge cost"] if with_cost else []
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for m in report.models:
        tokens = (
            f"{m.judge_input_tokens if m.judge_input_tokens is not None else '-'}/"
            f"{m.judge_output_tokens if m.judge_output_tokens is not None else '-'}"
        )
        cells = [
            md_text(m.model_id),
            str(m.n_items),
            interval(m.judge_score, m.judge_low, m.judge_high),
            interval(m.corrected_score, m.corrected_low, m.corrected_high),
            f"{m.n_labels} ({md_text(m.labels_from)})",
            tokens,
        ]
        if with_cost:
            cells.append("-" if m.judge_cost is None else f"{m.judge_cost:.4g}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Corrected: prediction-powered inference (Angelopoulos et al., Science 2023): the judge's "
        "mean plus its mean error on the people-graded solutions, with an interval that counts both.",
        "",
    ]
    return lines
