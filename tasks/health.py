"""Run health: is a model's score a measurement, or one failure repeated on every item?

A sandbox that never starts, an endpoint that answers every request with the same error, a
template that renders the same text for every item: each gives a model a number that
looks like a result but measured nothing. After a model's items are done the report gives
every session the *non-answer signatures* it shows, of five kinds:

- ``model error``: the session ended ERROR; signature is the error's type and message
  with its numbers as ``#`` (a dead endpoint, a transport failure, a rejected API key);
- ``check error``: the checker raised or timed out; its error's type and message (numbers
  as ``#``);
- ``exit before tests``: ``code_exec`` ran none of the tests because the process ended
  first; the exit code and the last line of stderr (an interpreter that is not there,
  a harness that could not start);
- ``identical answer``: the same answer text (the model's last answer) judged wrong on
  two or more different items; a model that says "42" to everything;
- ``identical prompt``: the same rendered prompt for two or more different items, or an
  empty rendered prompt (a template that uses no item field, or fields that are empty).

For each kind the signature shared by the most sessions counts. A model's results are
**suspect** when that count is at least ``share`` (default 0.8, ``[run] health_share``)
of its sessions and the model has at least ``min_sessions`` sessions (default 5,
``[run] health_min_sessions``). A weak model that fails everything in different ways
(different assertion failures, different wrong answers) shares no signature and is not
flagged; a correct answer is never part of a signature. A wrong answer given to one item
only (several runs of the same item may agree) is not a signature either.

Everything here is a pure function of the sessions table (:mod:`ape.tasks.sessions_table`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

import pandas as pd

from ape.schemas.report import HealthEntry

DEFAULT_SHARE = 0.8
DEFAULT_MIN_SESSIONS = 5
SIGNATURE_CHARS = 160  # signatures are shown on one line
_DIGITS = re.compile(r"\d+")
PROMPT_HASH_CHARS = 16
EMPTY_PROMPT_HASH = hashlib.sha256(b"").hexdigest()[:PROMPT_HASH_CHARS]


def prompt_hash(prompt: str, system: str | None = None) -> str:
    """What a session records of its rendered prompt (``prompt_hash``): enough to tell two
    prompts apart, and an empty prompt (:data:`EMPTY_PROMPT_HASH`), without storing it again."""
    text = f"{system}\x00{prompt}" if system else prompt
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:PROMPT_HASH_CHARS]


def _flat(text: Any, limit: int = SIGNATURE_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _shape(text: str) -> str:
    """An error message with its numbers as ``#``: the same failure on different items
    (a request id, a port, an item's line number) gives the same signature."""
    return _DIGITS.sub("#", _flat(text))


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and pd.isna(value))


def model_error(row: pd.Series) -> str | None:
    if row["outcome"] != "ERROR":
        return None
    return _shape(f"{row['error_type'] or 'error'}: {row['error_message'] or ''}")


def check_error(row: pd.Series) -> str | None:
    if row["check_status"] != "ERROR":
        return None
    return _shape(f"{row['check_error_type'] or 'error'}: {row['check_error_message'] or ''}")


def exit_before_tests(row: pd.Series) -> str | None:
    """code_exec checks whose process ended before any test ran (not a time-out: that is
    the candidate's own doing, and its signature would be the same for every slow answer)."""
    if row["check_status"] != "FAILED" or not _present(row["check_metadata"]):
        return None
    try:
        meta = json.loads(row["check_metadata"])
    except ValueError:
        return None
    if not isinstance(meta, dict) or "exit_code" not in meta or meta.get("timed_out"):
        return None
    if meta.get("passed") or meta.get("failures") or meta.get("exit_code") is None:
        return None
    stderr = str(meta.get("stderr_tail") or "").strip().splitlines()
    return f"exit code {meta['exit_code']}" + (f": {_shape(stderr[-1])}" if stderr else "")


def identical_answer(row: pd.Series) -> str | None:
    """The answer text of a session judged wrong (a correct answer is never a signature)."""
    if row["outcome"] == "ERROR" or bool(row["correct"]):
        return None
    text = row["raw_output"] if _present(row["raw_output"]) else row["solution"]
    return _flat(repr(text)) if _present(text) else None


def identical_prompt(row: pd.Series) -> str | None:
    value = row.get("prompt_hash")
    if not _present(value):
        return None
    return "empty" if value == EMPTY_PROMPT_HASH else f"sha256 {value}"


# kind -> (signature of one session, whether the signature must span two or more items)
KINDS: dict[str, tuple[Callable[[pd.Series], str | None], bool]] = {
    "model error": (model_error, False),
    "check error": (check_error, False),
    "exit before tests": (exit_before_tests, False),
    "identical answer": (identical_answer, True),
    "identical prompt": (identical_prompt, True),
}


def top_signature(sessions: pd.DataFrame, kind: str) -> tuple[str | None, int]:
    """The signature of ``kind`` shared by the most sessions of one model, and how many.

    For the kinds that need it, a signature seen on one item only does not count
    (several runs of one item may well agree); an empty prompt always counts.
    """
    signature_of, across_items = KINDS[kind]
    found = sessions.apply(signature_of, axis=1) if len(sessions) else pd.Series(dtype=object)
    found = found.dropna()
    if found.empty:
        return None, 0
    frame = pd.DataFrame({"signature": found, "item_id": sessions.loc[found.index, "item_id"]})
    groups = frame.groupby("signature", sort=True).agg(count=("item_id", "size"), items=("item_id", "nunique"))
    if across_items:
        groups = groups[(groups["items"] >= 2) | (groups.index == "empty")]
    if groups.empty:
        return None, 0
    best = groups.sort_values("count", ascending=False, kind="stable").iloc[0]
    return str(best.name), int(best["count"])


def model_health(
    sessions: pd.DataFrame, *, share: float = DEFAULT_SHARE, min_sessions: int = DEFAULT_MIN_SESSIONS
) -> HealthEntry:
    """The health of one model's sessions: its most shared non-answer signature and whether
    it makes the results suspect (see the module docstring)."""
    total = len(sessions)
    best: tuple[str | None, str | None, int] = (None, None, 0)
    for name in KINDS:
        found, shared = top_signature(sessions, name)
        if shared > best[2]:
            best = (name, found, shared)
    kind, signature, count = best
    ratio = count / total if total else 0.0
    return HealthEntry(
        sessions=total,
        kind=kind,
        signature=signature,
        count=count,
        share=round(ratio, 4),
        suspect=total >= min_sessions and count > 0 and ratio >= share,
        threshold=share,
        min_sessions=min_sessions,
    )


def run_health(
    sessions: pd.DataFrame, *, share: float = DEFAULT_SHARE, min_sessions: int = DEFAULT_MIN_SESSIONS
) -> dict[str, HealthEntry]:
    """:func:`model_health` of every model in the sessions table, by model id."""
    if sessions.empty:
        return {}
    return {
        str(model_id): model_health(group, share=share, min_sessions=min_sessions)
        for model_id, group in sessions.groupby("model_id", sort=True)
    }


def health_line(model_id: str, entry: HealthEntry) -> str:
    """One line for the terminal and leaderboard.md about a suspect model."""
    return (
        f"suspect results for model '{model_id}': {entry.count} of {entry.sessions} sessions "
        f"({entry.share:.0%}) ended with the same {entry.kind}: {entry.signature}"
    )


def suspect_lines(health: dict[str, HealthEntry]) -> list[str]:
    return [health_line(model_id, entry) for model_id, entry in sorted(health.items()) if entry.suspect]
