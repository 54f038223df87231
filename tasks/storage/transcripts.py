"""Write closed sessions to ``sessions.log`` (readable) and ``sessions.jsonl`` (one JSON line each).

The schema of both is documented in :mod:`ape.schemas.transcript`. Many solver workers
close sessions at the same time, so each session is formatted first and then written as
one block under a lock and flushed: blocks are never interleaved, and a crash loses at
most the sessions still open.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from pydantic_core import to_jsonable_python

from ape.schemas.results import SessionResult
from ape.schemas.transcript import (
    SESSION_END_FIELDS,
    SESSION_END_IF_SET,
    TRANSCRIPT_FROM_RESULT,
    EntryKind,
    SessionTranscript,
    TranscriptEntry,
)

LOG_FILE = "sessions.log"
JSONL_FILE = "sessions.jsonl"


def closing_entries(result: SessionResult, transcript: list[TranscriptEntry]) -> list[TranscriptEntry]:
    """The CHECK entry (when something was checked) and the SESSION_END entry.

    The check runs after solve and adapt, so its time is placed after the session's
    solve + adapt time (``result.latency_s``), shifted by the checker's runtime.
    """
    last = transcript[-1].t if transcript else 0.0
    t = max(last, result.latency_s)
    entries: list[TranscriptEntry] = []
    check = result.check
    if check is not None:
        t += check.runtime_s
        entries.append(
            TranscriptEntry(
                kind=EntryKind.CHECK,
                t=t,
                content=check.status.value,
                data=to_jsonable_python(
                    {
                        **_answer_and_expected(result),
                        "score": check.score,
                        "runtime_s": check.runtime_s,
                        "metadata": check.metadata,
                    },
                    fallback=repr,
                ),
                error=check.error,
            )
        )
    entries.append(
        TranscriptEntry(
            kind=EntryKind.SESSION_END,
            t=t,
            content=result.outcome.value,
            data=session_end_data(result),
            error=result.error,
        )
    )
    return entries


def session_end_data(result: SessionResult) -> dict[str, Any]:
    """The SESSION_END entry's data: the result's :data:`ape.schemas.transcript.SESSION_END_FIELDS`."""
    values = {name: getattr(result, name) for name in SESSION_END_FIELDS}
    return {name: value for name, value in values.items() if value is not None or name not in SESSION_END_IF_SET}


def _answer_and_expected(result: SessionResult) -> dict[str, Any]:
    """For a failed check whose checker named the reference (``metadata["expected"]``):
    the parsed answer and the expected value, side by side."""
    check = result.check
    if check is None or check.status.value != "FAILED" or "expected" not in check.metadata:
        return {}
    return {"answer": result.solution, "expected": check.metadata["expected"]}


def session_transcript(result: SessionResult, transcript: list[TranscriptEntry]) -> SessionTranscript:
    """The whole session as one ``sessions.jsonl`` record, closing entries included."""
    return SessionTranscript(
        **{name: getattr(result, name) for name in TRANSCRIPT_FROM_RESULT},  # ids, outcome, score, tokens...
        check_status=result.check.status if result.check else None,
        solution=to_jsonable_python(result.solution, fallback=repr),
        entries=[*transcript, *closing_entries(result, transcript)],
    )


def format_session(session: SessionTranscript) -> str:
    """Readable text of one session: a header, then one block per entry."""
    header = (
        f"=== session item={session.item_id} run={session.run_index} model={session.model_id} "
        f"outcome={session.outcome.value} score={session.score:g} "
        f"correct={str(session.correct).lower()} ==="
    )
    lines = [header]
    for entry in session.entries:
        lines.extend(format_entry(entry))
    lines.append("")
    return "\n".join(lines) + "\n"


def format_entry(entry: TranscriptEntry) -> list[str]:
    """A header line (time, kind, tool name, data), the error, then the content indented.
    Verdict-like entries (CHECK, SESSION_END) carry their one-word content in the header."""
    head = f"[{entry.t:9.3f}s] {entry.kind.value}"
    inline = entry.kind in _INLINE and entry.content and "\n" not in entry.content
    if inline:
        head += f" {entry.content}"
    if entry.name:
        head += f" {entry.name}"
    if entry.data:
        head += f" {_compact(entry.data)}"
    lines = [head]
    if entry.error is not None:
        lines.append(f"    ! {_indent(entry.error.line())}")
    if entry.content and not inline:
        lines.append("    " + _indent(entry.content))
    return lines


_INLINE = {EntryKind.CHECK, EntryKind.SESSION_END}


def _compact(data: dict[str, Any]) -> str:
    return json.dumps(_rounded(data), ensure_ascii=False, default=repr, separators=(", ", ": "))


def _rounded(value: Any) -> Any:
    """Floats to 4 decimals for reading; the JSON Lines file keeps full precision."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def _indent(text: str) -> str:
    return text.replace("\n", "\n    ")


class SessionLog:
    """Appends closed sessions to ``sessions.log`` and ``sessions.jsonl`` in ``folder``.

    Thread-safe; one instance is shared by all solver workers of a run. Files are opened
    in append mode, so a resumed run adds to what is there.

    :meth:`write` formats a session on the calling thread and keeps it; :meth:`flush` (the
    runner's, before it saves the items those sessions belong to) and :meth:`close` append
    what was kept. A solver thread makes no system call here: at 256 workers each one let
    the other threads take the interpreter lock while this thread waited to get it back,
    holding the log's lock. An item's transcripts are on disk before its results are saved;
    a crash loses only the transcripts of items not saved, which run again.
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()  # the kept sessions
        self._io = threading.Lock()  # the files (one flush at a time, in order)
        self._texts: list[str] = []
        self._lines: list[str] = []
        self._log: TextIO | None = open(self.folder / LOG_FILE, "a", encoding="utf-8")
        self._jsonl: TextIO | None = open(self.folder / JSONL_FILE, "a", encoding="utf-8")

    def write(self, result: SessionResult, transcript: list[TranscriptEntry]) -> None:
        """Close a session: add CHECK and SESSION_END and keep both forms for :meth:`flush`."""
        session = session_transcript(result, transcript)
        text = format_session(session)
        line = session.model_dump_json() + "\n"
        with self._lock:
            if self._log is None:
                raise RuntimeError(f"the session log in {self.folder} is closed")
            self._texts.append(text)
            self._lines.append(line)

    def flush(self) -> None:
        """Append the sessions written so far to both files and flush them."""
        with self._io:
            self._append()

    def _append(self) -> None:
        with self._lock:
            texts, lines = self._texts, self._lines
            self._texts, self._lines = [], []
            log, jsonl = self._log, self._jsonl
        if not texts or log is None or jsonl is None:
            return
        log.write("".join(texts))
        jsonl.write("".join(lines))
        log.flush()
        jsonl.flush()

    def close(self) -> None:
        """Append what is kept, then close both files (again: nothing)."""
        with self._io:
            try:
                self._append()
            finally:
                with self._lock:
                    handles, self._log, self._jsonl = (self._log, self._jsonl), None, None
                for handle in handles:
                    if handle is not None:
                        handle.close()

    def __enter__(self) -> SessionLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
