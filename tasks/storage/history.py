"""The run history: every finished new run, as Parquet files read with pandas or pyarrow.

Layout::

    OUTPUT/history/runs.parquet             one row per run and model: the run's summary
    OUTPUT/history/items/<run id>.parquet   one row per model and item: its correctness
    OUTPUT/history/baseline.json            {"run_id": ...}, set by ``ape baseline``

Read it directly: ``pandas.read_parquet("OUTPUT/history/runs.parquet")`` and
``pandas.read_parquet("OUTPUT/history/items")`` (a dataset of one file per run).

``runs`` columns: run_id, benchmark, model_id, flow_run_id, cache_scope (string);
started_at, finished_at (timestamp[us, UTC]); n_items, n_sessions (int64); mean_score,
score_se, ci_low, ci_high, pass_rate (float64); pass_at_k (string: JSON object k -> value);
ece, brier (float64, null without confidences); input_tokens, output_tokens (int64);
cost (float64, null when unknown); errors, check_errors (int64); config_fingerprint,
data_fingerprint, checker_fingerprint (string); and for ``history`` (the model's own
recent history), ``baseline`` (the pinned run) and ``previous`` (histories written before
the history monitor): <against>_run (string: the reference's newest run), <against>_verdict
(string), <against>_diff, <against>_ci_low, <against>_ci_high, <against>_p, <against>_mdc
(float64), <against>_note (string). The monitor's evidence and state after the run:
history_z, history_se, history_limit (L), history_h, history_k, history_cusum_up,
history_cusum_down (before a reset), history_reference_mean (float64);
history_reference_from (string), history_reference_runs, history_since (int64);
history_start (string: the oldest run the next run's reference may hold), history_change
(string: "first", "alarm", "fingerprint" or "baseline" where a new reference starts),
history_joins (bool: the run belongs to the reference; an alarming run does not),
history_runs_per_year (float64), history_evidence (string). Files written before these
columns existed read with them null.

``items`` columns: run_id, model_id, item_id, item_hash (string: the item's content);
score (float64: mean over its sessions); passed (bool: at least half correct);
n, c (int64: sessions, correct sessions).

Crash safety: every file is written under a hidden temporary name, fsynced and renamed
into place (readers skip names starting with "."). A run's items are written first; the
run enters the history when ``runs.parquet`` is replaced by a copy holding its rows, in
one rename. So a run is in the history once (recording the same run id again replaces
its rows) or not at all; the items file of a run that crashed in between is removed by
the next run that is recorded. The summaries live in one small file, rewritten per run
(a year of nightly runs of three models is about a thousand rows), so reading the
history opens one file, not one per run. Writers take a lock on ``history/.lock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ape.schemas.errors import ApeError

HISTORY_DIR = "history"
RUNS_FILE = "runs.parquet"
ITEMS = "items"
BASELINE_FILE = "baseline.json"
AGAINST = ("history", "previous", "baseline")  # "previous": written by versions before the monitor

ITEMS_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("model_id", pa.string()), ("item_id", pa.string()),
    ("item_hash", pa.string()), ("score", pa.float64()), ("passed", pa.bool_()),
    ("n", pa.int64()), ("c", pa.int64()),
])  # fmt: skip

_COMPARISON_FIELDS = [
    (f"{against}_{name}", kind)
    for against in AGAINST
    for name, kind in (("run", pa.string()), ("verdict", pa.string()), ("diff", pa.float64()),
                       ("ci_low", pa.float64()), ("ci_high", pa.float64()), ("p", pa.float64()),
                       ("mdc", pa.float64()), ("note", pa.string()))
]  # fmt: skip
# the monitor's evidence and state after the run (see ape.tasks.stats.monitor); null in older histories
MONITOR_FIELDS = [
    ("history_z", pa.float64()), ("history_se", pa.float64()), ("history_limit", pa.float64()),
    ("history_h", pa.float64()), ("history_k", pa.float64()), ("history_cusum_up", pa.float64()),
    ("history_cusum_down", pa.float64()), ("history_reference_mean", pa.float64()),
    ("history_reference_from", pa.string()), ("history_reference_runs", pa.int64()),
    ("history_since", pa.int64()), ("history_start", pa.string()), ("history_change", pa.string()),
    ("history_joins", pa.bool_()), ("history_runs_per_year", pa.float64()), ("history_evidence", pa.string()),
]  # fmt: skip
RUNS_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("benchmark", pa.string()), ("model_id", pa.string()),
    ("flow_run_id", pa.string()), ("cache_scope", pa.string()),
    ("started_at", pa.timestamp("us", tz="UTC")), ("finished_at", pa.timestamp("us", tz="UTC")),
    ("n_items", pa.int64()), ("n_sessions", pa.int64()), ("mean_score", pa.float64()),
    ("score_se", pa.float64()), ("ci_low", pa.float64()), ("ci_high", pa.float64()),
    ("pass_rate", pa.float64()), ("pass_at_k", pa.string()), ("ece", pa.float64()),
    ("brier", pa.float64()), ("input_tokens", pa.int64()), ("output_tokens", pa.int64()),
    ("cost", pa.float64()), ("errors", pa.int64()), ("check_errors", pa.int64()),
    ("config_fingerprint", pa.string()), ("data_fingerprint", pa.string()),
    ("checker_fingerprint", pa.string()), *_COMPARISON_FIELDS, *MONITOR_FIELDS,
])  # fmt: skip


def history_dir(top: Path) -> Path:
    return Path(top) / HISTORY_DIR


def _write_atomically(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as handle:
            pq.write_table(table, handle, compression="zstd")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    descriptor = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(descriptor)  # the rename itself survives a power cut
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def append_run(top: Path, run_id: str, runs: list[dict], items: pd.DataFrame) -> None:
    """Add (or replace) one run: its per-item rows first, then its summary rows."""
    root = history_dir(top)
    item_rows = pa.Table.from_pandas(
        items.assign(run_id=run_id)[ITEMS_SCHEMA.names], schema=ITEMS_SCHEMA, preserve_index=False
    )
    new_rows = pa.Table.from_pylist([{**row, "run_id": run_id} for row in runs], schema=RUNS_SCHEMA)
    with _locked(root):
        _write_atomically(item_rows, root / ITEMS / f"{run_id}.parquet")
        path = root / RUNS_FILE
        if path.is_file():
            old = pq.read_table(path, schema=RUNS_SCHEMA)
            old = old.filter(pc.not_equal(old["run_id"], run_id))
            new_rows = pa.concat_tables([old, new_rows])
        _write_atomically(new_rows, path)
        known = set(new_rows["run_id"].to_pylist())
        for leftover in (root / ITEMS).glob("*.parquet"):
            if leftover.stem not in known:  # items of a run that crashed before it was recorded
                leftover.unlink(missing_ok=True)


def read_runs(top: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """Every run's summary rows, oldest first (empty with the schema's columns when none)."""
    path = history_dir(top) / RUNS_FILE
    if not path.is_file():
        return RUNS_SCHEMA.empty_table().to_pandas()[columns or RUNS_SCHEMA.names]
    frame = pq.read_table(path, columns=columns, schema=RUNS_SCHEMA).to_pandas()
    order = [c for c in ("run_id", "model_id") if c in frame.columns]
    return frame.sort_values(order).reset_index(drop=True) if order else frame


def read_items(top: Path, run_id: str, model_id: str | None = None) -> pd.DataFrame:
    """One run's per-item rows (of one model, if given)."""
    path = history_dir(top) / ITEMS / f"{run_id}.parquet"
    filters = [("model_id", "==", model_id)] if model_id is not None else None
    return pq.read_table(path, filters=filters).to_pandas()


def read_all_items(top: Path) -> pd.DataFrame:
    """Every run's items (the ``items`` columns above); empty when none were recorded."""
    folder = history_dir(top) / "items"
    if not folder.is_dir() or not any(folder.glob("*.parquet")):
        return pd.DataFrame(columns=["run_id", "model_id", "item_id", "item_hash", "score", "passed", "n", "c"])
    return pd.read_parquet(folder)


def previous_run(top: Path, model_id: str, before: str) -> dict | None:
    """The summary row of the newest run of ``model_id`` older than run ``before``."""
    runs = read_runs(top)
    earlier = runs[(runs["model_id"] == model_id) & (runs["run_id"] < before)]
    return None if earlier.empty else earlier.iloc[-1].to_dict()


def run_row(top: Path, run_id: str, model_id: str) -> dict | None:
    runs = read_runs(top)
    match = runs[(runs["run_id"] == run_id) & (runs["model_id"] == model_id)]
    return None if match.empty else match.iloc[0].to_dict()


def baseline(top: Path) -> str | None:
    path = history_dir(top) / BASELINE_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("run_id")


def set_baseline(top: Path, run_id: str) -> str:
    """Pin ``run_id`` (or "latest": the newest run) as the baseline every new run is compared with."""
    runs = read_runs(top, columns=["run_id"])
    if runs.empty:
        raise ApeError(
            "no run history here",
            where=str(history_dir(top)),
            hint="a run started with `ape run --new-run` or by a schedule records one",
        )
    known = sorted(set(runs["run_id"]))
    if run_id == "latest":
        run_id = known[-1]
    if run_id not in known:
        raise ApeError(
            f"no run '{run_id}' in the history", where=str(history_dir(top)), hint=f"runs: {', '.join(known[-5:])}"
        )
    path = history_dir(top) / BASELINE_FILE
    temporary = path.with_name(f".{BASELINE_FILE}.tmp")
    temporary.write_text(json.dumps({"run_id": run_id}) + "\n", encoding="utf-8")
    os.replace(temporary, path)
    return run_id
