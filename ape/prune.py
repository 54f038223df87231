"""``ape prune``: which run folders of an output folder nothing needs any more, and removing them.

Why: every new run (a schedule, a deployment, ``ape run --new-run``) gets a folder of its own
under ``OUTPUT/runs/`` with its results, transcripts and model-call cache, and nothing ever
removes one: a year of nightly runs keeps a year of transcripts. The history (Parquet) keeps
each run's summary and per-item rows on its own, so most old folders can go, but some are
still needed, and :func:`decide` keeps them, each with its reason:

- the run ``OUTPUT/latest`` points at;
- the pinned baseline (``ape baseline``), which every new run is compared with;
- each model's current reference: the runs since its last change point (the history's
  ``history_start``), which alerts and ``ape diff`` compare a new run with;
- an unfinished run (``run.json`` says running, or cannot be read): ``ape retry`` resumes it;
- a run whose batch ledger has a batch in flight: the provider still owes its answers, and
  without the ledger a resumed run would pay for them again;
- a finished run the history does not hold: its results are nowhere else;
- a run newer than ``older_than_days``.

A removed run keeps ``run.json`` (marked ``pruned_at``) and its two history copies
(``history.parquet``, ``history_items.parquet``, a few kilobytes), so ``ape history
--rebuild`` can still write the history again after damage. Everything else of the folder
goes, its cache included; the shared cache (``OUTPUT/.cache``, ``cache_scope = "shared"``)
stays, since any later run may reuse it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd

from ape.schemas.errors import ApeError
from ape.tasks.models.batch.batcher import LEDGER, open_batches
from ape.tasks.storage.history import RUN_COPY, RUN_ITEMS_COPY, baseline, check_history, history_dir, read_runs
from ape.tasks.storage.runs import LATEST, RUN_FILE, RUN_ID_PATTERN, RunInfo, read_info, runs_root, write_info

KEPT_FILES = frozenset({RUN_FILE, RUN_COPY, RUN_ITEMS_COPY})


@dataclass(frozen=True)
class Decision:
    """One run folder: removable (``keep`` is None) or kept, and why; ``size`` is what removing
    it gives back (bytes)."""

    run_id: str
    folder: Path
    keep: str | None
    size: int


def decide(top: Path, older_than_days: float, now: datetime | None = None) -> list[Decision]:
    """Every run folder under ``top/runs`` (oldest first) with what :func:`prune` would do to it.

    Raises :class:`ApeError` when ``top`` is not an output folder with runs, or when its
    history cannot be read (what it needs cannot be told then; ``ape history --rebuild``).
    """
    top = Path(top)
    check_arguments(top, older_than_days)
    root = runs_root(top)
    needed, recorded = _needed_by_history(top)
    latest = _latest(top)
    cutoff = (now or datetime.now(UTC)) - timedelta(days=older_than_days)
    decisions = []
    for folder in sorted(root.iterdir()):
        if not folder.is_dir() or folder.is_symlink() or not RUN_ID_PATTERN.match(folder.name):
            continue  # not a run folder of APE's: left alone
        keep = _why_kept(folder, latest, needed, recorded, cutoff)
        decisions.append(Decision(folder.name, folder, keep, 0 if keep else _removable_size(folder)))
    return decisions


def check_arguments(top: Path, older_than_days: float) -> None:
    """One line for an output folder with no runs, or a negative age; checked before the
    command takes the output folder's lock (which would create a mistyped folder)."""
    if not runs_root(Path(top)).is_dir():
        raise ApeError(
            "no runs/ folder here: nothing to prune",
            where=str(top),
            hint="give the output folder of runs started with `ape run --new-run` or by a schedule",
        )
    if older_than_days < 0:
        raise ApeError(f"{older_than_days:g} days is negative", where="--older-than", hint="give days, 0 or more")


def prune(decisions: list[Decision], now: datetime | None = None) -> int:
    """Remove the removable run folders of ``decisions`` (all but :data:`KEPT_FILES`); the bytes
    given back."""
    freed = 0
    stamp = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    for decision in decisions:
        if decision.keep is not None:
            continue
        for entry in decision.folder.iterdir():
            if entry.name in KEPT_FILES:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        info = read_info(decision.folder)
        if info is not None:
            write_info(decision.folder, info.model_copy(update={"pruned_at": stamp}))
        freed += decision.size
    return freed


def _why_kept(
    folder: Path, latest: str | None, needed: dict[str, str], recorded: set[str], cutoff: datetime
) -> str | None:
    run_id = folder.name
    if run_id == latest:
        return f"{LATEST} points at it"
    if run_id in needed:
        return needed[run_id]
    try:
        info: RunInfo | None = read_info(folder)
    except ValueError:
        return f"its {RUN_FILE} cannot be read"
    if info is None or info.status != "finished":
        return "unfinished: `ape retry` can resume it"
    if info.pruned_at is not None:
        return f"pruned already ({info.pruned_at})"
    in_flight = [batch for ledger in sorted(folder.rglob(LEDGER)) for batch in open_batches(ledger.parent)]
    if in_flight:
        return f"{len(in_flight)} batch(es) in flight in its ledger ({in_flight[0]})"
    if run_id not in recorded:
        return "not in the history: its results are nowhere else"
    if _started(run_id) > cutoff:
        return "newer than --older-than"
    return None


def _needed_by_history(top: Path) -> tuple[dict[str, str], set[str]]:
    """(run id -> why the history needs its folder, every run id the history holds)."""
    if not history_dir(top).is_dir():
        return {}, set()
    check_history(top)
    runs = read_runs(top, columns=["run_id", "model_id", "history_start"])
    needed: dict[str, str] = {}
    for model_id, rows in runs.groupby("model_id", sort=True):
        start = rows.iloc[-1]["history_start"]
        # a history written before the monitor kept no start: its newest run is the reference
        window = rows.tail(1) if pd.isna(start) or not start else rows[rows["run_id"] >= str(start)]
        for run_id in window["run_id"]:
            needed.setdefault(str(run_id), f"in {model_id}'s current history reference")
    pinned = baseline(top)
    if pinned:
        needed[pinned] = "the pinned baseline"
    return needed, {str(run_id) for run_id in runs["run_id"]}


def _latest(top: Path) -> str | None:
    link = top / LATEST
    if not link.is_symlink():
        return None
    return Path(os.readlink(link)).name


def _started(run_id: str) -> datetime:
    return datetime.strptime(run_id.split("-", 1)[0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


def _removable_size(folder: Path) -> int:
    total = 0
    for path, _dirs, files in os.walk(folder):
        for name in files:
            if Path(path) == folder and name in KEPT_FILES:
                continue
            try:
                total += os.lstat(os.path.join(path, name)).st_size
            except OSError:
                continue
    return total


__all__ = ["KEPT_FILES", "Decision", "check_arguments", "decide", "prune"]
