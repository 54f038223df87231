"""SaveHandler: durable, resumable results (seed 001 "Resume and save handler").

``results.jsonl`` is the source of truth: one complete line per finished item
(an OutputBatch), appended, flushed and fsynced. ``metadata.json`` mirrors the
set of completed ids plus the run's solver config and is replaced atomically
(write to a temporary file, fsync, rename). On start the two are reconciled:
a torn last line left by a crash is dropped, and an item whose line reached
disk counts as done even if the process died before metadata.json caught up.
So a crash loses at most the items in flight and never duplicates one.

Batches that arrive together are committed together (one fsync for the group),
and metadata.json, whose size grows with the run, is rewritten at most every
``metadata_interval_s`` (and always at the end). Because results.jsonl is the
source of truth and is reconciled on start, a metadata.json that lags by a
fraction of a second loses nothing; it keeps saving cheap when thousands of
fast items finish per second.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ape.schemas.errors import ApeError
from ape.schemas.results import OutputBatch, Outcome


def _umask() -> int:
    """The process umask, read without changing it where Linux reports it (else set back)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new file, never half.

    The file gets the permissions of any file the user creates (0666 less the umask;
    mkstemp alone would leave it readable by its owner only).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_batches(path: Path) -> Iterator[OutputBatch]:
    """Complete batches of a results file, skipping a torn last line."""
    if not path.exists():
        return
    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.endswith("\n"):
                return  # torn write from a crash: that item was not saved
            if not line.strip():
                continue
            try:
                yield OutputBatch.model_validate_json(line)
            except ValidationError as exc:
                raise ApeError(f"corrupt results line: {exc.errors()[0]['msg']}",
                               where=f"{path}:{number}",
                               hint="move the file away to start this output folder afresh") from None


class SaveHandler:
    """Appends OutputBatches and keeps metadata.json's completed_ids in step."""

    def __init__(self, folder: Path, *, save_file: str = "results.jsonl",
                 metadata_file: str = "metadata.json", run_info: dict[str, Any] | None = None,
                 metadata_interval_s: float = 0.5):
        self.folder = Path(folder)
        self.results_path = self.folder / save_file
        self.metadata_path = self.folder / metadata_file
        self.run_info = dict(run_info or {})
        self.completed: dict[str, bool] = {}  # item id -> batch has an ERROR session
        self.outcomes: dict[str, int] = {o.value: 0 for o in Outcome}
        self._handle = None
        self._interval = metadata_interval_s
        self._meta_at = 0.0
        self._meta_dirty = False

    # -- start ---------------------------------------------------------------------------
    def load(self) -> None:
        """Reconcile results.jsonl and metadata.json after a previous (maybe crashed) run."""
        self.folder.mkdir(parents=True, exist_ok=True)
        keep: dict[str, str] = {}
        torn = False
        if self.results_path.exists():
            raw = self.results_path.read_bytes()
            torn = bool(raw) and not raw.endswith(b"\n")
            for batch in read_batches(self.results_path):
                keep[batch.item_id] = batch.model_dump_json()
                self.completed[batch.item_id] = batch.has_error
            complete_lines = [line for line in raw.split(b"\n")[:-1] if line.strip()]
            if torn or len(complete_lines) != len(keep):
                # drop the torn tail (and any duplicate line), keeping the last batch per item
                atomic_write_text(self.results_path, "".join(v + "\n" for v in keep.values()))
        self._write_metadata()

    def reset(self, also: Iterable[str] = ()) -> None:
        """Start the output folder afresh (load_save = false): old results, and the files
        named in ``also`` (transcripts), are moved aside with a time stamp, never deleted."""
        self.folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        for path in (self.results_path, self.metadata_path, *(self.folder / name for name in also)):
            if path.exists():
                path.rename(path.with_name(f"{path.name}.{stamp}.bak"))
        self.completed = {}
        self._write_metadata()

    def discard(self, item_ids: Iterable[str]) -> int:
        """Remove the saved batches of ``item_ids`` (to redo them) in one atomic rewrite."""
        drop = set(item_ids) & set(self.completed)
        if not drop:
            return 0
        self.close()  # the append handle would keep writing to the replaced file
        lines = [b.model_dump_json() + "\n" for b in read_batches(self.results_path)
                 if b.item_id not in drop]
        atomic_write_text(self.results_path, "".join(lines))
        for key in drop:
            del self.completed[key]
        self._write_metadata()
        return len(drop)

    def errored_ids(self) -> list[str]:
        return [key for key, err in self.completed.items() if err]

    def ids_with_outcomes(self, outcomes: set[Outcome]) -> list[str]:
        return [b.item_id for b in read_batches(self.results_path)
                if any(s.outcome in outcomes for s in b.sessions)]

    # -- saving --------------------------------------------------------------------------
    def save(self, batches: list[OutputBatch]) -> None:
        """Append ``batches`` durably, then update metadata.json. One fsync per call."""
        if not batches:
            return
        if self._handle is None:
            self._handle = self.results_path.open("a", encoding="utf-8")
        self._handle.write("".join(b.model_dump_json() + "\n" for b in batches))
        self._handle.flush()
        os.fsync(self._handle.fileno())
        for batch in batches:
            self.completed[batch.item_id] = batch.has_error
        self._meta_dirty = True
        if time.monotonic() - self._meta_at >= self._interval:
            self._write_metadata()

    def _write_metadata(self) -> None:
        self._meta_at = time.monotonic()
        self._meta_dirty = False
        meta = {
            **self.run_info,
            "completed_ids": list(self.completed),
            "errored_ids": self.errored_ids(),
            "updated_at": datetime.now(timezone.utc).isoformat(),
        }
        atomic_write_text(self.metadata_path, json.dumps(meta, indent=1, default=str))

    def close(self) -> None:
        if self._meta_dirty:
            self._write_metadata()
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> SaveHandler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
