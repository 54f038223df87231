"""SaveHandler: durable, resumable results (seed 001 "Resume and save handler").

``results.jsonl`` is the source of truth: one complete line per finished item
(an OutputBatch), appended, flushed and fsynced. ``metadata.json`` mirrors the
set of completed ids plus the run's solver config and is replaced atomically
(write to a temporary file, fsync, rename). On start the two are reconciled:
a torn last line left by a crash is dropped, and an item whose line reached
disk counts as done even if the process died before metadata.json caught up.
So a crash loses at most the items in flight and never duplicates one.

A run never replaces saved results without a copy: the first time it rewrites
results.jsonl (to redo or re-score items, or to drop a torn line) the file as the run
found it is kept as ``results.jsonl.bak``, and a fresh start moves the old files to
``.bak`` names (one backup each; the next one replaces it).

Batches that arrive together are committed together (one fsync for the group),
and metadata.json, whose size grows with the run, is rewritten at most every
``metadata_interval_s`` (and always at the end). Because results.jsonl is the
source of truth and is reconciled on start, a metadata.json that lags by a
fraction of a second loses nothing; it keeps saving cheap when thousands of
fast items finish per second.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from ape.schemas.errors import first_problem
from ape.schemas.results import Outcome, OutputBatch
from ape.tasks.storage.file_modes import created_file_mode, not_own_file
from ape.tasks.storage.run_files import SAVE_FILE_KEY

log = logging.getLogger("ape")

QUARANTINE_SUFFIX = ".damaged"
# Held while results or metadata are written, so that a process that must end at once
# (the Prefect API watchdog) can wait for a write to finish and never leave a torn line.
WRITE_GUARD = threading.RLock()


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new file, never half.

    The file gets the mode of any file created now (0666 less the umask: 0600 during a run,
    0640 shared with the group, :mod:`ape.tasks.storage.file_modes`); mkstemp alone would
    make it 0600 whatever the run's setting. ``mode`` sets it instead (a request file that
    must stay its owner's alone whatever the run shares).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, created_file_mode() if mode is None else mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_copy(source: Path, target: Path) -> None:
    """Copy ``source`` over ``target`` so ``target`` is the old or the new file, never half.
    The copy keeps the source's times but takes the mode of a file created now: a file an
    older run left open to others is not copied open (:mod:`ape.tasks.storage.file_modes`)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        shutil.copy2(source, tmp)
        os.chmod(tmp, created_file_mode())
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class ResultsScan:
    """What one results file holds: its good batches (with line numbers) and its damage."""

    path: Path
    batches: list[tuple[int, OutputBatch]] = field(default_factory=list)
    damaged: list[tuple[int, str, str]] = field(default_factory=list)  # (line, text, reason)
    torn: bool = False  # the last line was cut off by a crash (its item was not saved)

    def latest(self) -> dict[str, tuple[int, OutputBatch]]:
        """The last batch of each item (a rerun of an item replaces its earlier line)."""
        return {batch.item_id: (number, batch) for number, batch in self.batches}


def scan_results(path: Path) -> ResultsScan:
    """The one reader of results.jsonl (the save handler and the report both use it).

    A line that does not parse as an OutputBatch is *damaged* wherever it is, except a
    last line without its newline, which is a write torn by a crash (``torn``).
    """
    scan = ResultsScan(Path(path))
    if not scan.path.exists():
        return scan
    raw = scan.path.read_bytes()
    lines = raw.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            scan.batches.append((number, OutputBatch.model_validate_json(line)))
        except ValidationError as exc:
            scan.damaged.append((number, line.decode("utf-8", "replace"), first_problem(exc)))
    if tail.strip():
        scan.torn = True
    return scan


def read_batches(path: Path) -> Iterator[OutputBatch]:
    """The good batches of a results file, in file order (damaged and torn lines left out)."""
    for _, batch in scan_results(path).batches:
        yield batch


class SaveFailed(Exception):
    """Writing results failed mid-run (disk full, folder gone): the run must end."""


class SaveHandler:
    """Appends OutputBatches and keeps metadata.json's completed_ids in step."""

    def __init__(
        self,
        folder: Path,
        *,
        save_file: str = "results.jsonl",
        metadata_file: str = "metadata.json",
        run_info: dict[str, Any] | None = None,
        metadata_interval_s: float = 0.5,
    ):
        self.folder = Path(folder)
        self.results_path = self.folder / save_file
        self.metadata_path = self.folder / metadata_file
        self.run_info = dict(run_info or {})
        self.completed: dict[str, bool] = {}  # item id -> batch has an ERROR session or check error
        self.counts: dict[str, tuple[int, int]] = {}  # item id -> (sessions, correct sessions)
        self._handle: TextIO | None = None
        self._interval = metadata_interval_s
        self._meta_at = 0.0
        self._meta_dirty = False
        self._backed_up = False  # the first rewrite of this run keeps what it replaces (see _back_up)
        # what this run discarded to redo: item id -> its sessions then (stage_chains.json's
        # counts of earlier flow runs no longer cover them, :func:`stage_chains.note_flow_run`)
        self.superseded: dict[str, int] = {}

    # -- start ---------------------------------------------------------------------------
    def load(self) -> dict[str, Any]:
        """Reconcile results.jsonl and metadata.json after a previous (maybe crashed) run.

        A torn last line is dropped; damaged lines anywhere are moved to
        ``results.jsonl.damaged`` (appended, never overwritten) with a warning naming the
        line, so their items are redone while every good line is kept; a duplicate line of
        an item keeps its last batch. Either file that is a link, another user's, or writable
        by group or others is no file this user's runs wrote: it is moved aside as
        ``NAME.refused`` with a warning, and its items are redone. Returns the previous
        metadata.json (empty if none).
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        for path in (self.results_path, self.metadata_path):
            why = not_own_file(path)
            if why is not None:
                aside = path.with_name(path.name + ".refused")
                path.replace(aside)
                log.warning("%s: refused, %s; moved aside to %s, its items are redone", path, why, aside.name)
        previous: dict[str, Any] = {}
        try:
            previous = json.loads(self.metadata_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = {}
        scan = scan_results(self.results_path)
        keep = scan.latest()
        if scan.damaged:
            self._quarantine(scan)
        for _, batch in keep.values():
            self.completed[batch.item_id] = batch.needs_redo
            self.counts[batch.item_id] = batch.counts
        if scan.torn or scan.damaged or len(keep) != len(scan.batches):
            ordered = sorted(keep.values(), key=lambda pair: pair[0])
            self._rewrite([batch for _, batch in ordered])
        self._write_metadata()
        return previous if isinstance(previous, dict) else {}

    def _quarantine(self, scan: ResultsScan) -> None:
        target = self.results_path.with_name(self.results_path.name + QUARANTINE_SUFFIX)
        with WRITE_GUARD, target.open("a", encoding="utf-8") as handle:
            for _number, text, _ in scan.damaged:
                handle.write(text.rstrip("\n") + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        for number, _, reason in scan.damaged:
            log.warning(
                "%s:%d is damaged (%s); moved to %s, its item will be redone",
                self.results_path,
                number,
                reason[:200],
                target.name,
            )

    def _rewrite(self, batches: list[OutputBatch]) -> None:
        self.close()  # the append handle would keep writing to the replaced file
        with WRITE_GUARD:
            self._back_up()
            atomic_write_text(self.results_path, "".join(b.model_dump_json() + "\n" for b in batches))

    def _back_up(self) -> None:
        """Before this run first rewrites results.jsonl (items discarded to be redone or
        re-scored, a torn or damaged line dropped), copy it to ``results.jsonl.bak``: a run
        whose redo turns saved grades into errors (a broken judge, a changed checker) can
        then be undone. One copy is kept, of the file as this run found it: the previous
        ``.bak`` is replaced, and an empty file never replaces one."""
        if self._backed_up:
            return
        self._backed_up = True
        if not self.results_path.is_file() or self.results_path.stat().st_size == 0:
            return
        backup = self.results_path.with_name(f"{self.results_path.name}.bak")
        atomic_copy(self.results_path, backup)
        log.info("%s is rewritten; what it held is kept in %s", self.results_path, backup.name)

    def reset(self, also: Iterable[str] = ()) -> None:
        """Start the output folder afresh (load_save = false): old results, and the files
        named in ``also`` (transcripts), are moved aside as ``NAME.bak``. One set is kept:
        the previous start's backup is replaced, so repeated fresh starts do not pile up
        files, and an empty file never replaces a backup that holds something."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for path in (self.results_path, self.metadata_path, *(self.folder / name for name in also)):
            if path.exists():
                if path.stat().st_size == 0:
                    path.unlink()
                else:
                    path.replace(path.with_name(f"{path.name}.bak"))
        self.completed = {}
        self.counts = {}
        self._backed_up = True  # the .bak now holds what this run started from
        self._write_metadata()

    def discard(self, item_ids: Iterable[str]) -> int:
        """Remove the saved batches of ``item_ids`` (to redo them) in one atomic rewrite."""
        drop = set(item_ids) & set(self.completed)
        if not drop:
            return 0
        kept = []
        for batch in read_batches(self.results_path):
            if batch.item_id in drop:
                self.superseded[batch.item_id] = self.superseded.get(batch.item_id, 0) + len(batch.sessions)
            else:
                kept.append(batch)
        self._rewrite(kept)
        for key in drop:
            del self.completed[key]
            self.counts.pop(key, None)
        self._write_metadata()
        return len(drop)

    def ids_with_fewer_sessions(self, runs: int) -> list[str]:
        return [b.item_id for b in read_batches(self.results_path) if len(b.sessions) < runs]

    def keep_first_runs(self, runs: int) -> Path:
        """Keep only sessions with run_index < ``runs``; the full file is kept as a .bak."""
        backup = self.results_path.with_name(f"{self.results_path.name}.bak")
        batches = list(read_batches(self.results_path))
        self.close()
        with WRITE_GUARD:
            atomic_copy(self.results_path, backup)
            self._backed_up = True
        trimmed = [b.model_copy(update={"sessions": [s for s in b.sessions if s.run_index < runs]}) for b in batches]
        self._rewrite(trimmed)
        for batch in trimmed:
            self.completed[batch.item_id] = batch.needs_redo
            self.counts[batch.item_id] = batch.counts
        self._write_metadata()
        return backup

    def errored_ids(self) -> list[str]:
        return [key for key, err in self.completed.items() if err]

    def ids_with_outcomes(self, outcomes: set[Outcome]) -> list[str]:
        return [b.item_id for b in read_batches(self.results_path) if any(s.outcome in outcomes for s in b.sessions)]

    # -- saving --------------------------------------------------------------------------
    def save(self, batches: list[OutputBatch]) -> None:
        """Append ``batches`` durably, then update metadata.json. One fsync per call."""
        if not batches:
            return
        text = "".join(b.model_dump_json() + "\n" for b in batches)
        try:
            with WRITE_GUARD:
                if self._handle is None:
                    self._handle = self.results_path.open("a", encoding="utf-8")
                self._handle.write(text)
                self._handle.flush()
                os.fsync(self._handle.fileno())
        except OSError as exc:
            self._abandon_partial()
            raise SaveFailed(
                f"cannot write {self.results_path}: {exc.strerror or exc}; the "
                f"{len(self.completed)} items saved before are kept"
            ) from exc
        for batch in batches:
            self.completed[batch.item_id] = batch.needs_redo
            self.counts[batch.item_id] = batch.counts
        self._meta_dirty = True
        if time.monotonic() - self._meta_at >= self._interval:
            self._write_metadata()

    def note(self, key: str, value: Any) -> None:
        """Record ``value`` under ``key`` in metadata.json (written with the next save or at close),
        for what the run learns while it goes (the server limits that held)."""
        if self.run_info.get(key) != value:
            self.run_info[key] = value
            self._meta_dirty = True

    def flush_metadata(self) -> None:
        """Write metadata.json now if anything changed (a paused run: its control log and
        counts are on disk while it waits, however long)."""
        if self._meta_dirty:
            self._write_metadata()

    def _write_metadata(self) -> None:
        self._meta_at = time.monotonic()
        self._meta_dirty = False
        meta = {
            **self.run_info,
            SAVE_FILE_KEY: self.results_path.name,  # how readers find the results (ape.tasks.storage.run_files)
            "completed_ids": list(self.completed),
            "errored_ids": self.errored_ids(),
            "updated_at": datetime.now(UTC).isoformat(),
        }
        try:
            with WRITE_GUARD:
                atomic_write_text(self.metadata_path, json.dumps(meta, indent=1, default=str))
        except OSError as exc:
            raise SaveFailed(f"cannot write {self.metadata_path}: {exc.strerror or exc}") from exc

    def _abandon_partial(self) -> None:
        """After a failed append: drop the handle (its buffer may hold part of a line); the
        next load treats a partial last line as torn, so nothing saved before is harmed."""
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.close()
            except OSError:
                pass

    def close(self) -> None:
        if self._meta_dirty:
            self._write_metadata()
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> SaveHandler:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        try:
            self.close()
        except SaveFailed:
            if exc_type is None:  # otherwise the error already on its way says more
                raise
