"""Finding and reading the ``live.json`` files of a run (:mod:`ape.schemas.live`), for ``ape status``.

What is read is untrusted: anyone who can write an output folder can put a ``live.json``
there. So a file is read up to :data:`MAX_BYTES` (a link to an endless device cannot hang
the command), parsed by pydantic against :class:`ape.schemas.live.LiveStatus` (unknown keys,
wrong types, negative counts, non-finite numbers refused), and a bad one is one error line
naming the file and the key. Nothing is ever unpickled or evaluated.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from ape.schemas.errors import ApeError, problem_key, problem_message
from ape.schemas.live import LIVE_FILE, LiveStatus
from ape.tasks.storage.runs import RUN_ID_PATTERN, runs_root

__all__ = ["MAX_BYTES", "find_live", "read_live", "read_model_file"]

M = TypeVar("M", bound=BaseModel)

MAX_BYTES = 1_000_000  # a live.json is under 2 kB


def _here(folder: Path) -> list[Path]:
    """The live files of ``folder`` itself (one model) or of its model folders (several)."""
    own = folder / LIVE_FILE
    if own.is_file():
        return [own]
    return sorted(p / LIVE_FILE for p in folder.iterdir() if p.is_dir() and (p / LIVE_FILE).is_file())


def find_live(folder: Path) -> list[Path]:
    """The ``live.json`` files ``ape status FOLDER`` shows: the folder's own (a model's folder),
    else its model folders', else those of its newest run under ``runs/`` (a folder of new
    runs: scheduled, served, ``--new-run``; the newest is the one going, or the last).
    Raises :class:`ApeError` for a folder that is not there or holds none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ApeError(
            "no such output folder",
            where=str(folder),
            hint="give the [run] output folder of the run, a run folder under its runs/, or one model's folder",
        )
    found = _here(folder)
    if not found and runs_root(folder).is_dir():
        runs = sorted((p for p in runs_root(folder).iterdir() if RUN_ID_PATTERN.match(p.name)), reverse=True)
        for run in runs:
            found = _here(run)
            if found:
                break
    if not found:
        raise ApeError(
            f"no {LIVE_FILE} here: not the output folder of a run, or one that has not started an item yet",
            where=str(folder),
            hint="give the [run] output folder of the run, a run folder under its runs/, or one model's folder",
        )
    return found


def read_live(path: Path) -> LiveStatus:
    """One ``live.json``, validated; :class:`ApeError` naming the file (and key) when it is not one."""
    return read_model_file(path, LiveStatus, MAX_BYTES, "a live view")


def read_model_file(path: Path, model: type[M], max_bytes: int, what: str) -> M:
    """A small JSON file a run wrote and another command reads back (untrusted: anyone who can
    write the folder can write it), validated against ``model``: read up to ``max_bytes`` (a
    link to an endless device cannot hang the command), one :class:`ApeError` naming the file
    and key when it is not ``what`` APE wrote. Nothing is unpickled or evaluated."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as exc:
        raise ApeError(f"cannot read it: {exc.strerror or exc}", where=str(path)) from None
    if len(raw) > max_bytes:
        raise ApeError(f"larger than {max_bytes:,} bytes: not {what} APE wrote", where=str(path))
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = problem_key(first)
        raise ApeError(
            f"not {what} APE wrote: {problem_message(first)}",
            where=f"{path}" + (f" key {key}" if key else ""),
        ) from None


def interrupted_flow_run(folder: Path) -> str | None:
    """The flow run whose ``live.json`` in the model folder ``folder`` says it was still going
    (``running``, ``paused`` or ``draining``) when it last wrote: a run whose process was
    killed leaves that behind. None when there is no such file, or it says the run ended, or
    it is not one APE wrote (a resume must not fail over a view of progress)."""
    path = folder / LIVE_FILE
    if not path.is_file():
        return None
    try:
        live = read_live(path)
    except ApeError:
        return None
    return live.flow_run_id if live.state in ("running", "paused", "draining") else None
