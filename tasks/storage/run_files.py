"""Finding a run's saved files, whatever ``[run] save_file`` and ``[run] metadata_file`` call them.

A run writes, per model folder, a results file (``results.jsonl`` by default) and a
metadata file (``metadata.json`` by default) through :class:`ape.tasks.storage.save.SaveHandler`,
which records the results file's name in the metadata (key ``save_file``). Readers that
get only a folder (``ape report``, ``ape retry``, ``ape plan``) find the files here:

- the metadata file is recognised by its content, not its name: a JSON object holding
  the keys every SaveHandler writes (:data:`METADATA_KEYS`), so ``report.json``,
  ``run.json`` and other JSON files beside it are never taken for it; ``metadata.json``
  is tried first, then the folder's other ``*.json`` files in name order;
- the results file is the one its metadata names, or ``results.jsonl`` for a folder
  without metadata (or with metadata older than the ``save_file`` key).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ape.schemas.errors import ApeError
from ape.tasks.storage.runs import LATEST, RUNS_DIR

log = logging.getLogger("ape")

DEFAULT_SAVE_FILE = "results.jsonl"
DEFAULT_METADATA_FILE = "metadata.json"
SAVE_FILE_KEY = "save_file"  # the results file's name, as the SaveHandler records it
CONFIG_KEY = "config_file"  # the config's absolute path when the run was made
CONFIG_FROM_OUTPUT_KEY = "config_file_from_output"  # the same, relative to the metadata file's folder
METADATA_KEYS = ("completed_ids", "errored_ids")  # written by every SaveHandler


@dataclass(frozen=True)
class RunFiles:
    """One run folder's files: its metadata (None when there is none) and its results file."""

    folder: Path
    results: Path
    metadata_path: Path | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def model_id(self) -> str:
        """The model the run's metadata names (its folder's name when it names none)."""
        return str(self.metadata.get("model") or self.folder.name)


def config_location(config_file: Path | None, folder: Path) -> dict[str, str | None]:
    """What a run records of its config: the absolute path and the path from its output
    ``folder``, so a copied or moved output folder still finds the config beside it."""
    if config_file is None:
        return {CONFIG_KEY: None, CONFIG_FROM_OUTPUT_KEY: None}
    absolute = Path(config_file).resolve()
    return {CONFIG_KEY: str(absolute), CONFIG_FROM_OUTPUT_KEY: os.path.relpath(absolute, Path(folder).resolve())}


def recorded_config_file(folder: Path, metadata: dict[str, Any]) -> Path | None:
    """The config a run in ``folder`` was made with: the file at the recorded place relative to
    the folder when one is there (the folder was copied or moved with its config: ``cp -r``
    of a benchmark keeps using its own copy), else the absolute path recorded; None if none."""
    relative = metadata.get(CONFIG_FROM_OUTPUT_KEY)
    if isinstance(relative, str) and relative:
        beside = Path(os.path.normpath(Path(folder).resolve() / relative))
        if beside.is_file():
            return beside
    recorded = metadata.get(CONFIG_KEY)
    return Path(recorded) if isinstance(recorded, str) and recorded else None


def read_metadata(path: Path) -> dict[str, Any] | None:
    """The content of ``path`` if it is a run's metadata file (see the module doc), else None."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not all(isinstance(data.get(key), list) for key in METADATA_KEYS):
        return None
    return data


def find_metadata(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """(path, content) of the metadata file directly in ``folder``; None when it has none."""
    folder = Path(folder)
    default = folder / DEFAULT_METADATA_FILE
    others = sorted(p for p in _json_files(folder) if p.name != DEFAULT_METADATA_FILE)
    for path in [default, *others]:
        data = read_metadata(path)
        if data is not None:
            return path, data
    return None


def _json_files(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for e in entries if e.name.endswith(".json") and e.is_file()]
    except OSError:
        return []


def save_file_of(metadata: dict[str, Any] | None) -> str:
    """The results file's name a run recorded in its metadata; ``results.jsonl`` without one."""
    name = (metadata or {}).get(SAVE_FILE_KEY)
    if isinstance(name, str) and name not in {"", ".", ".."} and "/" not in name and "\\" not in name:
        return name
    return DEFAULT_SAVE_FILE


def run_files_in(folder: Path) -> RunFiles:
    """The files of the run folder ``folder`` (the results file may not exist yet)."""
    folder = Path(folder)
    found = find_metadata(folder)
    if found is None:
        return RunFiles(folder, folder / DEFAULT_SAVE_FILE)
    path, data = found
    return RunFiles(folder, folder / save_file_of(data), path, data)


def metadata_by_model(paths: Iterable[Path]) -> dict[str, dict[str, Any]]:
    """Model id -> the metadata of its run, for the runs under ``paths``."""
    return {run.model_id: run.metadata for run in find_runs(paths)}


def find_runs(paths: Iterable[Path]) -> list[RunFiles]:
    """Every run folder under each of ``paths`` that holds a results file, in the order given.

    A folder is searched recursively (sub-folders sorted by path; symbolic links to
    folders, such as ``latest``, are not followed); a path that is a file is taken as a
    results file itself, with the metadata found beside it.
    """
    found: list[RunFiles] = []
    for path in map(Path, paths):
        if path.is_file():
            beside = find_metadata(path.parent)
            meta_path, meta = beside if beside is not None else (None, {})
            found.append(RunFiles(path.parent, path, meta_path, meta))
        elif path.is_dir():
            runs = (run_files_in(Path(folder)) for folder, _, _ in os.walk(path))
            found.extend(_one_run(path, sorted((r for r in runs if r.results.is_file()), key=lambda r: r.results)))
        else:
            raise ApeError("no such folder", where=str(path), hint="give the run's output folder")
    return found


def _one_run(top: Path, found: list[RunFiles]) -> list[RunFiles]:
    """Of a benchmark's output folder that holds new runs (``runs/<run id>/``), and maybe
    results of runs by hand beside them, only the latest run: results of different runs
    are separate measurements of the same items, never one pool. Says so in one line,
    with how to name another run or the results by hand instead."""
    runs_dir = top / RUNS_DIR if (top / RUNS_DIR).is_dir() else top if top.name == RUNS_DIR else None
    if runs_dir is None:
        return found
    by_run: dict[str, list[RunFiles]] = {}
    by_hand: list[RunFiles] = []
    for run in found:
        try:
            run_id = run.folder.relative_to(runs_dir).parts[0]
        except (ValueError, IndexError):
            by_hand.append(run)
            continue
        by_run.setdefault(run_id, []).append(run)
    if not by_run or (len(by_run) == 1 and not by_hand):
        return found
    latest = _latest(runs_dir, sorted(by_run))
    others = []
    if len(by_run) > 1:
        others.append(f"one of the {len(by_run)} runs, {runs_dir}/<run id>")
    if by_hand:
        named = " ".join(str(r.results if r.folder == top else r.folder) for r in by_hand)
        others.append(f"the results of runs by hand, {named}")
    log.info(
        "%s: reporting the latest run, %s; to use other results, name them instead: %s",
        top,
        latest,
        "; or ".join(others),
    )
    return by_run[latest]


def _latest(runs_dir: Path, run_ids: list[str]) -> str:
    """The run ``latest`` links to (the newest finished run), else the newest run id
    (ids begin with their UTC start time, so they sort by time)."""
    link = runs_dir.parent / LATEST
    try:
        target = link.resolve().name if link.is_symlink() else None
    except OSError:
        target = None
    return target if target in run_ids else run_ids[-1]


def metadata_near(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The metadata of ``folder`` itself, then of each of its direct sub-folders (sorted):
    a model's folder, or a benchmark's output folder with one folder per model."""
    folder = Path(folder)
    found = []
    candidates = [folder, *sorted(p for p in folder.iterdir() if p.is_dir())] if folder.is_dir() else []
    for candidate in candidates:
        meta = find_metadata(candidate)
        if meta is not None:
            found.append(meta)
    return found
