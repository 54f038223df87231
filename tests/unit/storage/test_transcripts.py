"""sessions.log / sessions.jsonl: closing entries, both formats, no interleaving across threads."""

from __future__ import annotations

import json
import threading

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

from ape.schemas.config import SolverConfig
from ape.schemas.results import CheckResult, CheckStatus, ErrorInfo, Outcome, SessionResult
from ape.schemas.transcript import EntryKind, SessionTranscript, TranscriptEntry
from ape.tasks.solving.adapt import LastNumberAdapter
from ape.tasks.solving.solve import solve_session
from ape.tasks.storage.transcripts import JSONL_FILE, LOG_FILE, SessionLog, closing_entries


def result(item_id: str = "q1", **fields) -> SessionResult:
    base = dict(item_id=item_id, run_index=0, model_id="mock/m", outcome=Outcome.SOLVED, latency_s=0.5)
    base.update(fields)
    return SessionResult(**base)


def entries(text: str = "What is 6*7?") -> list[TranscriptEntry]:
    return [
        TranscriptEntry(kind=EntryKind.PROMPT, t=0.0, content=text),
        TranscriptEntry(kind=EntryKind.MODEL_RESPONSE, t=0.4, content="42", data={"step": 1}),
    ]


def test_closing_entries_add_check_then_session_end():
    check = CheckResult(status=CheckStatus.PASSED, score=1.0, runtime_s=0.25, metadata={"m": 1})
    closing = closing_entries(result(check=check, score=1.0, correct=True), entries())
    assert [e.kind for e in closing] == [EntryKind.CHECK, EntryKind.SESSION_END]
    assert closing[0].content == "PASSED" and closing[0].data["metadata"] == {"m": 1}
    assert closing[0].t == pytest.approx(0.75)  # after solve + adapt, plus the check's runtime
    assert closing[1].content == "SOLVED" and closing[1].data["correct"] is True
    unchecked = closing_entries(result(outcome=Outcome.GAVE_UP), entries())
    assert [e.kind for e in unchecked] == [EntryKind.SESSION_END]


def test_write_produces_readable_text_and_one_json_line(tmp_path):
    failure = CheckResult(status=CheckStatus.ERROR, error=ErrorInfo(type="KeyError", message="'answer'"))
    with SessionLog(tmp_path / "out") as log:
        log.write(result(check=failure, solution={"n": 42}), entries("line one\nline two"))
    text = (tmp_path / "out" / LOG_FILE).read_text()
    assert text.startswith("=== session item=q1 run=0 model=mock/m outcome=SOLVED score=0 correct=false")
    assert "    line one\n    line two" in text  # multi-line content stays indented
    assert "CHECK" in text and "! KeyError: 'answer'" in text
    lines = (tmp_path / "out" / JSONL_FILE).read_text().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["item_id"] == "q1" and record["outcome"] == "SOLVED"
    assert record["check_status"] == "ERROR" and record["solution"] == {"n": 42}
    assert [e["kind"] for e in record["entries"]] == [
        "PROMPT",
        "MODEL_RESPONSE",
        "CHECK",
        "SESSION_END",
    ]
    SessionTranscript.model_validate(record)  # the documented schema


def test_a_real_session_transcript_round_trips(tmp_path):
    model = GenericFakeChatModel(messages=iter(["no idea", "It is 42"]))
    record = solve_session(model, "Q?", "Be brief", tools=[], adapter=LastNumberAdapter(), settings=SolverConfig())
    # the record's state_check becomes the session's check (the chain's check stage)
    fields = [name for name in type(record).model_fields if name not in ("transcript", "state_check")]
    session = result(**{name: getattr(record, name) for name in fields})
    with SessionLog(tmp_path) as log:
        log.write(session, record.transcript)
    saved = SessionTranscript.model_validate_json((tmp_path / JSONL_FILE).read_text())
    assert saved.entries[: len(record.transcript)] == record.transcript
    assert saved.entries[-1].kind is EntryKind.SESSION_END and saved.steps == 2
    assert "REFORMAT_PROMPT" in (tmp_path / LOG_FILE).read_text()


def test_appends_across_instances(tmp_path):
    for item in ("a", "b"):
        with SessionLog(tmp_path) as log:
            log.write(result(item), entries())
    ids = [json.loads(line)["item_id"] for line in (tmp_path / JSONL_FILE).read_text().splitlines()]
    assert ids == ["a", "b"]


def test_concurrent_sessions_are_never_interleaved(tmp_path):
    log = SessionLog(tmp_path)
    body = "\n".join(f"row {n}" for n in range(50))

    def worker(w: int) -> None:
        for n in range(15):
            item = f"w{w}-{n}"
            log.write(result(item), entries(f"{item}\n{body}\n{item}"))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.close()
    lines = (tmp_path / JSONL_FILE).read_text().splitlines()
    assert len(lines) == 90
    assert all(json.loads(line)["entries"][-1]["kind"] == "SESSION_END" for line in lines)
    blocks = (tmp_path / LOG_FILE).read_text().split("=== session ")[1:]
    assert len(blocks) == 90
    for block in blocks:
        item = block.split()[0].removeprefix("item=")
        assert block.count(f"    {item}\n") == 2  # both markers of a session sit in its own block
        assert block.count("row 49") == 1


def test_close_is_idempotent_and_writing_after_close_fails(tmp_path):
    log = SessionLog(tmp_path)
    log.close()
    log.close()
    with pytest.raises(RuntimeError, match="closed"):
        log.write(result(), entries())


def test_the_session_end_fields_are_the_results_own() -> None:
    from ape.schemas.results import SessionResult
    from ape.schemas.transcript import SESSION_END_FIELDS, SESSION_END_IF_SET

    assert set(SESSION_END_FIELDS) <= set(SessionResult.model_fields)
    assert SESSION_END_IF_SET <= set(SESSION_END_FIELDS)
