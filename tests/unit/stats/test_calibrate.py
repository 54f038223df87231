"""Calibration: a worked example by hand, bin edges, missing confidences, bad input."""

from __future__ import annotations

import pandas as pd
import pytest

from ape.tasks.stats.calibration import CalibrationReport, bin_index, bins_frame, calibration_by_model


def test_worked_example():
    # bins: 0.95 and 0.9 -> bin 9 (both right), 0.85 -> 8 (wrong), 0.6 -> 6 (right),
    # 0.55 -> 5 (wrong), 0.3 -> 3 (wrong); None is skipped and counted.
    # ECE = 2/6*|1 - 0.925| + 1/6*0.85 + 1/6*0.4 + 1/6*0.55 + 1/6*0.3 = 0.025 + 2.1/6 = 0.375
    # Brier = (0.05^2 + 0.1^2 + 0.85^2 + 0.4^2 + 0.55^2 + 0.3^2) / 6 = 1.2875 / 6
    report = CalibrationReport.from_predictions(
        [0.95, 0.9, 0.85, 0.6, 0.55, 0.3, None],
        [True, True, False, True, False, False, True],
    )
    assert report.n == 6 and report.missing == 1
    assert report.populated_bins == 5
    assert report.ece == pytest.approx(0.375)
    assert report.brier == pytest.approx(1.2875 / 6)
    assert len(report.bins) == 10
    top = report.bins[9]
    assert (top.count, top.accuracy, top.mean_confidence) == (2, 1.0, pytest.approx(0.925))
    assert (top.lower, top.upper) == (pytest.approx(0.9), pytest.approx(1.0))
    assert report.bins[8].accuracy == 0.0 and report.bins[8].mean_confidence == pytest.approx(0.85)
    empty = report.bins[0]
    assert empty.count == 0 and empty.accuracy is None and empty.mean_confidence is None
    assert [b.count for b in report.bins] == [0, 0, 0, 1, 0, 1, 1, 0, 1, 2]


def test_perfectly_calibrated_and_edges():
    report = CalibrationReport.from_predictions([1.0, 1.0, 0.0, 0.0], [1, 1, 0, 0])
    assert report.ece == pytest.approx(0.0) and report.brier == pytest.approx(0.0)
    assert report.bins[9].count == 2 and report.bins[0].count == 2
    assert bin_index(0.1, 10) == 1 and bin_index(0.0999, 10) == 0 and bin_index(1.0, 10) == 9


def test_all_missing_gives_no_numbers_but_counts():
    report = CalibrationReport.from_predictions([None, float("nan")], [True, False])
    assert report.n == 0 and report.missing == 2
    assert report.ece is None and report.brier is None and report.populated_bins == 0


def test_other_bin_counts():
    report = CalibrationReport.from_predictions([0.1, 0.6, 0.9], [0, 1, 1], n_bins=2)
    # bin 0: 0.1 wrong -> |0 - 0.1|; bin 1: 0.6, 0.9 both right -> |1 - 0.75|
    assert report.ece == pytest.approx(1 / 3 * 0.1 + 2 / 3 * 0.25)
    assert len(report.bins) == 2


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="outside"):
        CalibrationReport.from_predictions([1.2], [True])
    with pytest.raises(ValueError, match="2 confidences but 1"):
        CalibrationReport.from_predictions([0.1, 0.2], [True])
    with pytest.raises(ValueError, match="n_bins"):
        CalibrationReport.from_predictions([0.1], [True], n_bins=0)


def test_calibration_by_model_and_bins_frame():
    sessions = pd.DataFrame(
        {
            "model_id": ["a", "a", "b", "b"],
            "confidence": [0.9, None, 0.2, 0.4],
            "correct": [True, False, False, True],
        }
    )
    reports = calibration_by_model(sessions)
    assert set(reports) == {"a", "b"}
    assert reports["a"].n == 1 and reports["a"].missing == 1
    assert reports["a"].ece == pytest.approx(0.1)
    frame = bins_frame(reports)
    assert len(frame) == 20
    assert list(frame.columns) == ["model_id", "index", "lower", "upper", "count", "accuracy", "mean_confidence"]
    assert frame["count"].sum() == 3
    assert frame.loc[(frame.model_id == "b") & (frame["index"] == 4), "accuracy"].item() == 1.0


def test_cut_sessions_are_left_out_of_calibration_and_counted_apart():
    # "b" ran out of tokens twice, each time with a confident prefix: counted in, it would
    # look overconfident (two 0.95s that were "wrong") for what max_tokens did
    sessions = pd.DataFrame(
        {
            "model_id": ["b"] * 4,
            "confidence": [0.9, 0.2, 0.95, 0.95],
            "correct": [True, False, False, False],
            "outcome": ["SOLVED", "SOLVED", "TRUNCATED", "TRUNCATED"],
        }
    )
    report = calibration_by_model(sessions)["b"]
    finished = CalibrationReport.from_predictions([0.9, 0.2], [True, False])
    assert (report.n, report.missing, report.truncated) == (2, 0, 2)
    assert report.ece == pytest.approx(finished.ece) and report.brier == pytest.approx(finished.brier)
    assert report.brier == pytest.approx((0.1**2 + 0.2**2) / 2)  # counted in it would be 0.464
    assert calibration_by_model(sessions.drop(columns="outcome"))["b"].n == 4  # a table without outcomes


def test_the_calibration_table_shows_the_cut_sessions_only_when_there_are_some():
    from ape.schemas.report import Envelope
    from ape.tasks.report.markdown import calibration_table

    cut = CalibrationReport.from_predictions([0.9], [True])
    cut.truncated = 3
    lines = calibration_table(Envelope(calibration={"b": cut}))
    assert "Cut (left out)" in lines[0] and lines[-1].rstrip().endswith("| 3 |")
    assert (
        "Cut"
        not in calibration_table(Envelope(calibration={"b": CalibrationReport.from_predictions([0.9], [True])}))[0]
    )
