"""What a new run adds after its report: the history entry, the comparisons, ``latest``.

Runs on the benchmark flow's thread once every model finished and the report was
written. The comparisons are taken before the run joins the history: each model against
its own recent history (:mod:`ape.tasks.stats.history_verdicts`, the detector of
:mod:`ape.tasks.stats.monitor`) and against the pinned baseline (exact McNemar, Holm-corrected
across the run's models); then the run is appended with the monitor's state, then
``latest`` moves.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from ape.schemas.config import ApeConfig
from ape.schemas.data import item_id
from ape.schemas.report import Envelope, RegressionRow
from ape.tasks.after_run.rescore import regrader
from ape.tasks.checking.judge import checker_fingerprint
from ape.tasks.models.fingerprint import model_fingerprint
from ape.tasks.report.diff import changed_settings, compare_items, diff_markdown, flipped_items, write_diff
from ape.tasks.report.sessions_table import load_sessions
from ape.tasks.setup.model import fingerprint_hash, load_data_model, prompt_text
from ape.tasks.stats.aggregate import item_table
from ape.tasks.stats.history_verdicts import Rescorer, history_verdict
from ape.tasks.stats.item_health import flagged_count, item_health
from ape.tasks.stats.regression import compare
from ape.tasks.stats.significance import holm_rejected
from ape.tasks.storage import history
from ape.tasks.storage.data import DataProvider, data_provenance
from ape.tasks.storage.run_files import metadata_by_model
from ape.tasks.storage.runs import RunInfo, run_folder

log = logging.getLogger("ape")
TRUNCATION_MOVE = 0.01  # a change of a percentage point in cut answers is worth a note


def item_hashes(config: ApeConfig) -> dict[str, str]:
    """item id -> hash of the item's content, so a later run pairs only unchanged items."""
    model = load_data_model(config)
    provider = DataProvider.for_config(config.data, model)
    return {
        item_id(item): hashlib.sha256(item.model_dump_json(by_alias=True).encode()).hexdigest()[:16]
        for item in provider
    }


def fingerprints(config: ApeConfig, model_index: int) -> dict[str, str]:
    """Hashes of what shapes the answers (model, prompt, solver) and what grades them."""

    prompt = config.prompt
    answers = {
        "model": model_fingerprint(config.model[model_index]),
        "template": prompt_text(prompt.template_file, prompt.template, "template"),
        "system": prompt_text(prompt.system_file, prompt.system, "system"),
        "solver": config.solver.model_dump(mode="json"),
        "adapter": config.adapter.model_dump(mode="json"),
        "tools": {k: v.model_dump(mode="json") for k, v in sorted(config.tools.items())},
    }
    return {
        "config_fingerprint": fingerprint_hash(answers),
        "checker_fingerprint": fingerprint_hash(checker_fingerprint(config, exclude=frozenset())),
    }


def run_items(sessions: pd.DataFrame, hashes: dict[str, str]) -> pd.DataFrame:
    """Per model and item: mean score, passed (at least half correct), sessions, item hash."""
    items = item_table(sessions)
    return pd.DataFrame(
        {
            "model_id": items["model_id"].astype(str),
            "item_id": items["item_id"].astype(str),
            "item_hash": items["item_id"].astype(str).map(hashes).fillna(""),
            "score": items["score"].astype(float),
            "passed": items["correct_share"] >= 0.5,
            "n": items["n"].astype("int64"),
            "c": items["c"].astype("int64"),
        }
    )


def _summary(envelope: Envelope, model_id: str, sessions: pd.DataFrame) -> dict[str, Any]:
    row = next(r for r in envelope.leaderboard if r.model_id == model_id)
    calibration = envelope.calibration.get(model_id)
    mine = sessions[sessions["model_id"] == model_id]
    return {
        "model_id": model_id,
        "n_items": row.n_items,
        "n_sessions": row.n_sessions,
        "mean_score": row.mean_score,
        "score_se": row.score_se,
        "ci_low": row.ci_low,
        "ci_high": row.ci_high,
        "pass_rate": row.pass_rate,
        "pass_at_k": pd.Series(row.pass_at_k).to_json() if row.pass_at_k else "{}",
        "ece": calibration.ece if calibration else None,
        "brier": calibration.brier if calibration else None,
        "input_tokens": int(mine["input_tokens"].fillna(0).sum()),
        "output_tokens": int(mine["output_tokens"].fillna(0).sum()),
        "cost": None,
        "errors": row.outcomes.ERROR,
        "truncated": row.outcomes.TRUNCATED,
        "check_errors": row.check_errors,
    }


def _comparison_columns(against: str, row: RegressionRow | None) -> dict[str, Any]:
    if row is None:
        return {}
    return {
        f"{against}_run": row.reference_run_id,
        f"{against}_verdict": row.verdict,
        f"{against}_diff": row.mean_diff,
        f"{against}_ci_low": row.ci_low,
        f"{against}_ci_high": row.ci_high,
        f"{against}_p": row.p_value,
        f"{against}_mdc": row.min_detectable_change,
        f"{against}_note": row.note,
    }


def rescorer(config: ApeConfig, top: Path, model_id: str) -> Rescorer:
    """Grades an earlier run's saved answers of ``model_id`` again with ``config``'s adapter and
    checker (:mod:`ape.tasks.after_run.rescore`, no model calls) and returns that run's history items with
    the new scores; None when the run's folder no longer holds its answers. Each run is graded
    once however often it is asked for."""

    @functools.cache
    def grade() -> Callable[[pd.DataFrame], pd.DataFrame]:  # built on first use: most runs need none
        return regrader(config, model_id)

    @functools.cache
    def items_of(run_id: str) -> pd.DataFrame | None:
        folder = run_folder(top, run_id)
        kept = history.read_items(top, run_id, model_id)
        try:
            sessions = load_sessions([folder]) if folder.is_dir() else pd.DataFrame()
            mine = sessions[sessions["model_id"] == model_id] if not sessions.empty else sessions
            if kept.empty or mine.empty:
                log.warning("%s: run %s has no saved answers left to re-score with the new checker", model_id, run_id)
                return None
            log.info("%s: re-scoring run %s's saved answers with this run's checker (no model calls)", model_id, run_id)
            again = item_table(grade()(mine))
        except Exception as exc:  # noqa: BLE001 - the run is still judged, by the single-run limit
            log.warning("%s: run %s could not be re-scored with the new checker (%s); left out", model_id, run_id, exc)
            return None
        graded = again.assign(item_id=again["item_id"].astype(str)).set_index("item_id")
        ids = kept["item_id"].astype(str)
        kept = kept.assign(
            score=ids.map(graded["score"]).astype(float).fillna(kept["score"]),
            passed=ids.map(graded["correct_share"] >= 0.5).fillna(kept["passed"]).astype(bool),
        )
        return kept

    return items_of


def clock() -> pd.Timestamp:
    """The time a new run is recorded as finished (the history's ``finished_at``), in UTC.

    The monitor infers the cadence from these times, so they are read from one place: a test
    replaces this function to lay out a history of nightly, hourly or minutes-apart runs
    through the path users run."""
    return pd.Timestamp.now(tz="UTC")


def join_history(config: ApeConfig, top: Path, info: RunInfo, envelope: Envelope) -> list[RegressionRow]:
    """Judge each model against its own history (and the pinned baseline), then append the run."""
    sessions = pd.read_parquet(Path(config.run.output) / "sessions.parquet")
    hashes = item_hashes(config)
    items = run_items(sessions, hashes)
    data_fp = fingerprint_hash(sorted(hashes.items()))
    source = data_provenance(config.data)  # the data's own hash and, for a dataset, what was read
    data_columns = {
        "data_sha256": source["data_sha256"],
        "hf_dataset": json.dumps(source["hf_dataset"], sort_keys=True) if source["hf_dataset"] else None,
    }
    pinned = history.baseline(top)
    before = history.read_runs(top)
    finished = clock()
    rows: list[dict[str, Any]] = []
    comparisons: list[RegressionRow] = []
    baselines: list[tuple[int, RegressionRow]] = []
    for index, model in enumerate(config.model):
        model_id = model.model_id
        if not any(r.model_id == model_id for r in envelope.leaderboard):
            continue
        prints = {**fingerprints(config, index), "data_fingerprint": data_fp, **data_columns}
        mine = items[items["model_id"] == model_id]
        summary = {
            **_summary(envelope, model_id, sessions),
            **prints,
            "benchmark": config.name,
            "flow_run_id": info.flow_run_id,
            "cache_scope": info.cache_scope,
            "started_at": pd.Timestamp(info.started_at),
            "finished_at": finished,
        }
        regrade = rescorer(config, top, model_id)
        verdict, record = history_verdict(
            top,
            model_id,
            info.run_id,
            mine,
            prints,
            config.monitor,
            runs=before,
            pinned=pinned,
            finished=finished,
            rescore=regrade,
        )
        summary.update(record)
        share = truncated_share(summary["truncated"], summary["n_sessions"])
        if verdict is not None:
            verdict = with_truncations(verdict, share, before)
            comparisons.append(verdict)
            summary.update(_comparison_columns("history", verdict))
        ref = history.run_row(top, pinned, model_id) if pinned and pinned != info.run_id else None
        if ref is not None:
            alpha = _baseline_alpha(config, record["history_runs_per_year"])
            result = _against_baseline(config, top, info.run_id, model_id, ref, mine, prints, regrade, alpha)
            result = with_truncations(result, share, before)
            baselines.append((len(rows), result))
        rows.append(summary)
    for (position, result), keep in zip(baselines, _holm([r for _, r in baselines])):
        if not keep and result.verdict in ("regressed", "improved"):
            note = f"not significant after Holm's correction across the run's {len(baselines)} baseline comparisons"
            result = result.model_copy(update={"verdict": "no detectable change", "note": _join(result.note, note)})
        comparisons.append(result)
        rows[position].update(_comparison_columns("baseline", result))
    history.append_run(top, info.run_id, rows, items)
    for row in comparisons:
        log.info(
            "%s vs %s (runs up to %s): %s (%s)",
            row.model_id,
            row.against,
            row.reference_run_id,
            row.verdict,
            describe(row),
        )
    return comparisons


def truncated_share(truncated: Any, sessions: Any) -> float | None:
    """Share of sessions cut at the token limit; None when the run did not record it."""
    if truncated is None or pd.isna(truncated) or not sessions:
        return None
    return float(truncated) / float(sessions)


def reference_truncations(row: RegressionRow, runs: pd.DataFrame) -> float | None:
    """The share of cut sessions in ``row``'s reference: the pinned run, or the history's runs
    from ``reference_from`` to ``reference_run_id``; None when one of them did not record it."""
    mine = runs[runs["model_id"] == row.model_id] if "truncated" in runs.columns else runs.iloc[0:0]
    if row.against == "history" and row.reference_from is not None:
        ordered = mine.sort_values("finished_at", kind="stable").reset_index(drop=True)
        ids = ordered["run_id"].tolist()
        if row.reference_from not in ids or row.reference_run_id not in ids:
            return None
        chosen = ordered.iloc[ids.index(row.reference_from) : ids.index(row.reference_run_id) + 1]
    else:
        chosen = mine[mine["run_id"] == row.reference_run_id]
    if chosen.empty or chosen["truncated"].isna().any():
        return None
    return truncated_share(chosen["truncated"].sum(), chosen["n_sessions"].sum())


def with_truncations(row: RegressionRow, current: float | None, runs: pd.DataFrame) -> RegressionRow:
    """``row`` with both runs' shares of cut answers and, when they differ, a note saying so:
    answers cut at ``max_tokens`` score 0, so a change in them moves the score without any
    change in what the model can do (a new budget, longer answers, a provider's new default)."""
    reference = reference_truncations(row, runs)
    update: dict[str, Any] = {"truncated_share": current, "reference_truncated_share": reference}
    if current is not None and reference is not None and abs(current - reference) >= TRUNCATION_MOVE:
        note = (
            f"truncations moved from {reference:.0%} to {current:.0%} of sessions (answers cut at the token limit "
            "score 0): part of this change is the token budget, not ability"
        )
        update["note"] = _join(row.note, note)
    return row.model_copy(update=update)


def _against_baseline(
    config: ApeConfig,
    top: Path,
    run_id: str,
    model_id: str,
    ref: dict[str, Any],
    mine: pd.DataFrame,
    prints: dict[str, Any],
    regrade: Rescorer,
    alpha: float,
) -> RegressionRow:
    """One model's items against the pinned baseline run ``ref``: re-scored with this run's
    checker when the checker changed and ``[monitor] rescore_runs`` allows it, so a changed
    checker is not read as a changed model; else the comparison says the checker changed."""
    checker_changed = ref["checker_fingerprint"] != prints["checker_fingerprint"]
    regraded = regrade(ref["run_id"]) if checker_changed and config.monitor.rescore_runs else None
    result = compare(
        mine,
        history.read_items(top, ref["run_id"], model_id) if regraded is None else regraded,
        model_id=model_id,
        run_id=run_id,
        reference_run_id=ref["run_id"],
        against="baseline",
        alpha=alpha,
        checker_changed=checker_changed and regraded is None,
        config_changed=ref["config_fingerprint"] != prints["config_fingerprint"],
    )
    if regraded is not None:
        note = "checker changed: the baseline's saved answers were re-scored with this run's checker"
        result = result.model_copy(update={"rescored_runs": 1, "note": _join(note, result.note)})
    return result


def _baseline_alpha(config: ApeConfig, cadence: float) -> float:
    """Each run's test against the pinned baseline spends half the false-alarm budget (the
    history monitor the other half): two-sided level = budget / runs per year (Bonferroni over time)."""
    return min(0.05, 0.5 * config.monitor.false_alarms_per_year / cadence)


def _holm(rows: list[RegressionRow]) -> list[bool]:
    """Holm (1979) across the models' baseline comparisons of one run, each at its ``alpha``."""
    if not rows:
        return []
    return holm_rejected([r.p_value for r in rows], rows[0].alpha)


def _join(*notes: str | None) -> str | None:
    return "; ".join(n for n in notes if n) or None


def describe(row: RegressionRow) -> str:
    """One line: the difference, its interval, the evidence and what could have been detected."""
    if row.verdict == "not comparable":
        return row.note or "not comparable"
    parts = [f"diff {row.mean_diff:+.3f}"]
    if row.ci_low is not None and row.ci_high is not None:
        parts[0] += f" [{row.ci_low:+.3f}, {row.ci_high:+.3f}]"
    if row.against == "history":
        parts.append(row.evidence or "no test")
        parts.append(f"reference {row.reference_runs} runs {row.reference_from}..{row.reference_run_id}")
        parts.append(f"{row.runs_since_change} runs since the change point")
    else:
        parts.append(f"McNemar p={row.p_value:.3g} at {row.alpha:.2g}" if row.p_value is not None else "no test")
    if row.min_detectable_change is not None:
        parts.append(
            f"next run detects {row.min_detectable_change:.3f}"
            if row.against == "history"
            else f"detectable {row.min_detectable_change:.3f}"
        )
    parts.append(f"{row.n_items} items")
    if row.note:
        parts.append(row.note)
    return ", ".join(parts)


def explain_moves(config: ApeConfig, top: Path, info: RunInfo, rows: list[RegressionRow]) -> list[RegressionRow]:
    """A model that regressed or improved gets its explanation: the run is compared item by item
    with the model's previous run (``diff.md`` and ``diff.parquet`` in the run's folder), and
    the verdict names the flipped items and the settings that changed."""

    moved = {r.model_id for r in rows if r.verdict in ("regressed", "improved")}
    previous = {m: history.previous_run(top, m, info.run_id) for m in moved}
    earlier = {m: p["run_id"] for m, p in previous.items() if p}
    if not earlier:
        return rows
    here = Path(config.run.output)
    meta_now = metadata_by_model([here])
    sessions_now = load_sessions([here])
    explained = {}
    for model_id, run_id in earlier.items():
        folder = run_folder(top, run_id)
        meta_then = metadata_by_model([folder])
        then = load_sessions([folder])
        items = compare_items(then[then["model_id"] == model_id], sessions_now[sessions_now["model_id"] == model_id])
        changes = changed_settings(meta_then, {model_id: meta_now.get(model_id, {})})
        write_diff(here / "diff" / model_id, items, diff_markdown(items, changes, run_id, info.run_id))
        explained[model_id] = (flipped_items(items, model_id), [f"{c.part}: {c.a} -> {c.b}" for c in changes])
    return [
        r.model_copy(update={"flipped_items": explained[r.model_id][0], "changed_settings": explained[r.model_id][1]})
        if r.model_id in explained and r.verdict in ("regressed", "improved")
        else r
        for r in rows
    ]


def flagged_items(top: Path) -> int | None:
    """How many items the history's item-health table flags (:mod:`ape.tasks.stats.item_health`)."""

    items = history.read_all_items(top)
    return None if items.empty else flagged_count(item_health(items, history.read_runs(top)))
