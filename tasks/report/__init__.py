"""The report: sessions table, leaderboard tables, JSON envelope, markdown, chart, provenance, trend.

``build`` turns saved results into every report file; the other modules each produce one
part of it.

May import every other sub-package of ``ape.tasks`` (it is the top of the plain-function
layers); only ``stages`` and ``stage_runs`` sit above it.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``ape.tasks.report:build_report`` of earlier releases: now ``ape.tasks.report.build``."""
    from ape.tasks.common.moved import moved_attribute

    return moved_attribute("report", "report.build", name)
