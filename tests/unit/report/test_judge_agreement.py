"""The judge's part of the report: from the sessions table and judge_calibration.json."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from ape.tasks.report.judge_agreement import judge_markdown, judge_report
from ape.tasks.stats.judge_agreement import ppi_mean


def session(model: str, item: str, status: str | None, score: float, run: int = 0) -> dict:
    meta = None
    if status in ("PASSED", "FAILED"):
        meta = json.dumps(
            {
                "metric": "judge",
                "judge": {
                    "model": "j",
                    "grade": "PASS" if score else "FAIL",
                    "input_tokens": 10,
                    "output_tokens": 2,
                    "cost": 0.5,
                },
            }
        )
    return {
        "model_id": model,
        "item_id": item,
        "run_index": run,
        "check_status": status,
        "score": score,
        "metric": "judge",
        "check_metadata": meta,
    }


def calibration(rows: list[tuple[str, str, str | None]]) -> dict:
    score = {"PASS": 1.0, "FAIL": 0.0}
    return {
        "judge": "j",
        "labels": ["FAIL", "PASS"],
        "errors": 0,
        "input_tokens": 5,
        "output_tokens": 1,
        "cost": None,
        "rows": [
            {"human": h, "judge": j, "human_score": score[h], "judge_score": score[j], "model": m} for h, j, m in rows
        ],
    }


def test_corrected_score_uses_the_share_the_judge_graded_and_skips_check_errors():
    sessions = pd.DataFrame(
        [
            session("a", "i1", "PASSED", 1.0),
            session("a", "i2", "PASSED", 1.0),
            session("a", "i3", "FAILED", 0.0),
            session("a", "i4", None, 0.0),  # no parsable solution: an exact 0, never judged
            session("a", "i5", "ERROR", 0.0),  # a check error is no grade
        ]
    )
    labels = calibration([("PASS", "PASS", None), ("FAIL", "PASS", None), ("FAIL", "FAIL", None)])
    report = judge_report(sessions, labels)
    assert report is not None and report.judge == "j"
    (row,) = report.models
    assert row.n_items == 4 and row.share_judged == pytest.approx(0.75)
    expected = ppi_mean([1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], share=0.75)
    assert row.corrected_score == pytest.approx(expected.estimate)
    assert row.corrected_score == pytest.approx(0.5 - 0.75 / 3)
    assert (row.corrected_low, row.corrected_high) == (expected.low, expected.high)
    assert row.judge_score == pytest.approx(0.5)
    assert (row.judge_calls, row.judge_input_tokens, row.judge_cost) == (3, 30, 1.5)
    assert row.labels_from == "all" and row.n_labels == 3
    agree = report.agreement
    assert agree is not None and agree.accuracy == pytest.approx(2 / 3) and agree.confusion == [[1, 1], [0, 1]]
    text = "\n".join(judge_markdown(report))
    assert "accuracy 0.667" in text and "| `FAIL` | 1 | 1 |" in text and "0.250" in text


def test_a_model_with_enough_own_labels_uses_them():
    sessions = pd.DataFrame([session("a", f"i{k}", "PASSED", 1.0) for k in range(5)])
    own = [("FAIL", "PASS", "a")] * 20
    report = judge_report(sessions, calibration([*own, ("PASS", "PASS", "b"), ("PASS", "PASS", None)]))
    assert report is not None
    (row,) = report.models
    assert row.labels_from == "model" and row.n_labels == 20 and row.corrected_score == pytest.approx(0.0)


def test_no_judge_no_report_and_no_calibration_no_correction():
    plain = pd.DataFrame([{**session("a", "i1", "PASSED", 1.0), "metric": "exact_match"}])
    assert judge_report(plain, None) is None
    report = judge_report(pd.DataFrame([session("a", "i1", "PASSED", 1.0)]), None)
    assert report is not None and report.agreement is None
    assert report.models[0].corrected_score is None and report.models[0].labels_from == "none"
    assert "No calibration file" in "\n".join(judge_markdown(report))
