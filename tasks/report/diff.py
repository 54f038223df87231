"""Why did the score move: two runs compared item by item, and what changed between them.

A run-to-run diff answers the question a regression verdict raises. For every model that
both runs hold, each item's mean score over its sessions and whether it passed (at least
half its sessions correct, the rule of :func:`ape.tasks.stats.aggregate.item_table`) are
set side by side; items that went from pass to fail (or back) and the largest score
changes are listed with each session's verdict on both sides (a mean of several sessions
hides which one moved), the first session's answer and the check's reason. Beside them stands what
changed between the runs: every fingerprint a run records in its metadata file
(``fingerprints``: prompt, model, data, solver (with adapter and tools), checker;
``runs_per_data``) and its provenance (model fingerprint, sandbox kind, Python and every
package version).

Written as ``diff.md`` (the printed markdown) and ``diff.parquet`` (one row per model and
item: ``model_id``, ``item_id``, ``score_a``, ``score_b``, ``change``, ``passed_a``,
``passed_b``, ``flip`` (``pass->fail``, ``fail->pass``, or empty), ``answer_a``,
``answer_b``, ``reason_a``, ``reason_b``, ``sessions_a``, ``sessions_b``, ``verdicts_a``,
``verdicts_b``: one mark per session in run order, ``✓`` correct, ``✗`` wrong, ``!`` an
error with no verdict).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ape.tasks.common.inert import md_text, terminal_safe

PASS_TO_FAIL, FAIL_TO_PASS = "pass->fail", "fail->pass"
ANSWER_CHARS = 120  # answers and reasons are cut to this length in the markdown
DIFF_SCHEMA = pa.schema(
    [
        ("model_id", pa.string()),
        ("item_id", pa.string()),
        ("score_a", pa.float64()),
        ("score_b", pa.float64()),
        ("change", pa.float64()),
        ("passed_a", pa.bool_()),
        ("passed_b", pa.bool_()),
        ("flip", pa.string()),
        ("answer_a", pa.string()),
        ("answer_b", pa.string()),
        ("reason_a", pa.string()),
        ("reason_b", pa.string()),
        ("sessions_a", pa.int64()),
        ("sessions_b", pa.int64()),
        ("verdicts_a", pa.string()),
        ("verdicts_b", pa.string()),
    ]
)
CORRECT, WRONG, ERRORED = "✓", "✗", "!"  # one session's verdict in the verdicts columns


@dataclass
class Change:
    """One recorded setting that differs between the runs (``part`` of ``model_id``)."""

    model_id: str
    part: str
    a: Any
    b: Any


def _reason(metadata: Any) -> str | None:
    if not isinstance(metadata, str) or not metadata:
        return None
    try:
        value = json.loads(metadata)
    except ValueError:
        return None
    reason = value.get("reason") if isinstance(value, dict) else None
    return None if reason is None else str(reason)


def _mark(correct: Any, error: Any, check_error: Any) -> str:
    """One session's mark: an error (the model's or the check's) has no verdict."""
    if isinstance(error, str) and error or isinstance(check_error, str) and check_error:
        return ERRORED
    return CORRECT if bool(correct) and not pd.isna(correct) else WRONG


def item_view(sessions: pd.DataFrame) -> pd.DataFrame:
    """Per (model, item): sessions, mean score, passed (at least half correct), each
    session's verdict in run order, the first session's answer and the check's reason (or
    the error message when there is no check)."""
    if sessions.empty:
        columns = ["model_id", "item_id", "sessions", "score", "passed", "verdicts", "answer", "reason"]
        return pd.DataFrame(columns=columns)
    ordered = sessions.sort_values(["model_id", "item_id", "run_index"])
    first = ordered.groupby(["model_id", "item_id"], sort=False).first()
    grouped = ordered.groupby(["model_id", "item_id"], sort=False)
    marks = [
        _mark(correct, error, check_error)
        for correct, error, check_error in zip(
            ordered["correct"], ordered["error_message"], ordered["check_error_message"]
        )
    ]
    verdicts = pd.Series(marks, index=ordered.index).groupby([ordered["model_id"], ordered["item_id"]], sort=False)
    view = pd.DataFrame(
        {
            "sessions": grouped.size(),
            "score": grouped["score"].mean(),
            "passed": grouped["correct"].mean() >= 0.5,
            "verdicts": verdicts.agg("".join),
            "answer": first["solution"].where(first["solution"].notna(), first["raw_output"]),
            "reason": [
                _reason(meta) or err or check_err
                for meta, err, check_err in zip(
                    first["check_metadata"], first["error_message"], first["check_error_message"]
                )
            ],
        }
    )
    return view.reset_index()


def compare_items(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """The per-item table of the diff (columns in the module docstring), for the models both
    sides hold; items of only one side have NaN on the other."""
    left, right = item_view(a), item_view(b)
    models = set(left["model_id"]) & set(right["model_id"])
    left, right = left[left["model_id"].isin(models)], right[right["model_id"].isin(models)]
    merged = left.merge(right, on=["model_id", "item_id"], how="outer", suffixes=("_a", "_b"))
    merged["change"] = merged["score_b"] - merged["score_a"]
    both = merged["passed_a"].notna() & merged["passed_b"].notna()
    was, now = merged["passed_a"].astype("boolean"), merged["passed_b"].astype("boolean")
    merged["flip"] = ""
    merged.loc[both & was & ~now, "flip"] = PASS_TO_FAIL
    merged.loc[both & ~was & now, "flip"] = FAIL_TO_PASS
    return merged[DIFF_SCHEMA.names].sort_values(["model_id", "item_id"]).reset_index(drop=True)


def _flat(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"args": {"accuracy": 0.6}}`` -> ``{"args.accuracy": 0.6}``."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            flat.update(_flat(item, name + "."))
        else:
            flat[name] = item
    return flat


def _parts(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The comparable settings of one model's metadata.json, flattened to part -> value."""
    parts: dict[str, Any] = {}
    fingerprints = metadata.get("fingerprints") or {}
    for name, value in (fingerprints.get("generation") or {}).items():
        parts[f"fingerprint {name}"] = value
    parts["fingerprint checker"] = fingerprints.get("checker")
    parts["runs_per_data"] = metadata.get("runs_per_data")
    provenance = metadata.get("provenance") or {}
    model = (provenance.get("models") or {}).get(str(metadata.get("model")), {}).get("fingerprint")
    for key, value in _flat(model if isinstance(model, dict) else {}).items():
        parts[f"model {key}"] = value
    parts["sandbox"] = provenance.get("sandbox")
    parts["python"] = provenance.get("python")
    for package, version in (provenance.get("packages") or {}).items():
        parts[f"package {package}"] = version
    return parts


def changed_settings(a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]]) -> list[Change]:
    """Every recorded setting that differs, per model both runs hold (a setting one run does
    not record counts as changed only when the other records it)."""
    changes = []
    for model_id in sorted(set(a) & set(b)):
        left, right = _parts(a[model_id]), _parts(b[model_id])
        for part in sorted(set(left) | set(right)):
            if left.get(part) != right.get(part):
                changes.append(Change(model_id, part, left.get(part), right.get(part)))
    return changes


def _cut(value: Any) -> str:
    """Answers, reasons, ids and settings as inert markdown (:func:`md_text`), cut short."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    text = " ".join(terminal_safe(value).split())
    return md_text(text if len(text) <= ANSWER_CHARS else text[: ANSWER_CHARS - 1] + "…")


def _marks(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _number(value: Any) -> str:
    return "" if value is None or pd.isna(value) else f"{value:.3f}"


def unmatched(items: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """Per model: (items only the first run holds, items only the second holds)."""
    out: dict[str, tuple[int, int]] = {}
    for model_id, rows in items.groupby("model_id", sort=True):
        only_a, only_b = int(rows["sessions_b"].isna().sum()), int(rows["sessions_a"].isna().sum())
        if only_a or only_b:
            out[str(model_id)] = (only_a, only_b)
    return out


def _what_changed(
    items: pd.DataFrame, changes: list[Change], a: str, b: str, only_models: tuple[list[str], list[str]]
) -> list[str]:
    """The "what changed" section. It states only what the findings above support: models or
    items that one run lacks are changes too, so "nothing changed" is said only when the
    runs hold the same models and items and no recorded setting differs."""
    lines = ["## What changed between the runs", ""]
    if items.empty:
        return [*lines, "Nothing to compare: the runs hold no model in common.", ""]
    for label, models in ((a, only_models[0]), (b, only_models[1])):
        if models:
            names = ", ".join(_cut(m) for m in models)
            lines.append(f"- only in {label}: model{'s' if len(models) > 1 else ''} {names}")
    for model_id, (only_a, only_b) in unmatched(items).items():
        lines.append(f"- {_cut(model_id)}: {only_a} items only in {a}, {only_b} only in {b} (left out of the flips)")
    differs = len(lines) > 2
    if differs:
        lines.append("")
    if not changes:
        lines.append(
            "Same fingerprints, sandbox, Python and package versions for the models both runs hold."
            if differs
            else "Nothing that the runs record: same fingerprints, sandbox, Python and package versions."
        )
        return [*lines, ""]
    lines += ["| Model | Setting | " + a + " | " + b + " |", "|---|---|---|---|"]
    lines += [f"| {_cut(c.model_id)} | {_cut(c.part)} | {_cut(c.a)} | {_cut(c.b)} |" for c in changes]
    return [*lines, ""]


def diff_markdown(
    items: pd.DataFrame,
    changes: list[Change],
    a: str,
    b: str,
    *,
    top: int = 10,
    only_models: tuple[list[str], list[str]] = ([], []),
) -> str:
    """The diff as markdown: per model, a summary line, the flipped items and the largest
    score changes with each session's verdict, the first session's answer and its reason
    on both sides; then what changed between the runs
    (``only_models``: the models only ``a``, and only ``b``, holds)."""
    lines = [f"# Diff: {a} -> {b}", ""]
    if items.empty:
        lines += ["The two runs hold no model in common.", ""]
    for model_id, rows in items.groupby("model_id", sort=True):
        flips = rows[rows["flip"] != ""]
        down, up = int((rows["flip"] == PASS_TO_FAIL).sum()), int((rows["flip"] == FAIL_TO_PASS).sum())
        mean_a, mean_b = rows["score_a"].mean(), rows["score_b"].mean()
        lines += [
            f"## {_cut(model_id)}",
            "",
            f"Mean item score {_number(mean_a)} -> {_number(mean_b)} over {len(rows)} items; "
            f"{down} went from pass to fail, {up} from fail to pass.",
            "",
        ]
        moved = rows[rows["change"].abs() > 0]
        moved = moved.loc[moved["change"].abs().sort_values(ascending=False).index]
        shown = pd.concat([flips, moved]).drop_duplicates(subset=["item_id"]).head(top)
        if not shown.empty:
            several = bool((rows[["sessions_a", "sessions_b"]].max(axis=1) > 1).any())
            if several:
                lines += [
                    f"Sessions: {CORRECT} correct, {WRONG} wrong, {ERRORED} error, in run order; "
                    "the answer and reason are the first session's.",
                    "",
                ]
            lines += [
                f"| Item | Change | Score {a} | Score {b} | Sessions {a} | Sessions {b} "
                f"| Answer {a} | Answer {b} | Reason {a} | Reason {b} |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            for row in shown.itertuples():
                label = row.flip or f"{row.change:+.3f}"
                lines.append(
                    f"| {_cut(row.item_id)} | {label} | {_number(row.score_a)} | {_number(row.score_b)} | "
                    f"{_marks(row.verdicts_a)} | {_marks(row.verdicts_b)} | "
                    f"{_cut(row.answer_a)} | {_cut(row.answer_b)} | {_cut(row.reason_a)} | {_cut(row.reason_b)} |"
                )
            lines.append("")
    lines += _what_changed(items, changes, a, b, only_models)
    return "\n".join(lines)


def write_diff(out_dir: Path, items: pd.DataFrame, markdown: str) -> tuple[Path, Path]:
    """``diff.md`` and ``diff.parquet`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "diff.md"
    md.write_text(markdown + "\n", encoding="utf-8")
    table = items.astype(object).where(items.notna(), None)
    for column in ("answer_a", "answer_b", "reason_a", "reason_b", "verdicts_a", "verdicts_b", "item_id", "model_id"):
        table[column] = [None if v is None else str(v) for v in table[column]]
    parquet = out_dir / "diff.parquet"
    pq.write_table(pa.Table.from_pandas(table, schema=DIFF_SCHEMA, preserve_index=False), parquet)
    return md, parquet


def flipped_items(items: pd.DataFrame, model_id: str, limit: int = 20) -> dict[str, list[str]]:
    """The item ids of ``model_id`` that flipped, by direction (for an alert's payload)."""
    rows = items[items["model_id"] == model_id]
    return {
        PASS_TO_FAIL: rows.loc[rows["flip"] == PASS_TO_FAIL, "item_id"].astype(str).head(limit).tolist(),
        FAIL_TO_PASS: rows.loc[rows["flip"] == FAIL_TO_PASS, "item_id"].astype(str).head(limit).tolist(),
    }
