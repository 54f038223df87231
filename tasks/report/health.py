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
  a harness that could not start). Only code_exec's metadata (its ``stderr_tail``) counts:
  ``sandbox_state``'s exit code is the test's verdict, not a harness that failed;
- ``identical answer``: the same answer text (the model's last answer) judged wrong on
  two or more different items; a model that says "42" to everything (not for
  ``sandbox_state``, which grades the state an agent left, not its closing words);
- ``identical prompt``: the same rendered prompt for two or more different items, or an
  empty rendered prompt (a template that uses no item field, or fields that are empty).

For each kind the signature shared by the most sessions counts. A model's results are
**suspect** when that count is at least ``share`` (default 0.8, ``[run] health_share``)
of its sessions and the model has at least ``min_sessions`` sessions (default 5,
``[run] health_min_sessions``). A weak model that fails everything in different ways
(different assertion failures, different wrong answers) shares no signature and is not
flagged; a correct answer is never part of a signature. A wrong answer given to one item
only (several runs of the same item may agree) is not a signature either.

Apart from the signatures, run health counts the sessions whose answer the judge checker
flagged as addressed to the grader (``injection`` in the check's metadata, see
:mod:`ape.tasks.checking.injection`). A model is marked **injecting** when at least
:data:`MIN_INJECTIONS` of its sessions and a share of at least ``injection_share``
(default :data:`DEFAULT_INJECTION_SHARE`, 10%) are flagged: answers that try to talk the
judge round are something a model does, not an accident of one item, and a reader of its
score should know. The mark does not make the results suspect: by default a flagged answer
was graded FAIL without asking the judge, so the score is still a measurement (of a model
that tries this); it shows in ``report.json`` (``health``), on the leaderboard's
injection column and as a run-health line in ``leaderboard.md``.

Run health also counts the sessions whose final answer was cut at the token limit
(outcome TRUNCATED, :mod:`ape.tasks.solving.stops`). A model is marked **truncating** when
at least :data:`MIN_TRUNCATED` of its sessions and a share of at least
:data:`DEFAULT_TRUNCATION_SHARE` (10%) were cut: its score then measures its budget as much
as its ability, and the line says to raise ``[model] max_tokens``. Like the injection mark it
does not make the results suspect (a cut answer is what the model delivered under its
budget); cut answers take no part in the ``identical answer`` signature, which is for
answers the model finished.

Run health also counts the sessions of an agent benchmark that ended at a limit (their
``end_reason``: ``step_limit``, ``token_limit``, ``sandbox_time_limit``; docs/agents.md), per reason. A model
is marked **limiting** when the sessions with any ``end_reason`` make at least ``share`` of
its sessions (the same ``[run] health_share`` as the signatures) and it has at least
``min_sessions`` sessions: most of its sessions were stopped, not finished, so its score
measures the limits as much as the model. The line names each reason and the setting to
raise (:data:`LIMIT_SETTINGS`). Like truncation it is a warning, not a suspect mark: a
stopped session is still graded on the state it left.

Everything here is a pure function of the sessions table (:mod:`ape.tasks.report.sessions_table`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pandas as pd

from ape.schemas.report import HealthEntry
from ape.tasks.common.prompt_hash import EMPTY_PROMPT_HASH
from ape.tasks.stats.aggregate import truncation_columns

DEFAULT_SHARE = 0.8
DEFAULT_MIN_SESSIONS = 5
DEFAULT_INJECTION_SHARE = 0.1  # a tenth of a model's sessions addressing the grader is a habit
MIN_INJECTIONS = 2  # one flagged answer may be a false positive of the detector
DEFAULT_TRUNCATION_SHARE = 0.1  # a tenth of a model's answers cut short: its budget is part of its score
MIN_TRUNCATED = 2  # one long answer cut short is an item, not a budget
# end_reason -> the setting that moves it (docs/agents.md)
LIMIT_SETTINGS = {
    "step_limit": "[solver] max_steps",
    "sandbox_time_limit": "[sandbox] session_timeout_s (and command_timeout_s)",
    "token_limit": "[solver] max_session_tokens",
    "disk_limit": "[sandbox] disk_bytes",
}
STATE_METRIC = "sandbox_state"  # ape.tasks.agent.grade.NAME: a grade of the state, not of the answer
SIGNATURE_CHARS = 160  # signatures are shown on one line
_DIGITS = re.compile(r"\d+")


def _flat(text: Any, limit: int = SIGNATURE_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _shape(text: str) -> str:
    """An error message with its numbers as ``#``: the same failure on different items
    (a request id, a port, an item's line number) gives the same signature."""
    return _DIGITS.sub("#", _flat(text))


def _column(sessions: pd.DataFrame, name: str) -> pd.Series:
    """A column of the sessions table; all-null when the table predates it."""
    if name in sessions.columns:
        return sessions[name]
    return pd.Series([None] * len(sessions), index=sessions.index, dtype=object)


def _error_text(types: pd.Series, messages: pd.Series) -> pd.Series:
    texts = types.where(types.notna(), "error").astype(str) + ": " + messages.where(messages.notna(), "").astype(str)
    return texts.map(_shape)


def model_error(sessions: pd.DataFrame) -> pd.Series:
    """Sessions that ended ERROR: the error's type and message."""
    hit = sessions[sessions["outcome"] == "ERROR"]
    return _error_text(hit["error_type"], hit["error_message"])


def check_error(sessions: pd.DataFrame) -> pd.Series:
    """Checks that raised or timed out: the check error's type and message."""
    hit = sessions[sessions["check_status"] == "ERROR"]
    return _error_text(hit["check_error_type"], hit["check_error_message"])


def _exit_signature(metadata: Any) -> str | None:
    """``exit code N: last stderr line`` of a code_exec check that ran no test, else None
    (a time-out is the candidate's own doing, and the same for every slow answer)."""
    try:
        meta = json.loads(metadata)
    except (TypeError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("timed_out") or meta.get("exit_code") is None:
        return None
    if "stderr_tail" not in meta:
        # not code_exec's harness: sandbox_state's exit code is the test command's verdict on
        # the state, so a model that changed nothing fails every item alike, and rightly
        return None
    if meta.get("passed") or meta.get("failures"):
        return None
    stderr = str(meta.get("stderr_tail") or "").strip().splitlines()
    return f"exit code {meta['exit_code']}" + (f": {_shape(stderr[-1])}" if stderr else "")


def exit_before_tests(sessions: pd.DataFrame) -> pd.Series:
    """code_exec checks whose process ended before any test ran."""
    hit = sessions[(sessions["check_status"] == "FAILED") & sessions["check_metadata"].notna()]
    return hit["check_metadata"].map(_exit_signature).dropna()


def identical_answer(sessions: pd.DataFrame) -> pd.Series:
    """The answer text of sessions judged wrong (a correct answer is never a signature)."""
    answered = ~sessions["outcome"].isin(["ERROR", "TRUNCATED"])  # a cut answer is counted apart
    # an agent graded on the state it left is not graded on its words ("done" on every item)
    answered &= _column(sessions, "metric").astype(object).ne(STATE_METRIC)
    wrong = sessions[answered & ~sessions["correct"].fillna(False).astype(bool)]
    text = wrong["raw_output"].where(wrong["raw_output"].notna(), wrong["solution"]).dropna()
    return text.map(lambda value: _flat(repr(value)))


def identical_prompt(sessions: pd.DataFrame) -> pd.Series:
    """The rendered prompt's hash; ``empty`` for an empty prompt."""
    hashes = _column(sessions, "prompt_hash").dropna()
    return hashes.map(lambda value: "empty" if value == EMPTY_PROMPT_HASH else f"sha256 {value}")


def _flagged(metadata: Any) -> bool:
    if not isinstance(metadata, str) or '"injection"' not in metadata:  # most rows: no JSON parse
        return False
    try:
        meta = json.loads(metadata)
    except ValueError:
        return False
    return isinstance(meta, dict) and bool(meta.get("injection"))


def injection_flagged(sessions: pd.DataFrame) -> pd.Series:
    """Per session, whether the judge checker flagged its answer as addressed to the grader."""
    return _column(sessions, "check_metadata").map(_flagged).astype(bool)


def injection_counts(sessions: pd.DataFrame) -> dict[str, int]:
    """Flagged sessions per model id (every model of the table, zero included)."""
    if sessions.empty:
        return {}
    flagged = injection_flagged(sessions)
    return {str(model): int(count) for model, count in flagged.groupby(sessions["model_id"], sort=True).sum().items()}


# kind -> (the signatures of a model's sessions by row, whether one must span two or more items)
KINDS: dict[str, tuple[Callable[[pd.DataFrame], pd.Series], bool]] = {
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
    signatures_of, across_items = KINDS[kind]
    found = signatures_of(sessions).dropna() if len(sessions) else pd.Series(dtype=object)
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


def limit_counts(sessions: pd.DataFrame) -> dict[str, int]:
    """Sessions that ended at a limit, per ``end_reason`` (none: an empty table)."""
    reasons = _column(sessions, "end_reason").dropna().astype(str)
    reasons = reasons[reasons != ""]
    return {str(reason): int(count) for reason, count in sorted(reasons.value_counts().items())}


def model_health(
    sessions: pd.DataFrame,
    *,
    share: float = DEFAULT_SHARE,
    min_sessions: int = DEFAULT_MIN_SESSIONS,
    injection_share: float = DEFAULT_INJECTION_SHARE,
) -> HealthEntry:
    """The health of one model's sessions: its most shared non-answer signature, whether it
    makes the results suspect, and how often its answers addressed the grader (module doc)."""
    total = len(sessions)
    flagged = int(injection_flagged(sessions).sum()) if total else 0
    flagged_share = flagged / total if total else 0.0
    cut = int((sessions["outcome"].astype(str) == "TRUNCATED").sum()) if total else 0
    cut_share = cut / total if total else 0.0
    in_reasoning = truncation_columns(sessions, cut)["truncated_reasoning"] if total else 0
    best: tuple[str | None, str | None, int] = (None, None, 0)
    for name in KINDS:
        found, shared = top_signature(sessions, name)
        if shared > best[2]:
            best = (name, found, shared)
    kind, signature, count = best
    limited = limit_counts(sessions) if total else {}
    limited_share = sum(limited.values()) / total if total else 0.0
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
        injections=flagged,
        injection_share=round(flagged_share, 4),
        injecting=flagged >= MIN_INJECTIONS and flagged_share >= injection_share,
        injection_threshold=injection_share,
        truncated=cut,
        truncated_share=round(cut_share, 4),
        truncating=cut >= MIN_TRUNCATED and cut_share >= DEFAULT_TRUNCATION_SHARE,
        truncation_threshold=DEFAULT_TRUNCATION_SHARE,
        truncated_reasoning=in_reasoning,
        limited=limited,
        limited_share=round(limited_share, 4),
        limiting=total >= min_sessions and bool(limited) and limited_share >= share,
    )


def run_health(
    sessions: pd.DataFrame,
    *,
    share: float = DEFAULT_SHARE,
    min_sessions: int = DEFAULT_MIN_SESSIONS,
    injection_share: float = DEFAULT_INJECTION_SHARE,
) -> dict[str, HealthEntry]:
    """:func:`model_health` of every model in the sessions table, by model id."""
    if sessions.empty:
        return {}
    return {
        str(model_id): model_health(group, share=share, min_sessions=min_sessions, injection_share=injection_share)
        for model_id, group in sessions.groupby("model_id", sort=True)
    }


def _quoted(text: str) -> str:
    return f"'{text}'"


def _shown_name(model_id: str, show: Callable[[str], str]) -> str:
    """The model's name in a health line: quoted for the terminal, ``show``-n for markdown."""
    return _quoted(model_id) if show is str else show(model_id)


def _lines_of(
    health: dict[str, HealthEntry],
    line: Callable[[str, HealthEntry, Callable[[str], str]], str],
    flag: str,
    show: Callable[[str], str],
) -> list[str]:
    """``line`` for each model (sorted) whose entry has ``flag`` set."""
    return [line(model_id, entry, show) for model_id, entry in sorted(health.items()) if getattr(entry, flag)]


def health_line(model_id: str, entry: HealthEntry, show: Callable[[str], str] = str) -> str:
    """One line for the terminal and leaderboard.md about a suspect model. ``show`` sets the
    model id and the signature (a model's answer or error text): leaderboard.md passes
    :func:`~ape.tasks.common.inert.md_text`, the terminal line is cleaned by the log handlers."""
    name = _shown_name(model_id, show)
    return (
        f"suspect results for model {name}: {entry.count} of {entry.sessions} sessions "
        f"({entry.share:.0%}) ended with the same {entry.kind}: {show(str(entry.signature))}"
    )


def suspect_lines(health: dict[str, HealthEntry], show: Callable[[str], str] = str) -> list[str]:
    return _lines_of(health, health_line, "suspect", show)


def injection_line(model_id: str, entry: HealthEntry, show: Callable[[str], str] = str) -> str:
    """One line for the terminal and leaderboard.md about a model whose answers address the grader."""
    name = _shown_name(model_id, show)
    return (
        f"answers of model {name} addressed the grader in {entry.injections} of {entry.sessions} sessions "
        f"({entry.injection_share:.0%}, at least {entry.injection_threshold:.0%} marks a model): prompt injection, "
        "flagged per session under 'injection' in the check metadata"
    )


def injection_lines(health: dict[str, HealthEntry], show: Callable[[str], str] = str) -> list[str]:
    return _lines_of(health, injection_line, "injecting", show)


def truncation_line(model_id: str, entry: HealthEntry, show: Callable[[str], str] = str) -> str:
    """One line for the terminal and leaderboard.md about a model whose answers were often cut short."""
    name = _shown_name(model_id, show)
    share = f"({entry.truncated_share:.0%}, at least {entry.truncation_threshold:.0%} marks a model)"
    if not entry.truncated_reasoning:
        return (
            f"answers of model {name} were cut at the token limit in {entry.truncated} of {entry.sessions} "
            f"sessions {share}: raise [model] max_tokens, then ape retry --outcomes TRUNCATED"
        )
    answers = entry.truncated - entry.truncated_reasoning
    after = f", {answers} with the answer cut after its reasoning (raise [model] max_tokens)" if answers else ""
    return (
        f"sessions of model {name} were cut at the token limit in {entry.truncated} of {entry.sessions} {share}: "
        f"{entry.truncated_reasoning} while still reasoning, before any answer (the budget spent thinking: raise "
        f"[model] max_tokens or lower [model] reasoning_effort){after}; then ape retry --outcomes TRUNCATED"
    )


def truncation_lines(health: dict[str, HealthEntry], show: Callable[[str], str] = str) -> list[str]:
    return _lines_of(health, truncation_line, "truncating", show)


def limit_line(model_id: str, entry: HealthEntry, show: Callable[[str], str] = str) -> str:
    """One line for the terminal and leaderboard.md about a model whose sessions mostly ended
    at a limit: each reason with its count, and the setting to raise."""
    name = _shown_name(model_id, show)
    stopped = sum(entry.limited.values())
    reasons = "; ".join(
        f"{reason} in {count} (raise {LIMIT_SETTINGS.get(reason, 'the limit it names')})"
        for reason, count in sorted(entry.limited.items(), key=lambda pair: (-pair[1], pair[0]))
    )
    return (
        f"sessions of model {name} ended at a limit in {stopped} of {entry.sessions} "
        f"({entry.limited_share:.0%}, at least {entry.threshold:.0%} marks a model): {show(reasons)}; "
        "then ape run --no-load-save, since a stopped session keeps its grade"
    )


def limit_lines(health: dict[str, HealthEntry], show: Callable[[str], str] = str) -> list[str]:
    return _lines_of(health, limit_line, "limiting", show)
