"""``stage_chains.json``: which sessions' stage chains a model's run recorded as task runs
on the Prefect server, and which it left out while the server was behind.

A plain stage chain (render -> solve -> adapt -> check -> score, every stage ending
plainly) is left out of the UI when the server is too far behind to take it without
holding the run to its pace (``ape.tasks.recording.server``). The results on disk are complete
either way; this file names the sessions left out, per evaluate flow run, so
``ape record RUN_DIR`` can record them later, from the saved results, into the flow runs
they belong to. A run that resumes the folder's results keeps the entries of the earlier
flow runs whose sessions it kept, so nothing waiting to be recorded is forgotten.

A run writes its entry at its end; a killed run never does. Its entry is made afterwards
(:func:`note_interrupted`, by the next run of the folder or by ``ape record``) from what it
left on disk: its ``live.json`` still says it was going, and every session it saved is named,
since the file cannot tell which of them the server took in (those it holds are not sent again).

Written atomically (a temporary file renamed over it), like the other files of a run, and
each change is a read, change and rewrite under a lock on the folder (:func:`_locked`): the
background catch-up finishes minutes after it read the file, when the next run of the folder
may have written its own entry, and only what the catch-up recorded is taken off (:func:`settle`).
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ape.schemas.errors import ApeError, first_problem
from ape.schemas.live import LIVE_FILE, LiveStatus
from ape.tasks.storage.live_files import read_live
from ape.tasks.storage.save import atomic_write_text, read_batches

CHAINS_FILE = "stage_chains.json"
# the command that records what a run left out, as the summary and the report name it
RECORD_COMMAND = "ape record"


class LeftOut(BaseModel):
    """One session whose stage chain was not recorded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    item_id: str
    run_index: int


class FlowRunChains(BaseModel):
    """The stage chains of one evaluate flow run."""

    model_config = ConfigDict(extra="forbid")

    flow_run_id: str
    chains_recorded: int = 0
    left_out: list[LeftOut] = Field(default_factory=list)
    # the run's process ended mid-run (killed), so it never wrote this entry: it was made
    # afterwards from the saved results (note_interrupted), every session it saved named
    interrupted: bool = False


class StageChains(BaseModel):
    """The whole file: the model, and its evaluate flow runs (the newest last)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    flow_runs: list[FlowRunChains] = Field(default_factory=list)

    @property
    def chains_recorded(self) -> int:
        return sum(run.chains_recorded for run in self.flow_runs)

    @property
    def chains_left_out(self) -> int:
        return sum(len(run.left_out) for run in self.flow_runs)


def _without(runs: list[FlowRunChains], superseded: dict[str, int]) -> list[FlowRunChains]:
    """The earlier flow runs' entries without the sessions this run discarded and redid
    (``superseded``: item id -> its sessions then): their left-out chains are dropped, and
    the rest of those sessions, which the earlier runs recorded, taken off their counts, the
    newest first. Otherwise every retry counted its redone sessions once more (report.json's
    ``recorded`` grew past the run's sessions)."""
    remaining = sum(superseded.values())
    kept: list[FlowRunChains] = []
    for run in runs:
        left_out = [entry for entry in run.left_out if entry.item_id not in superseded]
        remaining -= len(run.left_out) - len(left_out)
        kept.append(run.model_copy(update={"left_out": left_out}))
    for run in reversed(kept):
        if remaining <= 0:
            break
        taken = min(run.chains_recorded, remaining)
        run.chains_recorded -= taken
        remaining -= taken
    return kept


def chains_path(folder: Path) -> Path:
    return Path(folder) / CHAINS_FILE


def read_chains(folder: Path) -> StageChains | None:
    """The model folder's ``stage_chains.json``; None when it has none."""
    path = chains_path(folder)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ApeError(f"cannot read {CHAINS_FILE}: {exc.strerror or exc}", where=str(path)) from None
    try:
        return StageChains.model_validate_json(text)
    except ValidationError as exc:
        raise ApeError(
            f"{CHAINS_FILE} is damaged ({first_problem(exc)})",
            where=str(path),
            hint="it is rewritten by the next run of this folder",
        ) from None


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Held while one process reads, changes and rewrites ``folder``'s file, so no writer's
    change is lost to another's rewrite. A ``flock`` on the folder itself: no file is added to
    it, and a killed holder's lock goes with it. Held for moments, never while sending."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def settle(folder: Path, done: Mapping[str, tuple[set[tuple[str, int]], set[tuple[str, int]]]]) -> StageChains | None:
    """Take off the file as it is now what ``ape record`` settled: per flow run id, the
    sessions whose chains it recorded (counted as recorded) and those it dropped (no saved
    result to rebuild them from any more); the file as written, None when there is none.

    Why not write back what was read: the catch-up read the file minutes ago, and the next run
    of the folder may have added its own entry or dropped sessions it redid since; rewriting
    the old copy would lose that run's chains left out, which then never reach the UI."""
    with _locked(folder):
        try:
            chains = read_chains(folder)
        except ApeError:  # damaged since: nothing to merge into
            return None
        if chains is None:
            return None
        for run in chains.flow_runs:
            recorded, dropped = done.get(run.flow_run_id, (set(), set()))
            settled = recorded | dropped  # once per flow run, not once per session
            kept = [s for s in run.left_out if (s.item_id, s.run_index) not in settled]
            run.chains_recorded += sum((s.item_id, s.run_index) in recorded for s in run.left_out)
            run.left_out = kept
        write_chains(folder, chains)
        return chains


def write_chains(folder: Path, chains: StageChains) -> Path:
    path = chains_path(folder)
    atomic_write_text(path, chains.model_dump_json(indent=2) + "\n")
    return path


def note_flow_run(
    folder: Path,
    model: str,
    flow_run_id: str,
    recorded: int,
    left_out: list[tuple[str, int]],
    *,
    keep_earlier: bool = True,
    superseded: dict[str, int] | None = None,
) -> StageChains:
    """Write what ``flow_run_id`` recorded and left out into ``folder``'s file; the file as
    written. ``keep_earlier``: the run resumed the folder's results, so the earlier flow
    runs' entries stay (their sessions are still there); a run that started the results
    afresh replaces them."""
    with _locked(folder):
        return _note_flow_run(folder, model, flow_run_id, recorded, left_out, keep_earlier, superseded)


def _note_flow_run(
    folder: Path,
    model: str,
    flow_run_id: str,
    recorded: int,
    left_out: list[tuple[str, int]],
    keep_earlier: bool,
    superseded: dict[str, int] | None,
) -> StageChains:
    try:
        earlier = read_chains(folder) if keep_earlier else None
    except ApeError:  # a damaged file: what this run knows replaces it
        earlier = None
    runs = [run for run in (earlier.flow_runs if earlier else []) if run.flow_run_id != flow_run_id]
    if superseded:
        runs = _without(runs, superseded)
    if recorded or left_out or not runs:  # a resumed run that ran nothing adds no entry
        runs.append(
            FlowRunChains(
                flow_run_id=flow_run_id,
                chains_recorded=recorded,
                left_out=[LeftOut(item_id=key, run_index=index) for key, index in left_out],
            )
        )
    chains = StageChains(model=model, flow_runs=runs)
    write_chains(folder, chains)
    return chains


def note_interrupted(folder: Path, results: Path) -> FlowRunChains | None:
    """Add to ``folder``'s file the evaluate flow run whose process ended mid-run (its
    ``live.json`` still says it was going), with every session it saved (``results``' batches
    saved since it started) named as left out; the entry, or None when no run was
    interrupted or the file names it already.

    Why: without it ``ape record`` has no list for a killed run, and the sessions the run left
    out while the server was behind, or still had queued when it died, would never reach the
    UI. The names are what the saved results say; ``ape record`` sends only what the server
    lacks of them (fixed task-run ids). Call it only while no run writes ``folder``: under its
    lock, or once :func:`~ape.tasks.storage.outdir.in_use` says nobody holds it."""
    live_path = Path(folder) / LIVE_FILE
    if not live_path.is_file():
        return None
    try:
        live = read_live(live_path)
    except ApeError:  # not one APE wrote: nothing to go by
        return None
    if live.state not in ("running", "paused", "draining") or not _is_uuid(live.flow_run_id):
        return None
    with _locked(folder):
        return _note_interrupted(folder, results, live)


def _note_interrupted(folder: Path, results: Path, live: LiveStatus) -> FlowRunChains | None:
    assert live.flow_run_id is not None  # _is_uuid
    chains = read_chains(folder) or StageChains(model=live.model)  # a damaged one: its ApeError
    if any(run.flow_run_id == live.flow_run_id for run in chains.flow_runs):
        return None
    latest: dict[str, list[int]] = {}  # item id -> its sessions, as last saved by this run
    for batch in read_batches(results) if Path(results).is_file() else ():
        if batch.saved_at >= live.started_at:
            latest[batch.item_id] = [session.run_index for session in batch.sessions]
    entry = FlowRunChains(
        flow_run_id=live.flow_run_id,
        left_out=[LeftOut(item_id=key, run_index=index) for key, runs in latest.items() for index in runs],
        interrupted=True,
    )
    chains.flow_runs.append(entry)
    write_chains(folder, chains)
    return entry


def _is_uuid(text: str | None) -> bool:
    """A flow run's id as Prefect makes them: read from a file anyone may have written, it
    names nothing but a flow run."""
    try:
        return text is not None and str(uuid.UUID(text)) == text.lower()
    except ValueError:
        return False


def record_folder(model_folder: Path, top: Path) -> Path:
    """The folder to name in ``ape record``: the benchmark's output (or run) folder ``top``
    when the model's folder is it or one of its model folders, else the model's folder."""
    model_folder, top = Path(model_folder), Path(top)
    try:
        here, there = model_folder.resolve(), top.resolve()
    except OSError:
        return model_folder
    return top if there in (here, here.parent) else model_folder


def record_command(folder: Path) -> str:
    """The command that records the chains left out under ``folder``."""
    return f"{RECORD_COMMAND} {folder}"


def record_line(recorded: int, left_out: int, commands: list[str]) -> str:
    """One line for the report (so once per run, an information, not a warning): how many
    chains are in the UI and, when some were left out, the command(s) that record them."""
    if not left_out:
        return f"Stage chains in the Prefect UI: all {recorded} recorded"
    named = " and ".join(f"`{command}`" for command in dict.fromkeys(commands))
    return (
        f"Stage chains in the Prefect UI: {recorded} recorded, {left_out} left out to keep the run at "
        f"its own pace (every session is there and the results are complete); {named} adds them"
    )
