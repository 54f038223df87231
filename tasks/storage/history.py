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
data_fingerprint, checker_fingerprint (string); data_sha256 (string: the data file's bytes, or
a Hugging Face dataset's rows), hf_dataset (string: JSON of the dataset's id, configuration,
split, revision, commit, fingerprint and rows' hash; null for a data file); and for ``history`` (the model's own
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

Damage and rebuilding: once a run is in the history, its own rows are also kept in its
run folder (``OUTPUT/runs/<run id>/history.parquet``, same columns as ``runs``, and
``history_items.parquet``, same columns as ``items``). A history file that cannot be read
(truncated, a disk error, a copy cut short) is found by :func:`check_history` before a run
calls any model, and ``ape history OUTPUT --rebuild`` (:func:`rebuild`) writes the history
again from those copies: the same rows, so the same verdicts and the same reference for
the next run. The replaced history is moved aside whole to ``OUTPUT/history.bak-<time>``.
Runs recorded by APE versions that kept no copy cannot be rebuilt and are named.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ape.schemas.errors import ApeError
from ape.tasks.storage.file_modes import created_file_mode
from ape.tasks.storage.runs import RUN_ID_PATTERN, read_info, runs_root

if TYPE_CHECKING:  # pandas itself on use: check_history runs before a run's first model call
    import pandas as pd

HISTORY_DIR = "history"
RUNS_FILE = "runs.parquet"
ITEMS = "items"
BASELINE_FILE = "baseline.json"
RUN_COPY = "history.parquet"  # in OUTPUT/runs/<run id>/: the run's own rows of runs.parquet
RUN_ITEMS_COPY = "history_items.parquet"  # and of items/<run id>.parquet
AGAINST = ("history", "previous", "baseline")  # "previous": written by versions before the monitor

ITEMS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("model_id", pa.string()),
        ("item_id", pa.string()),
        ("item_hash", pa.string()),
        ("score", pa.float64()),
        ("passed", pa.bool_()),
        ("n", pa.int64()),
        ("c", pa.int64()),
    ]
)

_COMPARISON_FIELDS = [
    (f"{against}_{name}", kind)
    for against in AGAINST
    for name, kind in (
        ("run", pa.string()),
        ("verdict", pa.string()),
        ("diff", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("p", pa.float64()),
        ("mdc", pa.float64()),
        ("note", pa.string()),
    )
]
# the monitor's evidence and state after the run (see ape.tasks.stats.monitor); null in older histories
MONITOR_FIELDS = [
    ("history_z", pa.float64()),
    ("history_se", pa.float64()),
    ("history_limit", pa.float64()),
    ("history_h", pa.float64()),
    ("history_k", pa.float64()),
    ("history_cusum_up", pa.float64()),
    ("history_cusum_down", pa.float64()),
    ("history_reference_mean", pa.float64()),
    ("history_reference_from", pa.string()),
    ("history_reference_runs", pa.int64()),
    ("history_since", pa.int64()),
    ("history_start", pa.string()),
    ("history_change", pa.string()),
    ("history_joins", pa.bool_()),
    ("history_runs_per_year", pa.float64()),
    ("history_evidence", pa.string()),
]
RUNS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("benchmark", pa.string()),
        ("model_id", pa.string()),
        ("flow_run_id", pa.string()),
        ("cache_scope", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("n_items", pa.int64()),
        ("n_sessions", pa.int64()),
        ("mean_score", pa.float64()),
        ("score_se", pa.float64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("pass_rate", pa.float64()),
        ("pass_at_k", pa.string()),
        ("ece", pa.float64()),
        ("brier", pa.float64()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("cost", pa.float64()),
        ("errors", pa.int64()),
        ("truncated", pa.int64()),  # sessions cut at the token limit; null in runs recorded before it was
        ("check_errors", pa.int64()),
        ("config_fingerprint", pa.string()),
        ("data_fingerprint", pa.string()),
        ("checker_fingerprint", pa.string()),
        ("data_sha256", pa.string()),  # the data file's bytes or a dataset's rows; null before it was kept
        ("hf_dataset", pa.string()),  # a Hugging Face dataset's record (JSON); null for a data file
        *_COMPARISON_FIELDS,
        *MONITOR_FIELDS,
    ]
)


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
        _keep_copy(top, run_id, new_rows.filter(pc.equal(new_rows["run_id"], run_id)), item_rows)
        _backfill_copies(top, new_rows)


def _keep_copy(top: Path, run_id: str, rows: pa.Table, items: pa.Table) -> None:
    """The run's own history rows, kept in its run folder after it entered the history, so a
    damaged history can be rebuilt (:func:`rebuild`). Runs without a run folder keep none."""
    folder = runs_root(top) / run_id
    if not RUN_ID_PATTERN.match(run_id) or not folder.is_dir():
        return
    _write_atomically(items, folder / RUN_ITEMS_COPY)
    _write_atomically(rows, folder / RUN_COPY)


def _backfill_copies(top: Path, rows: pa.Table) -> None:
    """Runs recorded by APE versions that kept no copy get theirs now, while the history
    still reads, so that a later damage can be rebuilt from every run folder."""
    root = history_dir(top)
    for run_id in sorted(set(rows["run_id"].to_pylist())):
        folder = runs_root(top) / run_id
        items = root / ITEMS / f"{run_id}.parquet"
        if not RUN_ID_PATTERN.match(run_id) or not folder.is_dir() or (folder / RUN_COPY).exists():
            continue
        try:
            kept = _read_table(items, top, schema=ITEMS_SCHEMA)
            _keep_copy(top, run_id, rows.filter(pc.equal(rows["run_id"], run_id)), kept)
        except (ApeError, OSError):
            continue  # best effort: recording the new run must not fail over an old run's copy


def rebuild_hint(top: Path) -> str:
    """What to do about a damaged history: the command that rebuilds it."""
    return f"rebuild it from the run folders with `ape history {top} --rebuild` (the old history is kept aside)"


def _unreadable(path: Path, exc: BaseException, top: Path) -> ApeError:
    """The one line for a history file that cannot be read, naming it and the way out."""
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return ApeError(f"the run history cannot be read: {reason[:300]}", where=str(path), hint=rebuild_hint(top))


def _read_table(path: Path, top: Path, **options: object) -> pa.Table:
    """``pq.read_table`` whose failures (truncated file, wrong format, disk error) are one ApeError."""
    try:
        return pq.read_table(path, **options)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(path, exc, top) from None


def _check_footer(path: Path, top: Path) -> None:
    """An items file's footer and columns (what a truncated or foreign file lacks): a year of
    nightly runs is hundreds of files, so the preflight reads their footers, not their rows."""
    try:
        names = set(pq.read_schema(path).names)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(path, exc, top) from None
    missing = [name for name in ITEMS_SCHEMA.names if name not in names]
    if missing:
        raise ApeError(
            f"the run history's items file lacks the columns {', '.join(missing)}",
            where=str(path),
            hint=rebuild_hint(top),
        )


def check_history(output_dir: Path) -> None:
    """Raise one ApeError naming the file when OUTPUT's history cannot be read.

    Called before a run calls any model (``ape run``, ``ape validate``, a served run): a
    damaged ``runs.parquet`` or items file would otherwise be found only when the finished
    run is recorded, after every model call was paid for, and as a bare Arrow error. Reads
    the summaries and ``baseline.json``, and the footer and columns of every recorded run's
    items file; no history at all is fine (the first new run starts one).
    """
    top = Path(output_dir)
    root = history_dir(top)
    if not root.is_dir():
        return
    path = root / RUNS_FILE
    run_ids: list[str] = []
    if path.exists():
        table = _read_table(path, top, schema=RUNS_SCHEMA)
        run_ids = sorted(set(table["run_id"].to_pylist()))
    for run_id in run_ids:
        items = root / ITEMS / f"{run_id}.parquet"
        if not items.is_file():
            raise ApeError(
                f"the run history lists run {run_id} but its items file is missing",
                where=str(items),
                hint=rebuild_hint(top),
            )
        _check_footer(items, top)
    mark = root / BASELINE_FILE
    if mark.exists():
        try:
            value = json.loads(mark.read_text(encoding="utf-8"))
            if not isinstance(value, dict) or not isinstance(value.get("run_id"), str):
                raise ValueError('not {"run_id": "..."}')
        except (OSError, ValueError) as exc:
            raise ApeError(
                f"the pinned baseline cannot be read: {exc}",
                where=str(mark),
                hint=f"pin it again with `ape baseline {top} RUN_ID` (or `latest`), or delete the file",
            ) from None


@dataclass
class Rebuilt:
    """What :func:`rebuild` did: the runs restored, those it could not restore and why."""

    runs: list[str] = field(default_factory=list)
    rows: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # run id -> why it is not in the history
    kept: Path | None = None  # where the replaced history was moved
    baseline: str | None = None  # the pinned run, when it was kept


def _copies_of(folder: Path, top: Path) -> tuple[pa.Table, pa.Table] | str:
    """(rows, items) a run folder kept of its history entry, or why it has none."""
    rows_path, items_path = folder / RUN_COPY, folder / RUN_ITEMS_COPY
    if not rows_path.is_file() or not items_path.is_file():
        try:
            info = read_info(folder)
        except ValueError:
            info = None
        if info is None or info.status != "finished":
            return "not finished, so never recorded"
        return "recorded by an APE version that kept no copy of its history rows in the run folder"
    try:
        return _read_table(rows_path, top, schema=RUNS_SCHEMA), _read_table(items_path, top, schema=ITEMS_SCHEMA)
    except ApeError as exc:
        return exc.message


def rebuild(top: Path) -> Rebuilt:
    """Write OUTPUT's history again from the copies its run folders kept (see the module doc).

    The rows are the ones recorded when each run finished, so every verdict, the monitor's
    state and the reference of the next run come out as they were. The history that was
    there (damaged or not) is moved aside whole to ``history.bak-<UTC time>``; the pinned
    baseline is kept when its run is rebuilt. Callers hold the output folder's lock.
    """
    top = Path(top)
    root = history_dir(top)
    found = Rebuilt()
    tables: list[pa.Table] = []
    items: dict[str, pa.Table] = {}
    folders = sorted(p for p in runs_root(top).iterdir() if p.is_dir()) if runs_root(top).is_dir() else []
    for folder in folders:
        if not RUN_ID_PATTERN.match(folder.name):
            continue
        copies = _copies_of(folder, top)
        if isinstance(copies, str):
            found.skipped[folder.name] = copies
            continue
        rows, run_items = copies
        rows = rows.filter(pc.equal(rows["run_id"], folder.name))
        if rows.num_rows == 0:
            found.skipped[folder.name] = f"its {RUN_COPY} holds no row of this run"
            continue
        tables.append(rows)
        items[folder.name] = run_items.filter(pc.equal(run_items["run_id"], folder.name))
        found.runs.append(folder.name)
    if not tables:
        raise ApeError(
            "no run folder here keeps a copy of its history rows, so there is nothing to rebuild from",
            where=str(runs_root(top)),
            hint="runs recorded by earlier APE versions cannot be rebuilt; move the damaged history "
            "aside to start a new one with the next `ape run --new-run`",
        )
    pinned = _pinned_or_none(root)
    if root.exists():
        found.kept = top / f"{HISTORY_DIR}.bak-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}"
        os.replace(root, found.kept)
    with _locked(root):
        for run_id, run_items in items.items():
            _write_atomically(run_items, root / ITEMS / f"{run_id}.parquet")
        summary = pa.concat_tables(tables)
        _write_atomically(summary, root / RUNS_FILE)
        found.rows = summary.num_rows
        if pinned in items:
            shutil.copy2(Path(str(found.kept)) / BASELINE_FILE, root / BASELINE_FILE)
            os.chmod(root / BASELINE_FILE, created_file_mode())  # not the old file's mode
            found.baseline = pinned
    return found


def _pinned_or_none(root: Path) -> str | None:
    """The pinned run of a history that may be damaged (None when unreadable or unset)."""
    try:
        value = json.loads((root / BASELINE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    run_id = value.get("run_id") if isinstance(value, dict) else None
    return run_id if isinstance(run_id, str) else None


def read_runs(top: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """Every run's summary rows, oldest first (empty with the schema's columns when none)."""
    path = history_dir(top) / RUNS_FILE
    if not path.is_file():
        return RUNS_SCHEMA.empty_table().to_pandas()[columns or RUNS_SCHEMA.names]
    frame = _read_table(path, top, columns=columns, schema=RUNS_SCHEMA).to_pandas()
    order = [c for c in ("run_id", "model_id") if c in frame.columns]
    return frame.sort_values(order).reset_index(drop=True) if order else frame


def read_items(top: Path, run_id: str, model_id: str | None = None) -> pd.DataFrame:
    """One run's per-item rows (of one model, if given)."""
    path = history_dir(top) / ITEMS / f"{run_id}.parquet"
    filters = [("model_id", "==", model_id)] if model_id is not None else None
    if not path.is_file():
        raise ApeError(f"the run history has no items file for run {run_id}", where=str(path), hint=rebuild_hint(top))
    return _read_table(path, top, filters=filters).to_pandas()


def read_all_items(top: Path) -> pd.DataFrame:
    """Every run's items (the ``items`` columns above); empty when none were recorded."""
    import pandas as pd

    folder = history_dir(top) / "items"
    if not folder.is_dir() or not any(folder.glob("*.parquet")):
        return pd.DataFrame(columns=["run_id", "model_id", "item_id", "item_hash", "score", "passed", "n", "c"])
    try:
        return pd.read_parquet(folder)
    except (pa.ArrowException, OSError) as exc:
        raise _unreadable(folder, exc, Path(top)) from None


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
