"""Evaluation runs: ids, run folders and the ``latest`` pointer.

A run by hand (``ape run``) writes straight into the output folder and resumes from it
(as runs by hand always did). A *new run* (a scheduled or deployment run, or ``ape run
--new-run``) gets its own folder, so every scheduled evaluation measures afresh:

    OUTPUT/
      runs/<run id>/      results.jsonl, metadata.json, sessions.jsonl, report.json, ...
                          run.json: this run's id, flow run, cache scope and status
      latest -> runs/<run id>   the newest finished run (a relative symlink)
      history/            the Parquet run history (see ape.tasks.storage.history)

A run id is the UTC start time plus the Prefect flow run's short id,
``20260130T030000Z-1a2b3c4d``: sortable by time, and findable again from the flow run,
so a Prefect retry of that flow run continues the same folder instead of starting a new one.
"""

from __future__ import annotations

import os
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError

RUNS_DIR = "runs"
LATEST = "latest"
RUN_FILE = "run.json"
CACHE_DIR = ".cache"
IN_PLACE = "in-place"
RUN_ID_PATTERN = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{8}$")

Status = Literal["running", "finished"]


class RunInfo(BaseModel):
    """``run.json`` of a run folder."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    flow_run_id: str | None = None
    started_at: str
    finished_at: str | None = None
    status: Status = "running"
    cache_scope: Literal["run", "shared"] = "run"
    benchmark: str = ""
    pruned_at: str | None = None  # set by `ape prune`: only run.json and the history copies are left


def short_id(flow_run_id: str | None) -> str:
    """The last 8 hex digits of a flow run id (a random one without a flow run).

    The last, not the first: Prefect's flow run ids are UUIDv7, whose leading digits are
    a time stamp shared by runs created close together.
    """
    text = (str(flow_run_id) if flow_run_id else uuid.uuid4().hex).replace("-", "")
    return text[-8:].lower()


def make_run_id(flow_run_id: str | None, now: datetime | None = None) -> str:
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{moment:%Y%m%dT%H%M%SZ}-{short_id(flow_run_id)}"


def check_run_id(run_id: str, where: str = "run id") -> str:
    if not RUN_ID_PATTERN.match(run_id):
        raise ApeError(
            f"'{run_id}' is not a run id",
            where=where,
            hint="run ids look like 20260130T030000Z-1a2b3c4d (see `ape history OUTPUT`)",
        )
    return run_id


def runs_root(top: Path) -> Path:
    return Path(top) / RUNS_DIR


def run_folder(top: Path, run_id: str) -> Path:
    return runs_root(top) / check_run_id(run_id)


def read_info(folder: Path) -> RunInfo | None:
    path = Path(folder) / RUN_FILE
    if not path.is_file():
        return None
    return RunInfo.model_validate_json(path.read_text(encoding="utf-8"))


def write_info(folder: Path, info: RunInfo) -> None:
    """Replace ``run.json`` atomically."""
    path = Path(folder) / RUN_FILE
    temporary = path.with_name(f".{RUN_FILE}.{os.getpid()}.tmp")
    temporary.write_text(info.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def find_by_flow_run(top: Path, flow_run_id: str | None) -> Path | None:
    """The run folder a flow run already started (a Prefect retry of it continues there)."""
    if not flow_run_id:
        return None
    matches = sorted(runs_root(top).glob(f"*-{short_id(flow_run_id)}"))
    return matches[-1] if matches else None


def start_run(config: ApeConfig, *, flow_run_id: str | None, run_id: str | None = None) -> RunInfo:
    """The new run of ``config`` this flow run belongs to: created, or found again.

    ``run_id`` continues a named run (``ape retry OUTPUT/runs/<id>``); otherwise a
    folder this flow run started before (a flow-run retry) is continued; otherwise a new
    run starts.
    """
    top = Path(config.run.output)
    folder = run_folder(top, run_id) if run_id else find_by_flow_run(top, flow_run_id)
    if folder is not None and (info := read_info(folder)) is not None:
        return info
    if run_id:
        raise ApeError(f"no run '{run_id}' in {top}", where=str(folder), hint="list the runs with `ape history OUTPUT`")
    info = RunInfo(
        run_id=make_run_id(flow_run_id),
        flow_run_id=str(flow_run_id) if flow_run_id else None,
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        cache_scope=config.run.cache_scope,
        benchmark=config.name,
    )
    folder = run_folder(top, info.run_id)
    folder.mkdir(parents=True, exist_ok=True)
    write_info(folder, info)
    return info


def config_for_run(config: ApeConfig, info: RunInfo) -> ApeConfig:
    """``config`` writing into the run's folder (everything downstream reads run.output)."""
    folder = run_folder(config.run.output, info.run_id)
    return config.model_copy(update={"run": config.run.model_copy(update={"output": folder})})


def split_run_folder(path: Path) -> tuple[Path, str | None]:
    """(top output folder, run id) of a run folder or the ``latest`` link; (path, None) otherwise."""
    path = Path(path)
    if path.name == LATEST and path.is_symlink():
        path = path.parent / os.readlink(path)
    info = read_info(path)
    if info is not None and path.parent.name == RUNS_DIR:
        return path.parent.parent, info.run_id
    return path, None


def in_run_folder(config: ApeConfig) -> RunInfo | None:
    """The run whose folder ``config`` writes into; None for a run in place."""
    output = Path(config.run.output)
    if output.parent.name != RUNS_DIR:
        return None
    return read_info(output)


def cache_scope_key(config: ApeConfig) -> str:
    """What the cache key carries of the run: "shared", the run id, or "in-place".

    Model calls are reused only between sessions whose keys carry the same scope, so a
    new run calls the model afresh unless ``[run] cache_scope = "shared"``.
    """
    if config.run.cache_scope == "shared":
        return "shared"
    info = in_run_folder(config)
    return info.run_id if info is not None else IN_PLACE


def cache_dir(config: ApeConfig) -> Path:
    """Where cache keys live: the run's folder, or the top output folder for a shared cache."""
    output = Path(config.run.output)
    if config.run.cache_scope == "shared" and in_run_folder(config) is not None:
        return output.parent.parent / CACHE_DIR
    return output / CACHE_DIR


def finish_run(top: Path, info: RunInfo) -> RunInfo:
    """Mark the run finished and point ``latest`` at it (atomically, never half-written)."""
    folder = run_folder(top, info.run_id)
    done = info.model_copy(
        update={"status": "finished", "finished_at": datetime.now(UTC).isoformat(timespec="seconds")}
    )
    write_info(folder, done)
    point_latest(top, info.run_id)
    return done


def point_latest(top: Path, run_id: str) -> None:
    link = Path(top) / LATEST
    current = read_info(link) if link.exists() else None
    if current is not None and current.run_id > run_id:
        return  # a newer run finished first; keep pointing at it
    temporary = link.with_name(f".{LATEST}.{os.getpid()}.tmp")
    temporary.unlink(missing_ok=True)
    os.symlink(Path(RUNS_DIR) / run_id, temporary)
    os.replace(temporary, link)
