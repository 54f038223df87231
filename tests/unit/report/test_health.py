"""Run health: one non-answer signature on most sessions makes a model's results suspect."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from ape.schemas.report import Envelope
from ape.tasks.common.prompt_hash import EMPTY_PROMPT_HASH, prompt_hash
from ape.tasks.report.health import model_health, run_health, suspect_lines
from ape.tasks.report.markdown import markdown_table

N = 10


def session(i: int, **changes) -> dict:
    """One session of model 'm' on item i: a genuine wrong answer unless ``changes`` say otherwise."""
    row = {
        "model_id": "m",
        "item_id": f"i{i}",
        "run_index": 0,
        "outcome": "SOLVED",
        "error_type": None,
        "error_message": None,
        "check_status": "FAILED",
        "check_error_type": None,
        "check_error_message": None,
        "check_metadata": None,
        "correct": False,
        "raw_output": f"answer {i}",
        "solution": json.dumps(f"answer {i}"),
        "prompt_hash": prompt_hash(f"question {i}"),
    }
    row.update(changes)
    return row


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def code_meta(**fields) -> str:
    meta = {"metric": "code_exec", "passed": 0, "total": 3, "failures": [], "timed_out": False, "exit_code": None}
    meta.update(fields)
    return json.dumps(meta)


def test_the_same_model_error_everywhere_is_suspect():
    rows = [
        session(i, outcome="ERROR", error_type="ConnectionError", error_message="endpoint down", raw_output=None)
        for i in range(N)
    ]
    entry = model_health(frame(rows))
    assert entry.suspect and entry.kind == "model error"
    assert entry.signature == "ConnectionError: endpoint down"
    assert (entry.count, entry.sessions, entry.share) == (N, N, 1.0)


def test_errors_that_differ_only_in_numbers_share_a_signature():
    rows = [
        session(
            i, outcome="ERROR", error_type="APIError", error_message=f"request req_{i}{i} failed: 503", raw_output=None
        )
        for i in range(N)
    ]
    entry = model_health(frame(rows))
    assert entry.suspect and entry.signature == "APIError: request req_# failed: #"


def test_the_same_check_error_is_suspect():
    rows = [
        session(i, check_status="ERROR", check_error_type="OSError", check_error_message="no sandbox") for i in range(9)
    ]
    rows.append(session(9))  # one genuine answer does not hide it
    entry = model_health(frame(rows))
    assert entry.suspect and entry.kind == "check error" and entry.share == 0.9


def test_the_same_exit_before_any_test_is_suspect():
    meta = code_meta(exit_code=127, stderr_tail="env: '/tmp/venv/bin/python': No such file or directory\n")
    entry = model_health(frame([session(i, check_metadata=meta) for i in range(N)]))
    assert entry.suspect and entry.kind == "exit before tests"
    assert entry.signature == "exit code 127: env: '/tmp/venv/bin/python': No such file or directory"


def test_one_identical_answer_to_every_item_is_suspect():
    entry = model_health(frame([session(i, raw_output="42", solution="42") for i in range(N)]))
    assert entry.suspect and entry.kind == "identical answer" and entry.signature == "'42'"


def test_an_identical_prompt_for_every_item_is_suspect():
    same = prompt_hash("What is ?")
    entry = model_health(frame([session(i, prompt_hash=same) for i in range(N)]))
    assert entry.suspect and entry.kind == "identical prompt" and entry.signature == f"sha256 {same}"


def test_an_empty_prompt_is_suspect():
    assert prompt_hash("") == EMPTY_PROMPT_HASH
    entry = model_health(frame([session(i, prompt_hash=EMPTY_PROMPT_HASH) for i in range(N)]))
    assert entry.suspect and entry.kind == "identical prompt" and entry.signature == "empty"


def test_a_weak_model_that_fails_everything_in_different_ways_is_not_suspect():
    """Like SmolLM2 on HumanEval: every answer wrong, but different answers and different failures."""
    rows = []
    for i in range(N):
        failure = (
            f"AssertionError: candidate({i}) returned {i * 7}" if i % 2 else f"NameError: name 'x{i}' is not defined"
        )
        meta = code_meta(passed=0, failures=[failure], exit_code=0 if i % 2 else 1)
        rows.append(session(i, check_metadata=meta, raw_output=f"def f(x):\n    return x * {i}"))
    entry = model_health(frame(rows))
    assert not entry.suspect
    assert entry.count <= 1


def test_several_runs_of_one_item_agreeing_is_not_a_signature():
    rows = [session(0, run_index=r, raw_output="7") for r in range(N)]
    entry = model_health(frame(rows))
    assert not entry.suspect and entry.kind is None and entry.count == 0


def test_correct_answers_are_never_a_signature():
    rows = [session(i, raw_output="yes", correct=True, check_status="PASSED") for i in range(N)]
    assert not model_health(frame(rows)).suspect


@pytest.mark.parametrize(
    ("sessions", "share", "min_sessions", "suspect"),
    [(N, 0.8, 5, True), (4, 0.8, 5, False), (N, 0.95, 5, False), (N, 0.7, 5, True)],
    ids=["default", "too-few-sessions", "share-above-it", "share-below-it"],
)
def test_the_thresholds(sessions, share, min_sessions, suspect):
    # 8 or 9 of 10 sessions share the error (with 4 sessions: all of them)
    shared = sessions if sessions < N else 9
    rows = [
        session(i, outcome="ERROR", error_type="TimeoutError", error_message="slow", raw_output=None)
        for i in range(shared)
    ] + [session(i) for i in range(shared, sessions)]
    entry = model_health(frame(rows), share=share, min_sessions=min_sessions)
    assert entry.suspect is suspect
    assert entry.threshold == share and entry.min_sessions == min_sessions


def test_every_model_gets_an_entry_and_suspect_ones_a_line():
    rows = [session(i) for i in range(N)] + [session(i, model_id="broken", raw_output="42") for i in range(N)]
    health = run_health(frame(rows))
    assert set(health) == {"m", "broken"}
    assert not health["m"].suspect and health["broken"].suspect
    lines = suspect_lines(health)
    assert lines == [
        "suspect results for model 'broken': 10 of 10 sessions (100%) ended with the same identical answer: '42'"
    ]
    markdown = markdown_table(Envelope(health=health))
    assert markdown.splitlines()[0] == (
        "**Run health:** suspect results for model `broken`: 10 of 10 sessions (100%) "
        "ended with the same identical answer: `'42'`"
    )
    assert "Run health" not in markdown_table(Envelope(health={"m": health["m"]}))
