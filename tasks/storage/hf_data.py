"""Hugging Face datasets as ``[data]``: a split's rows, read through the ``datasets`` library.

``[data] hf_path`` names a dataset (``openai/gsm8k``), ``hf_name`` its configuration,
``hf_split`` the split and ``hf_revision`` a branch, tag or commit. The rows come from, in
this order of preference:

- ``hf_data_files``: local files (``.jsonl``, ``.json``, ``.csv``, ``.parquet``, globs
  allowed) holding the split's rows, or one folder (a copy of the dataset's repository); the
  Hub is never asked;
- the Hub, when there is a network, the download kept in the local Hugging Face cache;
- that cache alone when ``HF_DATASETS_OFFLINE=1``.

A dataset found in none of them is one :class:`ApeError` naming the dataset, its
configuration and split and the two ways to provide it, raised when the data is first
read (``ape validate``, and a run's checks before any model call).

What was read is recorded (:meth:`HFData.provenance`, written into the run's provenance and
its history row): the dataset, configuration, split, the revision asked for, the commit the
cache holds where the Hub gave one, ``datasets``' own fingerprint of the loaded table, the
number of rows and a SHA-256 of the rows themselves (each row as canonical JSON), so a
changed dataset is told apart from a changed model.

Rows are data from outside the owner's config: they are plain values handed to the
DataModel, never code. ``datasets`` is asked only for file-based loaders (no dataset
scripts run: ``datasets`` 4 and later load none).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ape.schemas.errors import ApeError, shown_path

if TYPE_CHECKING:
    from ape.schemas.config import DataConfig

# the loader datasets uses for a local file, by its extension
LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
INSTALL_HINT = "pip install 'ape-bench[hf]' (the datasets library)"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")

log = logging.getLogger("ape")


@dataclass(frozen=True)
class HFSource:
    """Which rows ``[data]`` names: a dataset, configuration, split, revision and local files."""

    path: str
    name: str | None = None
    split: str = "test"
    revision: str | None = None
    data_files: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, data: DataConfig) -> HFSource:
        if data.hf_path is None:
            raise ValueError("[data] names a file, not a Hugging Face dataset")
        files = tuple(data.hf_data_files or ())
        return cls(data.hf_path, data.hf_name, data.hf_split, data.hf_revision, files)

    def label(self) -> str:
        """``dataset 'openai/gsm8k' (configuration 'main', split 'test')``, as errors name it."""
        return f"dataset '{self.path}' (configuration '{self.name or 'default'}', split '{self.split}')"


@dataclass
class HFData:
    """A loaded split: its rows (numbered from 1, as a file's lines are) and what was read."""

    source: HFSource
    dataset: Any = field(repr=False)  # a datasets.Dataset
    origin: str  # "local files", "local folder" or "hub or cache"

    def rows(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for number, row in enumerate(self.dataset, start=1):
            yield number, dict(row)

    @cached_property
    def rows_sha256(self) -> str:
        """SHA-256 over the rows in order, each as canonical JSON (sorted keys) and a newline."""
        digest = hashlib.sha256()
        for _, row in self.rows():
            digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str).encode())
            digest.update(b"\n")
        return digest.hexdigest()

    def commit(self) -> str | None:
        """The dataset repository's commit the cached copy was built from, where the Hub gave
        one (datasets keeps Hub downloads under a folder named by it); None for local files."""
        for entry in getattr(self.dataset, "cache_files", None) or []:
            for part in Path(str(entry.get("filename", ""))).parts:
                if _COMMIT.match(part):
                    return part
        return None

    def provenance(self) -> dict[str, Any]:
        """What was read, for the run's provenance and history (see the module doc)."""
        return {
            "hf_path": self.source.path,
            "hf_name": self.source.name,
            "hf_split": self.source.split,
            "hf_revision": self.source.revision,
            "commit": self.commit(),
            "fingerprint": getattr(self.dataset, "_fingerprint", None),
            "origin": self.origin,
            "data_files": list(self.source.data_files),
            "rows": len(self.dataset),
            "rows_sha256": self.rows_sha256,
        }


def load_hf(data: DataConfig) -> HFData:
    """The split ``data`` names (see the module doc), loaded once while it stays the same: a
    run asks for it several times (checks, each model, history), a served deployment's process
    for every run. Local files are loaded again once one changed (their sizes and times), a
    Hub dataset every :data:`HUB_RELOAD_S` seconds (``datasets`` then asks the Hub for news)."""
    source = HFSource.from_config(data)
    return _load(source, _stamp(source))


HUB_RELOAD_S = 600


def _stamp(source: HFSource) -> tuple[object, ...]:
    """What tells a changed source: each local file's path, size and modification time (the
    files a glob or folder holds included), or for the Hub the current reload period."""
    if not source.data_files:
        return ("hub", int(time.monotonic() // HUB_RELOAD_S))
    found: list[tuple[str, int, int]] = []
    for name in source.data_files:
        for path in sorted(glob.glob(name, recursive=True)) or [name]:
            files = [Path(path)] if not Path(path).is_dir() else sorted(p for p in Path(path).rglob("*") if p.is_file())
            for file in files:
                with contextlib.suppress(OSError):
                    stat = file.stat()
                    found.append((str(file), stat.st_size, stat.st_mtime_ns))
    return tuple(found)


@lru_cache(maxsize=8)
def _load(source: HFSource, stamp: tuple[object, ...]) -> HFData:
    del stamp  # part of the cache key only
    datasets = _datasets()
    if source.data_files:
        return _load_local(datasets, source)
    try:
        dataset = datasets.load_dataset(source.path, source.name, split=source.split, revision=source.revision)
    except (ConnectionError, FileNotFoundError) as exc:
        raise _not_found(source, exc) from None
    except Exception as exc:  # noqa: BLE001 - datasets raises many kinds; each becomes one line
        if type(exc).__name__ in {"DatasetNotFoundError", "OfflineModeIsEnabled", "LocalEntryNotFoundError"}:
            raise _not_found(source, exc) from None
        raise _failed(source, exc) from None
    return HFData(source, dataset, "hub or cache")


def _load_local(datasets: Any, source: HFSource) -> HFData:
    """``hf_data_files``: one folder (loaded as the dataset's repository would be) or files."""
    first = Path(source.data_files[0])
    try:
        if len(source.data_files) == 1 and first.is_dir():
            dataset = datasets.load_dataset(str(first), source.name, split=source.split)
            return HFData(source, dataset, "local folder")
        loader = _loader(source)
        dataset = datasets.load_dataset(loader, data_files={source.split: list(source.data_files)}, split=source.split)
    except FileNotFoundError as exc:
        raise ApeError(
            f"{source.label()}: local files not found: {_first_line(exc)}",
            where="[data] hf_data_files",
            hint="paths are relative to the config file's folder",
        ) from None
    except ApeError:
        raise
    except Exception as exc:  # noqa: BLE001 - a file datasets cannot read: one line
        raise _failed(source, exc) from None
    return HFData(source, dataset, "local files")


def _loader(source: HFSource) -> str:
    """The one datasets loader that reads every file of ``hf_data_files``, by extension."""
    kinds = set()
    for name in source.data_files:
        suffix = next((ext for ext in LOADERS if name.lower().endswith(ext)), None)
        if suffix is None:
            raise ApeError(
                f"cannot read '{shown_path(name)}' as rows",
                where="[data] hf_data_files",
                hint=f"use files ending in {', '.join(LOADERS)}, or one folder",
            )
        kinds.add(LOADERS[suffix])
    if len(kinds) > 1:
        raise ApeError(
            f"files of different kinds ({', '.join(sorted(kinds))})",
            where="[data] hf_data_files",
            hint="give files of one kind",
        )
    return kinds.pop()


def _datasets() -> Any:
    """The ``datasets`` module (the hf extra), quiet: no progress bars on a run's terminal."""
    try:
        import datasets  # noqa: PLC0415 - optional extra, imported only for a dataset-backed [data]
    except ImportError:
        raise ApeError(
            "a Hugging Face dataset needs the datasets library, which is not installed",
            where="[data] hf_path",
            hint=INSTALL_HINT,
        ) from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def _not_found(source: HFSource, exc: BaseException) -> ApeError:
    offline = any(os.environ.get(name, "") not in {"", "0"} for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))
    where = "not in the local Hugging Face cache (HF_DATASETS_OFFLINE=1)" if offline else "not found on the Hub"
    log.debug("loading %s failed: %s", source.label(), exc)
    return ApeError(
        f"{source.label()} is {where} and no local files are given",
        where="[data] hf_path",
        hint="download it once with a network (without HF_DATASETS_OFFLINE) into the cache, "
        "or set [data] hf_data_files to local files or a folder holding its rows",
    )


def _failed(source: HFSource, exc: BaseException) -> ApeError:
    return ApeError(f"{source.label()} could not be read: {_first_line(exc)}", where="[data] hf_path")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def cache_roots() -> tuple[Path, Path]:
    """The local Hugging Face caches, as ``datasets`` and ``huggingface_hub`` find them: the
    prepared datasets (``HF_DATASETS_CACHE``) and the Hub's downloads (``HF_HUB_CACHE``)."""
    home = Path(os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "huggingface")
    home = home.expanduser()
    prepared = Path(os.environ.get("HF_DATASETS_CACHE") or home / "datasets").expanduser()
    hub = Path(os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or home / "hub").expanduser()
    return prepared, hub


def cached(path: str, name: str | None, split: str) -> bool:
    """Whether the local cache holds ``path``'s configuration ``name`` so that it loads with
    ``HF_DATASETS_OFFLINE=1``: its split prepared by ``datasets`` (``<namespace>___<dataset>/
    <configuration>/<version>/<commit>/<dataset>-<split>*.arrow``), or the dataset's repository
    downloaded by the Hub client (``datasets--<namespace>--<dataset>/snapshots/<commit>``).
    Read from the folders alone: no import of ``datasets``, no network."""
    prepared, hub = cache_roots()
    namespace, _, dataset = path.rpartition("/")
    folder = f"{namespace}___{dataset}" if namespace else dataset
    arrows = (prepared / folder / (name or "default")).glob(f"*/*/*-{split}*.arrow")
    if any(arrows):
        return True
    snapshots = hub / f"datasets--{path.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(child.is_dir() for child in snapshots.iterdir())
