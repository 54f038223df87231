"""The top-level keys of every ``report.json`` (``ape.schemas.report.Envelope``), in one place
for the tests that check a written report holds exactly these."""

from __future__ import annotations

REPORT_KEYS = frozenset(
    {
        "leaderboard",
        "unranked",
        "pairwise",
        "calibration",
        "summary",
        "health",
        "error",
        "regressions",
        "judge",
        "choices",
        "stage_chains",
    }
)
