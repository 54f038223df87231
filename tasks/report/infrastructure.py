"""Infrastructure errors: sessions that ended ERROR for a reason outside the model.

A sandbox that would not start (:class:`ape.tasks.agent.sandbox.SandboxError`, any
:class:`ape.tasks.solving.stops.InfrastructureError`) says nothing about the model: counting
it as a failed session would move a score by the machine's luck (published agent
evaluations saw several points of it). So the report counts these sessions apart
(``infrastructure_errors`` per leaderboard row and in the summary) and leaves them out of
every score, interval and comparison; ``ape retry`` redoes them, since they ended ERROR.

A session records its error's type by name (``error_type``), so the names are those of
:class:`InfrastructureError` and its subclasses.
"""

from __future__ import annotations

import pandas as pd

from ape.tasks.agent import sandbox as _sandbox  # noqa: F401  (defines SandboxError, a subclass)
from ape.tasks.solving.stops import InfrastructureError


def infrastructure_types() -> frozenset[str]:
    """The error type names that are infrastructure errors: InfrastructureError's whole tree."""
    names: set[str] = set()
    todo: list[type] = [InfrastructureError]
    while todo:
        kind = todo.pop()
        names.add(kind.__name__)
        todo.extend(kind.__subclasses__())
    return frozenset(names)


def infrastructure_mask(sessions: pd.DataFrame) -> pd.Series:
    """Per session, whether it ended ERROR with an infrastructure error's type."""
    if sessions.empty or "error_type" not in sessions.columns:
        return pd.Series(False, index=sessions.index, dtype=bool)
    errored = sessions["outcome"].astype(str) == "ERROR"
    return (errored & sessions["error_type"].astype(str).isin(infrastructure_types())).astype(bool)


def infrastructure_counts(sessions: pd.DataFrame) -> dict[str, int]:
    """Infrastructure errors per model id (models without one left out)."""
    mask = infrastructure_mask(sessions)
    if not mask.any():
        return {}
    counts = mask.groupby(sessions["model_id"].astype(str), sort=True).sum()
    return {str(model): int(count) for model, count in counts.items() if count}
