"""One line per model answered from the result cache: whose answers they were, and how to ask again.

Two ``[[model]]`` entries with the same fingerprint (the same endpoint and settings; a
``batch = true`` copy of an interactive entry is one) share their cached answers: the second
asks nothing and, with ``batch = true``, sends no batch. Its row in the leaderboard then
shows cached sessions and no cost, and this line says why, naming the entry whose answers
it got (from the fingerprints each run recorded in its provenance,
:mod:`ape.tasks.report.provenance`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ape.schemas.report import LeaderboardRow
from ape.tasks.common.inert import md_text

ASK_AGAIN = "`[run] cache = false`, or a separate --output for it, asks again"


def _recorded_models(provenance: Mapping[str, Any], model_id: str) -> Mapping[str, Any]:
    """The ``models`` record (id -> fingerprint, sha256, requests) of the run that measured ``model_id``."""
    runs = provenance.get("runs")
    run = runs.get(model_id) if isinstance(runs, Mapping) else None
    models = run.get("models") if isinstance(run, Mapping) else None
    return models if isinstance(models, Mapping) else {}


def cache_lines(rows: list[LeaderboardRow], provenance: Mapping[str, Any]) -> list[str]:
    """For each model with cached sessions: how many, from whose answers, whether a batch was
    skipped, and how to ask again."""
    lines = []
    for row in rows:
        if not row.cached:
            continue
        models = _recorded_models(provenance, row.model_id)
        found = models.get(row.model_id)
        own: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        sha = own.get("sha256")
        twins = [
            other
            for other, record in models.items()
            if other != row.model_id and sha is not None and isinstance(record, Mapping) and record.get("sha256") == sha
        ]
        source = f"{' or '.join(md_text(t) for t in twins)}'s cache" if twins else "the result cache"
        asked = own.get("requests")
        requests: Mapping[str, Any] = asked if isinstance(asked, Mapping) else {}
        unsent = "no batch sent; " if requests.get("batch") and not row.batched else ""
        lines.append(f"{row.cached} sessions of {md_text(row.model_id)} answered from {source}: {unsent}{ASK_AGAIN}.")
    return lines
