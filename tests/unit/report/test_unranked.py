"""A model whose every session errored has no result: listed apart, never ranked.

Before, a dead endpoint's model sat on the leaderboard with 0.000 [0.000, 0.161] and in a
tie group with real models; now it is in ``unranked`` (report.json, leaderboard.md) with
its error, and the ranks, groups and pairwise rows are the ones of the other models alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ape.schemas.report import Envelope, UnrankedRow
from ape.schemas.results import CheckResult, CheckStatus, ErrorInfo, Outcome, OutputBatch, SessionResult
from ape.tasks.report.build import build_report
from ape.tasks.report.markdown import markdown_table
from ape.tasks.report.sessions_table import load_sessions
from ape.tasks.report.unranked import split_unranked
from ape.tasks.stats.aggregate import aggregate, pairwise_diffs, rank_intervals

DEAD_ERROR = ErrorInfo(
    type="OpenAIConnectionError",
    message="Connection error. (endpoint POST http://127.0.0.1:9/v1/chat/completions: connection refused)",
)


def _session(
    model: str, item: str, run: int, *, correct: bool = False, error: ErrorInfo | None = None
) -> SessionResult:
    if error is not None:
        return SessionResult(item_id=item, run_index=run, model_id=model, outcome=Outcome.ERROR, error=error)
    return SessionResult(
        item_id=item,
        run_index=run,
        model_id=model,
        outcome=Outcome.SOLVED,
        solution={"answer": item},
        check=CheckResult(status=CheckStatus.PASSED if correct else CheckStatus.FAILED, score=float(correct)),
        score=float(correct),
        correct=correct,
    )


def _write(folder: Path, model: str, sessions_of: dict[str, list[SessionResult]]) -> None:
    (folder / model).mkdir(parents=True)
    with (folder / model / "results.jsonl").open("w", encoding="utf-8") as handle:
        for item, sessions in sessions_of.items():
            handle.write(OutputBatch(item_id=item, model_id=model, sessions=sessions).model_dump_json() + "\n")


def _three_models(folder: Path, n: int = 8) -> Path:
    """'strong' passes every item, 'weak' passes one (both score 0 on some items, like a
    dead model would), 'dead' errored on every session (two kinds of error)."""
    items = [f"q{i}" for i in range(n)]
    _write(folder, "strong", {i: [_session("strong", i, r, correct=True) for r in range(2)] for i in items})
    _write(folder, "weak", {i: [_session("weak", i, r, correct=i == "q0") for r in range(2)] for i in items})
    other = ErrorInfo(type="OpenAIConnectionError", message="Connection error. (endpoint ...: reset)")
    dead = {i: [_session("dead", i, r, error=DEAD_ERROR if i != "q7" else other) for r in range(2)] for i in items}
    _write(folder, "dead", dead)
    return folder


def test_split_unranked_takes_out_only_models_whose_every_session_errored(tmp_path: Path) -> None:
    sessions = load_sessions([_three_models(tmp_path / "out")])
    ranked, unranked = split_unranked(sessions)
    assert sorted(ranked["model_id"].unique()) == ["strong", "weak"]
    assert unranked == [
        UnrankedRow(
            model_id="dead",
            n_items=8,
            n_sessions=16,
            error=f"OpenAIConnectionError: {DEAD_ERROR.message}",
            error_sessions=14,
            distinct_errors=2,
        )
    ]


def test_a_model_with_one_answer_among_its_errors_stays_ranked() -> None:
    rows = [
        {"model_id": "m", "item_id": "a", "score": 0.0, "correct": False, "outcome": "ERROR"},
        {"model_id": "m", "item_id": "b", "score": 0.0, "correct": False, "outcome": "SOLVED"},
    ]
    ranked, unranked = split_unranked(pd.DataFrame(rows))
    assert unranked == [] and len(ranked) == 2


def test_the_others_ranks_groups_and_pairs_are_computed_without_the_dead_model(tmp_path: Path) -> None:
    out = _three_models(tmp_path / "out")
    envelope = build_report([out], tmp_path / "report")

    assert [row.model_id for row in envelope.leaderboard] == ["strong", "weak"]
    assert [row.model_id for row in envelope.unranked] == ["dead"]
    assert all("dead" not in (p.model_a, p.model_b) for p in envelope.pairwise)
    assert len(envelope.pairwise) == 1
    assert "dead" not in envelope.calibration
    # the same numbers as a report of the two ranked models alone
    alone = load_sessions([out])
    alone = alone[alone["model_id"] != "dead"]
    expected = rank_intervals(aggregate(alone), pairwise_diffs(alone))
    got = {(r.model_id, r.rank, r.rank_low, r.rank_high, r.tie_group) for r in envelope.leaderboard}
    want = {
        (r["model_id"], r["rank"], r["rank_low"], r["rank_high"], r["tie_group"]) for r in expected.to_dict("records")
    }
    assert got == want
    # with the dead model ranked (as before) the rank ranges would span three places
    everything = load_sessions([out])
    before = rank_intervals(aggregate(everything), pairwise_diffs(everything))
    assert before["rank_high"].max() == 3 and max(r.rank_high or 0 for r in envelope.leaderboard) == 2

    written = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [row["model_id"] for row in written["unranked"]] == ["dead"]
    assert "http://127.0.0.1:9/v1/chat/completions" in written["unranked"][0]["error"]
    board = pd.read_parquet(tmp_path / "report" / "leaderboard.parquet")
    assert sorted(board["model_id"]) == ["strong", "weak"]


def test_markdown_lists_the_dead_model_apart_with_its_error(tmp_path: Path) -> None:
    envelope = build_report([_three_models(tmp_path / "out")], tmp_path / "report")
    text = markdown_table(envelope)
    board, _, rest = text.partition("## No result (not ranked)")
    assert rest, text
    assert "`dead`" not in board.split("## Leaderboard", 1)[1]  # not a row of the ranked table
    assert "`dead`" in rest and "http://127.0.0.1:9/v1/chat/completions" in rest
    assert "(14), and 1 other error(s)" in rest
    assert "suspect results for model `dead`" not in text  # its own section says it


def test_an_old_report_without_unranked_still_reads() -> None:
    assert Envelope.model_validate({"leaderboard": []}).unranked == []
