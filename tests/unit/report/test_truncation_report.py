"""Cut-off answers in the report: counted apart per model, marked by run health when frequent,
noted by the history comparison, and a larger budget may resume a run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from ape.flows.resume import budget_raised, refuse_mixing
from ape.schemas.report import Envelope, RegressionRow
from ape.schemas.results import CheckResult, CheckStatus, Outcome, OutputBatch, SessionResult
from ape.tasks.after_run.join_history import with_truncations
from ape.tasks.report.build import build_report
from ape.tasks.report.health import identical_answer, model_health, suspect_lines, truncation_lines

N = 10


def answered(model_id: str, i: int, *, cut: bool) -> SessionResult:
    """A session that ended TRUNCATED (as the solver leaves one: unchecked, score 0) or a right answer."""
    if cut:
        return SessionResult(
            item_id=f"i{i}",
            run_index=0,
            model_id=model_id,
            outcome=Outcome.TRUNCATED,
            raw_output="The answer",
            stop_reason="length",
            steps=1,
        )
    return SessionResult(
        item_id=f"i{i}",
        run_index=0,
        model_id=model_id,
        outcome=Outcome.SOLVED,
        solution=i,
        raw_output=f"The answer is {i}",
        check=CheckResult(status=CheckStatus.PASSED, score=1.0),
        metric="exact_match",
        score=1.0,
        correct=True,
        stop_reason="stop",
        steps=1,
    )


def write_run(folder: Path, cut: dict[str, int]) -> Path:
    """Per model N sessions, the first ``cut[model]`` of them cut at the token limit."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "results.jsonl").open("w", encoding="utf-8") as handle:
        for model_id, count in cut.items():
            for i in range(N):
                batch = OutputBatch(item_id=f"i{i}", model_id=model_id, sessions=[answered(model_id, i, cut=i < count)])
                handle.write(batch.model_dump_json() + "\n")
    return folder


def test_truncations_are_counted_per_model_in_report_json_leaderboard_md_and_parquet(tmp_path: Path) -> None:
    out = write_run(tmp_path / "out", {"roomy": 0, "tight": 4, "once": 1})
    envelope = build_report([out], tmp_path / "report")
    rows = {row.model_id: row for row in envelope.leaderboard}
    assert {m: r.outcomes.TRUNCATED for m, r in rows.items()} == {"roomy": 0, "tight": 4, "once": 1}
    assert rows["tight"].pass_rate == 0.6  # a cut answer counts as not correct for accuracy
    raw = json.loads((tmp_path / "report" / "report.json").read_text())
    Envelope.model_validate(raw)  # extra="forbid" holds for the new fields
    outcomes = {r["model_id"]: r["outcomes"] for r in raw["leaderboard"]}
    assert outcomes["tight"] == {"SOLVED": 6, "PARSING_FAILED": 0, "GAVE_UP": 0, "TRUNCATED": 4, "ERROR": 0}
    health = raw["health"]
    assert health["tight"]["truncating"] is True and health["tight"]["truncated"] == 4
    assert health["tight"]["truncated_share"] == 0.4
    assert health["once"]["truncating"] is False  # one long answer is an item, not a budget
    assert health["tight"]["suspect"] is False  # a budget, not a broken measurement: the run passes

    board = pq.read_table(tmp_path / "report" / "leaderboard.parquet").to_pandas()
    assert dict(zip(board["model_id"], board["truncated"])) == {"roomy": 0, "tight": 4, "once": 1}
    assert str(board["truncated"].dtype) == "int64"
    sessions = pq.read_table(tmp_path / "report" / "sessions.parquet").to_pandas()
    assert (sessions["outcome"] == "TRUNCATED").sum() == 5

    text = (tmp_path / "report" / "leaderboard.md").read_text()
    table = text.split("## Leaderboard")[1].split("##")[0].strip().splitlines()
    header = [cell.strip() for cell in table[0].split("|")]
    column = header.index("Truncated")
    assert header[column - 1] == "Gave up" and header[column + 1] == "Error"
    cells = {line.split("|")[3].strip(): line.split("|")[column].strip() for line in table[2:] if line.startswith("| ")}
    assert cells == {"`roomy`": "0", "`tight`": "4", "`once`": "1"}
    line = next(line for line in text.splitlines() if "cut at the token limit in" in line)
    assert line.startswith("**Run health:** answers of model `tight` were cut at the token limit in 4 of 10")
    assert "raise [model] max_tokens" in line and "ape retry --outcomes TRUNCATED" in line
    assert "model `once`" not in text.split("## Leaderboard")[0]


def test_a_run_without_truncations_shows_no_truncated_column(tmp_path: Path) -> None:
    out = write_run(tmp_path / "out", {"roomy": 0})
    envelope = build_report([out], tmp_path / "report")
    assert envelope.leaderboard[0].outcomes.TRUNCATED == 0
    text = (tmp_path / "report" / "leaderboard.md").read_text()
    assert "Truncated" not in text and "token limit" not in text


def health_frame(cut: int, total: int = N, answer: str = "") -> pd.DataFrame:
    rows = [
        {
            "model_id": "m",
            "item_id": f"i{i}",
            "outcome": "TRUNCATED" if i < cut else "SOLVED",
            "correct": i >= cut,
            "check_status": None if i < cut else "PASSED",
            "check_error_type": None,
            "check_error_message": None,
            "check_metadata": None,
            "error_type": None,
            "error_message": None,
            "raw_output": answer if i < cut else f"The answer is {i}",
            "solution": None,
            "prompt_hash": f"{i:016x}",
        }
        for i in range(total)
    ]
    return pd.DataFrame(rows)


def test_a_model_that_spends_every_budget_thinking_is_marked_truncating_not_suspect() -> None:
    sessions = health_frame(cut=N, answer="")  # the same empty answer everywhere
    assert identical_answer(sessions).empty  # cut answers are no "identical answer" signature
    entry = model_health(sessions)
    assert entry.truncating and entry.truncated == N and not entry.suspect
    assert suspect_lines({"m": entry}) == []
    assert truncation_lines({"m": entry}) == [
        "answers of model 'm' were cut at the token limit in 10 of 10 sessions (100%, at least 10% marks a model): "
        "raise [model] max_tokens, then ape retry --outcomes TRUNCATED"
    ]
    assert not model_health(health_frame(cut=1, total=5)).truncating  # one cut answer is not a habit
    assert not model_health(health_frame(cut=0)).truncating


def verdict(**changes: object) -> RegressionRow:
    row = {
        "model_id": "m",
        "run_id": "r3",
        "against": "history",
        "reference_run_id": "r2",
        "reference_from": "r1",
        "verdict": "regressed",
        "n_items": 10,
        "mean_diff": -0.3,
    }
    row.update(changes)
    return RegressionRow.model_validate(row)


def history_runs(truncated: list[int | None]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": [f"r{i + 1}" for i in range(len(truncated))],
            "model_id": "m",
            "finished_at": pd.date_range("2026-01-01", periods=len(truncated), freq="D", tz="UTC"),
            "n_sessions": 10,
            "truncated": pd.array(truncated, dtype="Int64"),
        }
    )


def test_a_regression_that_coincides_with_more_truncations_says_so() -> None:
    row = with_truncations(verdict(), 0.3, history_runs([0, 0]))
    assert row.verdict == "regressed"  # the detector's verdict stands; the note says what moved with it
    assert (row.truncated_share, row.reference_truncated_share) == (0.3, 0.0)
    assert row.note is not None and "truncations moved from 0% to 30% of sessions" in row.note
    assert "token budget, not ability" in row.note
    same = with_truncations(verdict(reference_from="r1", reference_run_id="r2"), 0.1, history_runs([1, 1]))
    assert same.note is None and same.reference_truncated_share == 0.1
    baseline = with_truncations(
        verdict(against="baseline", reference_from=None, reference_run_id="r1"), 0.0, history_runs([5, 0])
    )
    assert baseline.reference_truncated_share == 0.5 and "from 50% to 0%" in (baseline.note or "")
    older = with_truncations(verdict(), 0.3, history_runs([None, 0]))  # a run recorded before truncations were
    assert older.reference_truncated_share is None and older.note is None


def test_a_larger_max_tokens_may_resume_a_run_and_a_smaller_one_may_not(tmp_path: Path) -> None:
    def prints(model: str, budget: int | None) -> dict:
        return {
            "generation": {"prompt": "p", "model": f"{model}-{budget}", "data": "d", "solver": "s"},
            "budget": {"model": model, "max_tokens": budget},
        }

    assert budget_raised(prints("a", 64), prints("a", 256)) == (64, 256)
    refuse_mixing(prints("a", 64), prints("a", 256), tmp_path)  # no error
    for now in (prints("a", 32), prints("a", None), prints("b", 256)):
        assert budget_raised(prints("a", 64), now) is None
        try:
            refuse_mixing(prints("a", 64), now, tmp_path)
        except Exception as exc:  # noqa: BLE001 - the ApeError names the changed part
            assert "different model" in str(exc)
        else:
            raise AssertionError(f"resuming with {now['budget']} should be refused")
    older = {"generation": prints("a", 64)["generation"]}  # metadata.json of a run before budgets were recorded
    assert budget_raised(older, prints("a", 256)) is None
