"""Where a new run's verdicts go besides report.json: the Prefect UI, Prefect events, a hook.

- A markdown artifact ``<benchmark>-regressions`` with this run's comparisons, and
  ``<benchmark>-history`` (a stable key: the UI keeps every version) with the table
  ``ape history`` prints.
- One Prefect event per model that regressed or improved: ``ape.evaluation.regressed``
  or ``ape.evaluation.improved``. Its resource is ``ape.evaluation.<benchmark>.<model>``;
  related resources are the benchmark (``ape.benchmark.<name>``, role "benchmark") and
  the model (``ape.model.<id>``, role "model"), so a Prefect Automation can match either
  and send a notification without code. The payload holds the comparison's fields.
- ``[hooks] on_regression``: called with each regressed :class:`RegressionRow`; a
  failing hook is logged, never loses the run.
"""

from __future__ import annotations

import logging
from pathlib import Path

from prefect.artifacts import create_markdown_artifact
from prefect.events import emit_event

from ape.schemas.config import ApeConfig
from ape.schemas.report import RegressionRow
from ape.tasks.after_run.join_history import describe
from ape.tasks.common.inert import md_text
from ape.tasks.plugins.hooks import load_hook
from ape.tasks.report.trend import history_markdown
from ape.tasks.storage.history import read_runs

log = logging.getLogger("ape")

EVENT_PREFIX = "ape.evaluation"


def artifact_key(name: str) -> str:
    """The benchmark's name as a Prefect artifact key (lowercase letters, digits and dashes);
    the one rule for every artifact a run publishes, so a benchmark's leaderboard,
    calibration and regressions sit under the same prefix."""
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") or "benchmark"


def event_payload(row: RegressionRow) -> dict:
    return row.model_dump(mode="json")


def resources(benchmark: str, model_id: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    resource = {
        "prefect.resource.id": f"{EVENT_PREFIX}.{benchmark}.{model_id}",
        "prefect.resource.name": f"{benchmark} · {model_id}",
        "ape.benchmark": benchmark,
        "ape.model": model_id,
    }
    related = [
        {
            "prefect.resource.id": f"ape.benchmark.{benchmark}",
            "prefect.resource.role": "benchmark",
            "prefect.resource.name": benchmark,
        },
        {
            "prefect.resource.id": f"ape.model.{model_id}",
            "prefect.resource.role": "model",
            "prefect.resource.name": model_id,
        },
    ]
    return resource, related


def regressions_markdown(config: ApeConfig, run_id: str, rows: list[RegressionRow]) -> str:

    lines = [f"# {config.name}: run {run_id} against earlier runs", ""]
    if not rows:
        return "\n".join([*lines, "first run: nothing to compare with yet"]) + "\n"
    lines += ["| Model | Against | Reference run | Verdict | Details |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {md_text(row.model_id)} | {row.against} | {md_text(row.reference_run_id)} | **{row.verdict}** "
            f"| {md_text(describe(row))} |"
        )
    explained = {row.model_id: row for row in rows if row.flipped_items or row.changed_settings}
    for model_id, row in explained.items():
        lines += [
            "",
            f"**Why {md_text(model_id)} moved** (against its previous run; the run's "
            f"{md_text(f'diff/{model_id}/diff.md')} has it all):",
        ]
        for direction, ids in row.flipped_items.items():
            if ids:
                lines.append(f"- {direction}: {', '.join(md_text(i) for i in ids)}")
        changed = "; ".join(md_text(c) for c in row.changed_settings)
        lines.append("- changed: " + (changed or "nothing the runs record"))
    return "\n".join(lines) + "\n"


def publish(config: ApeConfig, top: Path, run_id: str, rows: list[RegressionRow]) -> None:
    """Artifacts, events and the hook for one finished new run."""
    key = artifact_key(config.name)
    try:
        create_markdown_artifact(
            markdown=regressions_markdown(config, run_id, rows),
            key=f"{key}-regressions",
            description="APE regression check",
        )
        create_markdown_artifact(
            markdown=history_markdown(read_runs(top), f"{config.name}: history"),
            key=f"{key}-history",
            description="APE run history",
        )
    except Exception as exc:  # no API available: report.json and the history hold it all
        log.debug("artifacts unavailable: %s", exc)
    emit(config.name, rows)
    call_hook(config, [row for row in rows if row.verdict == "regressed"])


def emit(benchmark: str, rows: list[RegressionRow]) -> None:

    for row in rows:
        if row.verdict not in ("regressed", "improved"):
            continue
        resource, related = resources(benchmark, row.model_id)
        emit_event(
            event=f"{EVENT_PREFIX}.{row.verdict}", resource=resource, related=related, payload=event_payload(row)
        )


def call_hook(config: ApeConfig, regressed: list[RegressionRow]) -> None:
    if not regressed:
        return
    hook = load_hook(config, "on_regression")
    for row in regressed:
        if hook is None:
            break
        try:
            hook(row)
        except Exception as exc:  # a broken hook must not lose the run
            log.warning("on_regression hook failed for %s: %s: %s", row.model_id, type(exc).__name__, exc)
