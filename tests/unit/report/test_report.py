"""The report over saved results.jsonl files: loading, Parquet, envelope, markdown, chart, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from ape.schemas.errors import ApeError
from ape.schemas.report import Envelope
from ape.schemas.results import (
    CheckResult,
    CheckStatus,
    ErrorInfo,
    Outcome,
    OutputBatch,
    SessionResult,
)
from ape.tasks.report.build import build_report
from ape.tasks.report.envelope import error_envelope, write_envelope
from ape.tasks.report.markdown import markdown_table
from ape.tasks.report.sessions_table import SESSIONS_SCHEMA, load_sessions
from tests.helpers.report_keys import REPORT_KEYS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def session(
    model_id: str,
    item_id: str,
    *,
    correct: bool,
    run_index: int = 0,
    outcome: Outcome = Outcome.SOLVED,
    confidence: float | None = None,
    category: str | None = None,
) -> SessionResult:
    solved = outcome is Outcome.SOLVED
    return SessionResult(
        item_id=item_id,
        run_index=run_index,
        model_id=model_id,
        outcome=outcome,
        solution={"answer": item_id} if solved else None,
        raw_output=f"answer {item_id}",
        error=ErrorInfo(type="TimeoutError", message="model timed out") if outcome is Outcome.ERROR else None,
        check=CheckResult(
            status=CheckStatus.PASSED if correct else CheckStatus.FAILED,
            score=1.0 if correct else 0.0,
            metadata={"metric": "exact_match"},
        )
        if solved
        else None,
        metric="exact_match",
        score=1.0 if correct and solved else 0.0,
        correct=correct and solved,
        confidence=confidence,
        input_tokens=20,
        output_tokens=5,
        steps=1,
        latency_s=0.25,
        category=category,
    )


def write_results(path: Path, batches: list[OutputBatch]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for batch in batches:
            handle.write(batch.model_dump_json() + "\n")
    return path


def batch(model_id: str, item_id: str, sessions: list[SessionResult]) -> OutputBatch:
    return OutputBatch(item_id=item_id, model_id=model_id, sessions=sessions)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """Two models in one run folder (one sub-folder each), six items, two categories.

    'rules' answers every item right and confidently; 'noisy' is overconfident and mostly
    wrong, never reports a confidence on one item and has one session per failure outcome.
    The first 'noisy' line for item 6 is replaced by a later line for the same item.
    """
    root = tmp_path / "output"
    categories = ["math", "math", "math", "text", "text", "text"]
    rules = [
        batch("rules", f"q{i}", [session("rules", f"q{i}", correct=True, confidence=0.9, category=categories[i - 1])])
        for i in range(1, 7)
    ]
    noisy = [
        batch("noisy", "q1", [session("noisy", "q1", correct=True, confidence=0.95, category="math")]),
        batch("noisy", "q2", [session("noisy", "q2", correct=False, confidence=0.9, category="math")]),
        batch(
            "noisy",
            "q3",
            [session("noisy", "q3", correct=False, outcome=Outcome.PARSING_FAILED, confidence=0.8, category="math")],
        ),
        batch("noisy", "q4", [session("noisy", "q4", correct=False, outcome=Outcome.GAVE_UP, category="text")]),
        batch(
            "noisy",
            "q5",
            [session("noisy", "q5", correct=False, outcome=Outcome.ERROR, confidence=0.99, category="text")],
        ),
        batch("noisy", "q6", [session("noisy", "q6", correct=True, confidence=0.1, category="text")]),
        batch("noisy", "q6", [session("noisy", "q6", correct=False, confidence=0.85, category="text")]),
    ]
    write_results(root / "rules" / "results.jsonl", rules)
    write_results(root / "noisy" / "results.jsonl", noisy)
    (root / "noisy" / "metadata.json").write_text("{}")
    return root


# --- loading -----------------------------------------------------------------------------------


def test_load_sessions_flattens_and_the_last_line_wins(run_dir: Path):
    sessions = load_sessions([run_dir])
    assert list(sessions.columns) == SESSIONS_SCHEMA.names
    assert len(sessions) == 12
    assert sorted(sessions.model_id.unique()) == ["noisy", "rules"]
    q6 = sessions[(sessions.model_id == "noisy") & (sessions.item_id == "q6")]
    assert len(q6) == 1 and q6.confidence.item() == pytest.approx(0.85)
    assert q6.line.item() == 7
    solved = sessions[(sessions.model_id == "rules") & (sessions.item_id == "q1")].iloc[0]
    assert solved.check_status == "PASSED" and json.loads(solved.solution) == {"answer": "q1"}
    assert json.loads(solved.check_metadata) == {"metric": "exact_match"}
    errored = sessions[sessions.outcome == "ERROR"].iloc[0]
    assert errored.error_type == "TimeoutError" and pd.isna(errored.check_status)
    assert str(sessions.saved_at.dtype).startswith("datetime64")


def test_load_sessions_accepts_a_file_and_skips_a_half_written_last_line(tmp_path: Path):
    path = write_results(tmp_path / "results.jsonl", [batch("m", "a", [session("m", "a", correct=True)])])
    with path.open("a") as handle:
        handle.write('{"item_id": "b", "model_id": "m", "sess')
    sessions = load_sessions([path])
    assert sessions.item_id.tolist() == ["a"]


def test_bad_line_is_skipped_with_a_warning_naming_file_and_line(tmp_path: Path, ape_log):
    path = write_results(tmp_path / "run" / "results.jsonl", [batch("m", "a", [session("m", "a", correct=True)])])
    with path.open("a") as handle:
        handle.write('{"item_id": "b"}\n')
        handle.write(batch("m", "c", [session("m", "c", correct=True)]).model_dump_json() + "\n")
    sessions = load_sessions([tmp_path / "run"])
    # the same reader as a resumed run: the good lines count, the damaged one does not
    assert sessions.item_id.tolist() == ["a", "c"]
    assert any("results.jsonl:2" in r.getMessage() and "damaged" in r.getMessage() for r in ape_log.records)


def test_missing_folder_and_no_results_are_errors(tmp_path: Path):
    with pytest.raises(ApeError, match="no such folder"):
        load_sessions([tmp_path / "nowhere"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ApeError, match="no results.jsonl found"):
        load_sessions([tmp_path / "empty"])


# --- the whole report ------------------------------------------------------------------------


def test_build_report_writes_every_output(run_dir: Path, tmp_path: Path):
    report_dir = tmp_path / "report"
    envelope = build_report([run_dir], report_dir, wall_seconds=1.5, extra_summary={"benchmark": "demo"})
    assert envelope.ok
    for name in (
        "sessions.parquet",
        "leaderboard.parquet",
        "categories.parquet",
        "pairwise.parquet",
        "calibration_bins.parquet",
        "report.json",
        "leaderboard.md",
        "summary.png",
    ):
        assert (report_dir / name).stat().st_size > 0, name
    assert (report_dir / "summary.png").read_bytes()[:8] == PNG_SIGNATURE

    board = envelope.leaderboard
    assert [row.model_id for row in board] == ["rules", "noisy"]
    rules, noisy = board
    assert rules.mean_score == pytest.approx(1.0) and noisy.mean_score == pytest.approx(1 / 6)
    assert noisy.outcomes.model_dump() == {"SOLVED": 3, "PARSING_FAILED": 1, "GAVE_UP": 1, "TRUNCATED": 0, "ERROR": 1}
    assert noisy.by_category["math"].mean_score == pytest.approx(1 / 3)
    assert noisy.by_category["text"].n_items == 3
    assert rules.pass_at_k == {}
    assert rules.mean_latency_s == pytest.approx(0.25)

    (pair,) = envelope.pairwise
    assert (pair.model_a, pair.model_b, pair.n_items) == ("rules", "noisy", 6)
    assert (pair.wins, pair.ties, pair.losses, pair.a_only, pair.b_only) == (5, 1, 0, 5, 0)
    assert pair.test == "exact" and pair.p_value == pytest.approx(2 / 32)

    calibration = envelope.calibration["noisy"]
    assert calibration.n == 5 and calibration.missing == 1
    # confidences 0.95 (right), 0.9, 0.8, 0.99, 0.85 (wrong)
    expected_brier = (0.05**2 + 0.9**2 + 0.8**2 + 0.99**2 + 0.85**2) / 5
    assert calibration.brier == pytest.approx(expected_brier)
    assert envelope.calibration["rules"].ece == pytest.approx(0.1)

    summary = envelope.summary
    assert (summary.tasks, summary.models, summary.sessions) == (6, 2, 12)
    assert summary.wall_seconds == 1.5 and summary.runs_per_data == 1
    assert summary.model_extra == {"benchmark": "demo"}
    assert len(summary.sources) == 2

    on_disk = Envelope.model_validate_json((report_dir / "report.json").read_text())
    assert on_disk == envelope
    raw = json.loads((report_dir / "report.json").read_text())
    assert set(raw) == REPORT_KEYS
    assert raw["judge"] is None  # only the judge checker adds it
    assert raw["choices"] == {}  # only [choices] runs fill it
    assert set(raw["health"]) == {row["model_id"] for row in raw["leaderboard"]}
    assert raw["error"] is None and raw["summary"]["benchmark"] == "demo"
    assert set(raw["calibration"]["noisy"]) >= {"ece", "brier", "populated_bins", "n", "missing", "bins"}


def test_parquet_schemas(run_dir: Path, tmp_path: Path):
    report_dir = tmp_path / "report"
    build_report([run_dir], report_dir)
    sessions = pq.read_schema(report_dir / "sessions.parquet")
    assert sessions.names == SESSIONS_SCHEMA.names
    assert str(sessions.field("token_count").type) == "int64"
    leaderboard = pq.read_table(report_dir / "leaderboard.parquet").to_pandas()
    assert leaderboard.model_id.tolist() == ["rules", "noisy"]
    assert str(leaderboard["rank"].dtype) == "int64"
    pairwise = pq.read_schema(report_dir / "pairwise.parquet")
    assert str(pairwise.field("wins").type) == "int64" and str(pairwise.field("test").type) == "string"
    bins = pq.read_table(report_dir / "calibration_bins.parquet").to_pandas()
    assert len(bins) == 20 and bins["count"].sum() == 11
    categories = pq.read_table(report_dir / "categories.parquet").to_pandas()
    assert set(categories.category) == {"math", "text"}


def test_single_model_report_has_empty_pairwise(tmp_path: Path):
    folder = tmp_path / "out"
    write_results(
        folder / "results.jsonl",
        [
            batch(
                "solo",
                "a",
                [session("solo", "a", correct=True, run_index=0), session("solo", "a", correct=False, run_index=1)],
            ),
            batch(
                "solo",
                "b",
                [session("solo", "b", correct=False, run_index=0), session("solo", "b", correct=False, run_index=1)],
            ),
        ],
    )
    envelope = build_report([folder], tmp_path / "report")
    assert envelope.pairwise == []
    assert envelope.leaderboard[0].pass_at_k == {"1": pytest.approx(0.25), "2": pytest.approx(0.5)}
    assert envelope.calibration["solo"].n == 0 and envelope.calibration["solo"].missing == 4
    assert pq.read_table(tmp_path / "report" / "pairwise.parquet").num_rows == 0
    assert (tmp_path / "report" / "summary.png").read_bytes()[:8] == PNG_SIGNATURE


# --- markdown ---------------------------------------------------------------------------------


def test_markdown_table(run_dir: Path, tmp_path: Path):
    envelope = build_report([run_dir], tmp_path / "report", wall_seconds=2.0)
    text = markdown_table(envelope)
    assert text == (tmp_path / "report" / "leaderboard.md").read_text()
    lines = text.splitlines()
    header = lines.index("## Leaderboard") + 2
    assert lines[header].startswith("| Rank (range) | Group | Model | Items | Mean score [95% CI] | CI method |")
    # 5 items only A passed, none only B: exact McNemar p = 2/32 = 0.0625, not significant,
    # so the two models share a group and either could rank first
    assert lines[header + 2].startswith("| 1 (1-2) | 1 | `rules` | 6 | 1.000 [")
    assert lines[header + 3].startswith("| 2 (1-2) | 1 | `noisy` | 6 | 0.167 [")
    assert "| wilson |" in lines[header + 2]
    assert "## Pairwise" in lines and "## Calibration" in lines
    assert "| `rules` | `noisy` | 6 |" in text
    assert "6 tasks, 2 models, 12 sessions, 2.0 s" in lines
    assert lines[-1].startswith("Provenance: APE ")


def test_markdown_keeps_pipes_inside_their_cell_and_shows_errors():
    envelope = error_envelope("ApeError", "broken | badly", details={"stage": "x"})
    text = markdown_table(envelope)
    assert "**Report failed** (ApeError): `broken \u00a6 badly`" in text
    assert "## Leaderboard" not in text


# --- failures ---------------------------------------------------------------------------------


def test_failure_writes_a_structured_error_and_raises(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    report_dir = tmp_path / "report"
    with pytest.raises(ApeError):
        build_report([tmp_path / "empty"], report_dir)
    raw = json.loads((report_dir / "report.json").read_text())
    assert raw["error"]["type"] == "ApeError"
    assert "no results.jsonl" in raw["error"]["message"]
    assert raw["error"]["details"]["stage"] == "reading results"
    assert raw["leaderboard"] == [] and raw["summary"]["tasks"] == 0


def test_failure_can_return_the_error_envelope(run_dir: Path, tmp_path: Path):
    envelope = build_report([run_dir], tmp_path / "report", extra_summary={"tasks": 99}, raise_on_error=False)
    assert not envelope.ok and envelope.error.type == "ValueError"
    assert "tasks" in envelope.error.message


def test_error_envelope_keeps_partial_parts_and_writes_atomically(tmp_path: Path):
    envelope = error_envelope(
        "RuntimeError",
        "rule-based model did not rank first",
        details={"models": ["a"]},
        summary={"tasks": 10, "models": 3},
    )
    path = write_envelope(tmp_path / "deep" / "report.json", envelope)
    raw = json.loads(path.read_text())
    assert raw["error"] == {
        "type": "RuntimeError",
        "message": "rule-based model did not rank first",
        "details": {"models": ["a"]},
    }
    assert raw["summary"]["tasks"] == 10
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]


def test_an_empty_results_file_gives_an_empty_but_valid_report(tmp_path: Path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.jsonl").write_text("")
    envelope = build_report([tmp_path / "out"], tmp_path / "report")
    assert envelope.ok and envelope.leaderboard == [] and envelope.summary.sessions == 0
    assert pq.read_table(tmp_path / "report" / "leaderboard.parquet").num_rows == 0
    assert (tmp_path / "report" / "summary.png").read_bytes()[:8] == PNG_SIGNATURE
