"""Agent runs in the report: sessions that ended at a limit are counted per reason and mark a
model when they are most of its sessions; infrastructure errors are counted apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ape.schemas.report import Envelope
from ape.schemas.results import CheckResult, CheckStatus, Outcome, OutputBatch, SessionResult
from ape.tasks.report.build import build_report
from ape.tasks.report.health import limit_lines, model_health

N = 10


def session(model_id: str, i: int, end_reason: str | None) -> SessionResult:
    """A graded agent session (passed on even items), stopped at ``end_reason`` or finished."""
    passed = i % 2 == 0
    return SessionResult(
        item_id=f"i{i}",
        run_index=0,
        model_id=model_id,
        outcome=Outcome.SOLVED,
        solution="done",
        raw_output=f"done {i}",
        check=CheckResult(status=CheckStatus.PASSED if passed else CheckStatus.FAILED, score=float(passed)),
        metric="sandbox_state",
        score=float(passed),
        correct=passed,
        steps=3,
        end_reason=end_reason,
    )


def write_run(folder: Path, reasons: dict[str, list[str | None]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "results.jsonl").open("w", encoding="utf-8") as handle:
        for model_id, ends in reasons.items():
            for i, end in enumerate(ends):
                batch = OutputBatch(item_id=f"i{i}", model_id=model_id, sessions=[session(model_id, i, end)])
                handle.write(batch.model_dump_json() + "\n")
    return folder


def test_a_model_whose_sessions_mostly_end_at_a_limit_is_flagged_with_what_to_raise(tmp_path: Path) -> None:
    stopped = ["step_limit"] * 6 + ["sandbox_time_limit"] * 3 + [None]
    fine = ["step_limit"] * 2 + [None] * 8
    run = write_run(tmp_path / "run", {"stopped": stopped, "fine": fine})
    envelope = build_report([run], tmp_path / "report")

    saved = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    health = saved["health"]
    assert health["stopped"]["limited"] == {"sandbox_time_limit": 3, "step_limit": 6}
    assert health["stopped"]["limited_share"] == 0.9 and health["stopped"]["limiting"] is True
    assert health["fine"]["limited"] == {"step_limit": 2} and health["fine"]["limiting"] is False
    # a stopped session is graded on its state, so it is not a suspect result
    assert health["stopped"]["suspect"] is False

    lines = limit_lines(Envelope.model_validate(saved).health)
    assert len(lines) == 1
    line = lines[0]
    assert "'stopped'" in line and "9 of 10" in line
    assert "step_limit in 6 (raise [solver] max_steps)" in line
    assert "sandbox_time_limit in 3 (raise [sandbox] session_timeout_s" in line
    board = (tmp_path / "report" / "leaderboard.md").read_text(encoding="utf-8")
    assert "**Run health:** sessions of model" in board and "[solver] max_steps" in board
    assert envelope.health["stopped"].limiting


def test_the_limit_mark_follows_the_runs_health_thresholds(tmp_path: Path) -> None:
    import pandas as pd

    def frame(ends: list[str | None]) -> pd.DataFrame:
        rows = [session("m", i, end) for i, end in enumerate(ends)]
        return pd.DataFrame(
            {
                "model_id": [r.model_id for r in rows],
                "item_id": [r.item_id for r in rows],
                "outcome": ["SOLVED"] * len(rows),
                "check_status": ["PASSED"] * len(rows),
                "check_metadata": [None] * len(rows),
                "correct": [r.correct for r in rows],
                "raw_output": [r.raw_output for r in rows],
                "solution": [r.solution for r in rows],
                "error_type": [None] * len(rows),
                "error_message": [None] * len(rows),
                "check_error_type": [None] * len(rows),
                "check_error_message": [None] * len(rows),
                "end_reason": ends,
            }
        )

    seven = ["step_limit"] * 7 + [None] * 3
    assert not model_health(frame(seven)).limiting  # 70% < the default 80%
    assert model_health(frame(seven), share=0.7).limiting
    assert not model_health(frame(["step_limit"] * 4)).limiting  # 4 sessions < min_sessions 5
    assert model_health(frame(["step_limit"] * 4), min_sessions=4).limiting
    assert model_health(frame([None] * 10)).limited == {}


def test_the_sandboxs_limits_are_recorded_spelled_out_in_the_provenance(tmp_path: Path) -> None:
    """The limits are part of the benchmark's definition: a reader of report.json sees each
    one by name, not only a hash of a config they may not have."""
    from ape.tasks.report.provenance import run_provenance
    from ape.tasks.storage.config_file import load_config
    from tests.helpers.paths import REPO_ROOT

    config = load_config(REPO_ROOT / "examples" / "agent" / "config.toml", {"sandbox.cpu_seconds": 7})
    recorded = run_provenance(config)["agent_sandbox"]
    assert recorded == {
        "isolation": "bwrap",
        "command_timeout_s": 20.0,
        "session_timeout_s": 120.0,
        "cpu_seconds": 7,
        "memory_bytes": 2 * 1024**3,
        "processes": 64,
        "file_bytes": 64 * 1024**2,
        "disk_bytes": None,
        "output_bytes": 16_000,
        "allow_hosts": [],
        "network": "none",
    }
    plain = load_config(REPO_ROOT / "examples" / "agent" / "config.toml")
    assert run_provenance(plain.model_copy(update={"sandbox": None}))["agent_sandbox"] is None
    limited = load_config(REPO_ROOT / "examples" / "agent" / "config.toml", {"solver.max_session_tokens": 9000})
    assert run_provenance(limited)["session_limits"] == {"max_steps": 6, "max_session_tokens": 9000}
    assert run_provenance(plain)["session_limits"] == {"max_steps": 6, "max_session_tokens": None}


def test_a_model_that_changed_nothing_is_not_suspect_of_a_harness_that_never_started(tmp_path: Path) -> None:
    """Every item's test fails the same way when the agent changed nothing (and it says "done"
    each time): that is the grade, not a checker that never ran nor an answer repeated, so run
    health does not mark the results suspect (which would fail the run without
    accept_unhealthy). code_exec's own early exit is still caught."""
    idle = {"exit_code": 1, "timed_out": False, "killed": None, "stdout": "", "stderr": "AssertionError\n"}
    harness = {"exit_code": 1, "timed_out": False, "passed": 0, "total": 3, "stderr_tail": "python: not found\n"}
    folder = tmp_path / "run"
    folder.mkdir()
    with (folder / "results.jsonl").open("w", encoding="utf-8") as handle:
        for model_id, meta, metric in (("idle", idle, "sandbox_state"), ("broken", harness, "code_exec")):
            for i in range(N):
                changes = {"item_id": f"i{i}", "raw_output": "done", "metric": metric}
                item = session(model_id, 1, None).model_copy(update=changes)
                item.check = CheckResult(status=CheckStatus.FAILED, score=0.0, metadata=meta)
                item.correct, item.score = False, 0.0
                batch = OutputBatch(item_id=item.item_id, model_id=model_id, sessions=[item])
                handle.write(batch.model_dump_json() + "\n")
    build_report([folder], tmp_path / "report")
    health = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))["health"]
    assert health["idle"]["suspect"] is False and health["idle"]["kind"] is None
    assert health["broken"]["suspect"] is True and health["broken"]["kind"] == "exit before tests"


def test_the_leaderboard_shows_pass_hat_k_from_k_2_and_report_json_keeps_every_k(tmp_path: Path) -> None:
    """pass^1 is pass@1 (both the mean of c/n): the leaderboard shows it once, as @1; the
    pass^k cell starts at k = 2. report.json keeps pass^1 with its interval."""
    folder = tmp_path / "run"
    folder.mkdir()
    with (folder / "results.jsonl").open("w", encoding="utf-8") as handle:
        for i in range(N):
            runs = []
            for run in range(3):
                passed = run < i % 4  # items with 0, 1, 2 or 3 of 3 runs passed
                runs.append(
                    session("m", i, None).model_copy(
                        update={
                            "run_index": run,
                            "correct": passed,
                            "score": float(passed),
                            "check": CheckResult(status=CheckStatus.PASSED if passed else CheckStatus.FAILED),
                        }
                    )
                )
            handle.write(OutputBatch(item_id=f"i{i}", model_id="m", sessions=runs).model_dump_json() + "\n")
    build_report([folder], tmp_path / "report")
    board = (tmp_path / "report" / "leaderboard.md").read_text(encoding="utf-8")
    row = next(line for line in board.splitlines() if "| `m` |" in line)
    assert "@1 " in row and "^2 " in row and "^3 " in row and "^1 " not in row
    saved = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))["leaderboard"][0]
    assert sorted(saved["pass_hat_k"]) == ["1", "2", "3"]
    assert saved["pass_hat_k"]["1"][0] == pytest.approx(saved["pass_at_k"]["1"])
