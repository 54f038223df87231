"""``ape record RUN_DIR``: record in the Prefect UI the stage chains a run left out.

A run records every session's own task run, and the stage chain of every session while
the Prefect server keeps up; the plain chains it left out while the server was behind
are named in each model folder's ``stage_chains.json``. This command rebuilds them from
the saved results (``ape.tasks.recording.afterwards``: the states as the run would have sent
them, the times reconstructed from what was saved), sends them to the flow runs they
belong to, waits until the server holds them, and rewrites the file (and the report's
count) with nothing left out. Sending twice is harmless: a stage's task run has a fixed
id, so a second ``ape record`` finds nothing left to record.

A run whose server is behind at its end starts this command itself, detached, for its output
folder (``ape.tasks.recording.catch_up``: the background catch-up, logged to ``record.log``);
run by hand it completes what a killed run or a killed catch-up left. A killed run wrote no
list: its model folder's ``live.json`` still says it was going, and every session it saved is
named from the results (``ape.tasks.storage.stage_chains.note_interrupted``), once no process
holds the folder's lock.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ape.cli.exit_codes import EXIT_FAILED, EXIT_OK
from ape.schemas.errors import ApeError
from ape.tasks.storage import prefect_api
from ape.tasks.storage.file_modes import following

if TYPE_CHECKING:
    from ape.schemas.mirror import MirrorState
    from ape.tasks.storage.mirror_status import MirrorProgress
    from ape.tasks.storage.stage_chains import StageChains

NAME = "record"
HELP = "record in the Prefect UI the stage chains a run left out while the server was behind"

log = logging.getLogger("ape")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "folder",
        metavar="RUN_DIR",
        type=Path,
        help="a run folder (OUTPUT/runs/<run id>), OUTPUT/latest, or the output folder of a run in place",
    )


def main(args: argparse.Namespace) -> int:
    import httpx  # deferred: the CLI starts without httpx

    try:
        with following(args.folder):  # the rewritten stage_chains.json: as private as the folder
            return record(args.folder)
    except httpx.TransportError as exc:
        server_gone(args.folder, exc)


def server_gone(folder: Path, exc: Exception) -> NoReturn:
    """The server stopped answering while chains were being sent: say so once and end now.

    Why ``os._exit``: Prefect's events worker would otherwise drain its queue at exit, one
    failed connection per event (hundreds, for half an hour, to a port nothing listens on).
    Nothing is lost: ``stage_chains.json`` still names every chain not confirmed on the
    server, and a stage's task run has a fixed id, so the next ``ape record`` sends only what
    is missing."""
    last_words(folder, f"the Prefect server stopped answering ({type(exc).__name__}: {exc})")
    sys.stderr.flush()
    os._exit(EXIT_FAILED)


def last_words(folder: Path, reason: str) -> None:
    """The one line when the server is gone (``reason``: what was seen), and ``mirror.json``
    says so, for ``ape status``; also what :mod:`ape.watchdog` says before it ends the process."""
    for progress in _PROGRESS:
        _say(progress, "server_gone")
    sys.stdout.flush()
    sys.stderr.write(
        f"error: {reason}; the chains not yet recorded stay listed in {folder}: run `ape record {folder}` "
        "again once the server is up (results on disk are complete)\n"
    )


def record(folder: Path) -> int:
    """Record the chains left out under ``folder``; 0 when the server holds them all (or
    nothing was left out), 1 when it had not recorded them when the wait ended."""
    from ape.tasks.storage.run_files import metadata_near  # deferred: the CLI starts without pandas
    from ape.tasks.storage.stage_chains import CHAINS_FILE, read_chains

    if not folder.is_dir():
        raise ApeError("no such folder", where=str(folder), hint="give OUTPUT/runs/<run id>, OUTPUT/latest or OUTPUT")
    top = folder.resolve()  # OUTPUT/latest is a link to the run folder
    models = [meta.parent for meta, _ in metadata_near(top)]
    if not models:
        raise ApeError(
            "not a run or output folder: no run's metadata in it or in its model folders",
            where=str(folder),
            hint="give OUTPUT/runs/<run id>, OUTPUT/latest or the output folder of a run in place",
        )
    for model in models:
        _note_killed_run(model)
    found = [(model, chains) for model in models if (chains := read_chains(model)) is not None]
    if not found:
        raise ApeError(
            f"no {CHAINS_FILE} here",
            where=str(folder),
            hint="the run predates it, or ran outside a Prefect flow run; such runs left no list of chains to record",
        )
    pending = [(model, chains) for model, chains in found if chains.chains_left_out]
    recorded = sum(chains.chains_recorded for _, chains in found)
    left_out = sum(chains.chains_left_out for _, chains in found)
    if not pending:
        _start_progress(folder, recorded, left_out, pending)
        print(f"nothing left to record: every stage chain of {folder} is in the Prefect UI ({recorded} recorded)")
        return EXIT_OK
    api = _connect()
    from ape.watchdog import api_watchdog  # deferred: imports Prefect's client

    # the server's death (or another user on its port) is seen at once and nothing more goes
    # to it; without the watch, Prefect's client retried each request for a minute
    watchdog = api_watchdog(top, last_words=lambda reason: last_words(folder, reason))
    with watchdog if watchdog is not None else nullcontext():
        for model, chains in pending:  # every flow run known before anything is sent
            for entry in chains.flow_runs:
                if entry.left_out and not _known(entry.flow_run_id, api):
                    raise _unknown(entry.flow_run_id, api, model / CHAINS_FILE, _started(top, model / CHAINS_FILE))
        progress = _start_progress(folder, recorded, left_out, pending)
        complete = True
        for model, chains in pending:
            complete &= _record_model(model, chains, progress)
    from ape.tasks.report.build import recount_stage_chains  # deferred: pandas

    recount_stage_chains(top, models)
    _say(progress, "complete" if complete else "incomplete")
    return EXIT_OK if complete else EXIT_FAILED


_PROGRESS: list[MirrorProgress] = []  # this process's, for server_gone's last word


def _start_progress(folder: Path, recorded: int, left_out: int, pending: list[Any]) -> MirrorProgress:
    """The catch-up's ``mirror.json`` in ``folder`` (``ape status`` reads it): written now as
    sending when something is left, or as complete over an earlier one when nothing is."""
    from ape.schemas.mirror import MIRROR_FILE
    from ape.tasks.storage.mirror_status import MirrorProgress

    progress = MirrorProgress(folder, chains_total=recorded + left_out, chains_done=recorded)
    _PROGRESS[:] = [progress]
    if pending:
        _say(progress, "sending")
    elif (folder / MIRROR_FILE).exists():
        _say(progress, "complete")
    return progress


def _say(progress: MirrorProgress, state: MirrorState) -> None:
    """Write ``mirror.json``; a folder it cannot be written to costs the status line only."""
    from ape.schemas.mirror import MIRROR_FILE

    try:
        progress.write(state)
    except OSError as exc:
        log.warning("could not write %s: %s", progress.folder / MIRROR_FILE, exc.strerror or exc)


def _note_killed_run(model: Path) -> None:
    """A run of ``model``'s folder killed mid-run wrote no list of chains: make it from the
    saved results (every session it saved; those the server holds are not sent again), unless
    a run is writing the folder now."""
    from ape.tasks.storage.outdir import in_use
    from ape.tasks.storage.run_files import run_files_in
    from ape.tasks.storage.stage_chains import note_interrupted

    if in_use(model):  # a run going: it writes its own list at its end
        log.info("%s: a run is writing this folder; its chains are its own to list", model)
        return
    entry = note_interrupted(model, run_files_in(model).results)
    if entry is not None:
        log.info(
            "%s: flow run %s ended mid-run; its %d saved session(s) are checked against the server",
            model,
            entry.flow_run_id,
            len(entry.left_out),
        )


def _connect() -> str:
    """Point this process at the Prefect API the run reported to: the configured one, else the
    running local server of this APE home (with its credentials); never a new server, which
    would not know the run."""
    from ape import server  # deferred: Prefect reads its settings at import, after these are set

    api = server.existing_api_url()
    if api is None:
        raise ApeError(
            "no Prefect server reachable: none configured (PREFECT_API_URL) and this APE home's is not running",
            hint="start it with `ape server start`, or set PREFECT_API_URL to the server the run reported to",
        )
    try:
        with prefect_api.sync_client() as client:
            client.request("GET", "/health").raise_for_status()
    except Exception as exc:
        message = f"no Prefect server reachable at {api}: {exc}"
        raise ApeError(message, hint="start it, or check PREFECT_API_URL") from None
    return api


def _known(flow_run_id: str, api: str) -> bool:
    from ape.tasks.recording.afterwards import flow_run_known  # deferred: imports Prefect

    try:
        return flow_run_known(flow_run_id)
    except Exception as exc:  # refused credentials, a server error: one line, not a traceback
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            raise ApeError(
                f"the Prefect server at {api} refused the credentials",
                hint='set PREFECT_API_AUTH_STRING (`eval "$(ape server env)"`)',
            ) from None
        raise ApeError(f"asking the Prefect server at {api} failed: {exc}") from None


def _started(top: Path, chains_file: Path) -> datetime:
    """When the run started: its ``run.json`` (a run folder), else when its list of chains was
    last written (a run in place)."""
    from ape.tasks.storage.runs import read_info

    try:
        info = read_info(top)
    except ValueError:
        info = None
    if info is not None:
        return datetime.fromisoformat(info.started_at)
    return datetime.fromtimestamp(chains_file.stat().st_mtime, UTC)


def _unknown(flow_run_id: str, api: str, where: Path, started: datetime) -> ApeError:
    """The one line for a flow run the server does not know: forgotten (past its retention), or
    never sent to it (another server or APE home). The flow run's time is read from its id
    where that is a UUIDv7, else the run's start is taken."""
    import httpx

    from ape import server, server_db  # deferred: the CLI starts without httpx

    now = datetime.now(UTC)
    created = server_db.flow_run_created(flow_run_id) or started
    retention = server.running_retention() if api == server.running_api_url() else None
    try:
        with server.api_session(api, timeout=10.0) as client:
            oldest = server_db.oldest_run_start(client)
    except (httpx.HTTPError, ValueError):
        oldest = None
    if server_db.past_retention(created, oldest, retention, now):
        kept = f"it {server.describe_retention(retention)}; " if retention else ""
        since = f"the oldest run it keeps started {oldest:%Y-%m-%d}" if oldest else "it keeps no older run"
        return ApeError(
            f"flow run {flow_run_id} (started {created:%Y-%m-%d}) is past the retention of the Prefect server "
            f"at {api} ({kept}{since}): nothing to record there; its results, history, `ape diff` and "
            "`ape retry` work from the output folder",
            where=str(where),
            hint=f"to keep runs longer in the UI, set {server.RETENTION_ENV} before the server starts (docs/server.md)",
        )
    return ApeError(
        f"the Prefect server at {api} does not know flow run {flow_run_id}",
        where=str(where),
        hint="the run reported to another server or APE home: set APE_HOME or PREFECT_API_URL as it ran",
    )


def _record_model(model: Path, chains: StageChains, progress: MirrorProgress | None = None) -> bool:
    """Record every flow run's chains left out in ``model``'s folder, then take what was
    recorded off its file as the file is by then (``stage_chains.settle``: the next run of the
    folder may have written it meanwhile)."""
    from ape.tasks.recording.afterwards import chains_held, record_flow_run  # deferred: imports Prefect
    from ape.tasks.storage.run_files import run_files_in
    from ape.tasks.storage.stage_chains import settle

    results = run_files_in(model).results
    name = chains.model or model.name
    complete = True
    settled: dict[str, tuple[set[tuple[str, int]], set[tuple[str, int]]]] = {}
    for entry in chains.flow_runs:
        if not entry.left_out:
            continue
        recorded, dropped = settled.setdefault(entry.flow_run_id, (set(), set()))
        if entry.interrupted:  # named from the results: the chains that went live are not sent again
            held = chains_held(entry.flow_run_id, [(s.item_id, s.run_index) for s in entry.left_out])
            recorded |= held
            entry.left_out = [s for s in entry.left_out if (s.item_id, s.run_index) not in held]
            if progress is not None:
                progress.sent(len(held))
            if not entry.left_out:
                continue
        count, flow_run_id = len(entry.left_out), entry.flow_run_id
        log.info("%s: recording %d stage chain(s) left out of flow run %s", name, count, flow_run_id)
        done = record_flow_run(
            entry,
            results,
            on_progress=lambda line: log.info("%s: %s", name, line),
            on_sent=None if progress is None else progress.sent,
        )
        if not done.complete:
            complete = False
            continue
        dropped |= set(done.missing)
        recorded |= {(s.item_id, s.run_index) for s in entry.left_out} - dropped
        if done.missing:
            log.warning(
                "%s: %d session(s) have no saved result any more (redone or discarded since): not recorded",
                name,
                len(done.missing),
            )
        print(f"{name}: recorded {done.sessions} stage chain(s) ({done.task_runs} task runs) in flow run {flow_run_id}")
    settle(model, settled)
    return complete
