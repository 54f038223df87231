"""Models with no result: every session ended in an error, so they are not ranked.

A model whose endpoint was down, or whose key was refused, scored 0 on every item; ranked
with the others it sat at the bottom of the leaderboard with an interval and, worse, in a
tie group with real models (a 0 over few items cannot be told apart from a weak model).
Such a model measured nothing: :func:`split_unranked` takes it out of the sessions the
leaderboard, the pairwise comparisons, the rank intervals and tie groups are computed from,
and describes it (:class:`ape.schemas.report.UnrankedRow`) with the error it failed with,
for ``report.json`` (``unranked``), ``leaderboard.md`` and the terminal.

A model with at least one session that did not error is ranked as before; its errors
count in its ``Error`` column (and run health may mark it suspect).
"""

from __future__ import annotations

import pandas as pd

from ape.schemas.report import UnrankedRow


def _errors(frame: pd.DataFrame) -> pd.Series:
    """Each session's error as ``type: message`` (the message on one line)."""
    types = frame["error_type"] if "error_type" in frame.columns else pd.Series("error", index=frame.index)
    messages = frame["error_message"] if "error_message" in frame.columns else pd.Series("", index=frame.index)
    text = types.where(types.notna(), "error").astype(str) + ": " + messages.where(messages.notna(), "").astype(str)
    return text.map(lambda value: " ".join(value.split()).rstrip(": "))


def split_unranked(sessions: pd.DataFrame) -> tuple[pd.DataFrame, list[UnrankedRow]]:
    """The sessions of the models that have a result, and one row per model that has none
    (every session's outcome ERROR), in model id order."""
    if sessions.empty or "outcome" not in sessions.columns:
        return sessions, []
    errored = sessions["outcome"].astype(str) == "ERROR"
    all_errors = errored.groupby(sessions["model_id"].astype(str)).all()
    dead = sorted(str(model) for model, flag in all_errors.items() if flag)
    if not dead:
        return sessions, []
    rows = []
    for model_id in dead:
        mine = sessions[sessions["model_id"].astype(str) == model_id]
        counts = _errors(mine).value_counts()
        rows.append(
            UnrankedRow(
                model_id=model_id,
                n_items=int(mine["item_id"].nunique()),
                n_sessions=len(mine),
                error=str(counts.index[0]),
                error_sessions=int(counts.iloc[0]),
                distinct_errors=len(counts),
            )
        )
    return sessions[~sessions["model_id"].astype(str).isin(dead)], rows
