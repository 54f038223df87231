"""One flow run's mirror in the Prefect UI, owned by one object: :class:`RunRecording`.

Why: mirroring a run (each session's task run and stage chain, the chains left out while
the server is behind, the end wait) used to be done in pieces by the flows, each calling
a process-wide count of its own. A model flow now starts one :class:`RunRecording`, hands
it every session (:meth:`RunRecording.session`) and ends it with :meth:`RunRecording.finish`,
which says which chains were recorded and which left out; a parent flow waits for the
server with :func:`wait_for_server`. The flows import nothing else of this package.

What stays process-wide, behind this object (``ape.tasks.recording.server``): the count of
task runs the server has yet to record, because the server's event queue is shared by
every flow run of the process (a benchmark's model flows run side by side, a served
deployment runs many), so the solver workers' throttle and the chain budget must see
them all; the count of chains judged per flow run for the first-chains allowance (a Dask
worker process makes one recording per item); and the one watcher thread that shows slow
sessions as Running.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ape.schemas.config import RunConfig
from ape.tasks.recording import server
from ape.tasks.recording.catch_up import start_catch_up
from ape.tasks.recording.server import ChainTally, ServerHeld, session_bookkeeping
from ape.tasks.recording.stage_runs import StageRecorder
from ape.tasks.storage.prefect_api import current_flow_run_id
from ape.tasks.storage.stage_chains import CHAINS_FILE, read_chains

log = logging.getLogger("ape")

# a session's chain: (item id, run index, recorded)
ChainNote = tuple[str, int, bool]


class RunRecording:
    """What one flow run sends to the Prefect UI, from its first session to its end.

    ``collect``: the sessions run in another process than the flow (a Dask worker), so
    their chains are kept in :attr:`collected` for the flow's process to add
    (:meth:`add_chains`) instead of counted here.
    """

    def __init__(
        self, flow_run_id: str | None, *, record_stages: bool, live_stages: bool, collect: bool = False
    ) -> None:
        self.flow_run_id = flow_run_id
        self.record_stages = record_stages  # each session's chain as recorded task runs
        self.live_stages = live_stages  # stage granularity: the chain ran as live task runs
        self.collect = collect
        self.collected: list[ChainNote] = []
        self._lock = threading.Lock()  # sessions end on many solver threads
        self._tally = ChainTally()

    @classmethod
    def start(cls, run: RunConfig, *, collect: bool = False) -> RunRecording:
        """The recording of the flow run the caller belongs to, by its ``[run]`` settings."""
        flow_run_id = current_flow_run_id()
        return cls(
            None if flow_run_id is None else str(flow_run_id),
            record_stages=run.task_granularity == "session" and run.stage_runs,
            live_stages=run.task_granularity == "stage",
            collect=collect,
        )

    @contextmanager
    def session(self, item_id: str, run_index: int) -> Iterator[StageRecorder]:
        """One session's chain runs inside the block and reports to the recorder it yields;
        afterwards its task runs are sent and counted (``server.session_bookkeeping``)."""
        with session_bookkeeping(
            self.flow_run_id, self._note, item_id, run_index, self.record_stages, live_stages=self.live_stages
        ) as recorder:
            yield recorder

    def _note(self, flow_run_id: str | None, item_id: str, run_index: int, recorded: bool) -> None:
        if flow_run_id is None:
            return
        with self._lock:
            if self.collect:
                self.collected.append((item_id, run_index, recorded))
            else:
                self._tally.add(item_id, run_index, recorded)

    def add_chains(self, chains: Iterable[ChainNote]) -> None:
        """Chains a worker process collected for this flow run."""
        if self.flow_run_id is None:
            return
        with self._lock:
            for item_id, run_index, recorded in chains:
                self._tally.add(item_id, run_index, recorded)

    def finish(self) -> ChainTally:
        """The chains recorded and left out of this flow run (it has ended)."""
        with self._lock:
            tally, self._tally = self._tally, ChainTally()
        return tally


def wait_for_server(flow_run_ids: list[str], on_progress: Callable[[str], None] | None = None) -> ServerHeld | None:
    """Before a run reports done, wait until the Prefect server holds every task run of
    ``flow_run_ids`` (or say how many it lacks), then forget those flow runs here."""
    try:
        return server.wait_until_recorded(flow_run_ids, server.TASK_RUN_COUNTS, on_progress=on_progress)
    finally:
        server.TASK_RUN_COUNTS.forget(flow_run_ids)


def left_out_sessions(output: Path, flow_run_ids: Iterable[str]) -> int:
    """Sessions of ``flow_run_ids``, and of the killed runs a run continued, that
    ``stage_chains.json`` files in ``output`` or its model folders name as left out (to be
    sent after the run)."""
    ids = set(flow_run_ids)
    left = 0
    for path in [output / CHAINS_FILE, *output.glob(f"*/{CHAINS_FILE}")]:
        try:
            chains = read_chains(path.parent)
        except Exception:  # a damaged file: `ape record` says so; the count here is a hint
            log.debug("could not read %s", path, exc_info=True)
            continue
        if chains is not None:
            left += sum(len(run.left_out) for run in chains.flow_runs if run.flow_run_id in ids or run.interrupted)
    return left


def finish_recording(flow_run_ids: list[str], output: Path, on_progress: Callable[[str], None]) -> Path | None:
    """The run's end: wait a few seconds (:data:`~ape.tasks.recording.server.END_WAIT_S`) for
    the server to hold what was sent; when more is left (task runs still on their way, or
    sessions left out while it was behind), start the background catch-up
    (:mod:`~ape.tasks.recording.catch_up`), say how far the UI is behind, and return the
    catch-up's log. None when the server holds the whole run.

    A run that left sessions out (the server was behind) does not wait at all: the catch-up
    starts anyway and completes the mirror, and the seconds of waiting were the run's own
    (up to 5.2 s of a 5 s ideal at 256 workers over HTTP). The server is asked once, for the
    line that says how far it is."""
    left = left_out_sessions(output, flow_run_ids)
    try:
        held = server.wait_until_recorded(
            flow_run_ids,
            server.TASK_RUN_COUNTS,
            wait_s=0.0 if left else server.END_WAIT_S,
            on_progress=on_progress,
            say_missing=False,
        )
    finally:
        server.TASK_RUN_COUNTS.forget(flow_run_ids)
    if left == 0 and (held is None or held.complete):
        return None
    try:
        log_path, pid = start_catch_up(output)
    except OSError as exc:
        on_progress(
            f"could not start the background catch-up ({exc}); run `ape record {output}` "
            "to complete the run in the Prefect UI (results on disk are complete)"
        )
        return None
    sent = f"{held.final:,} of {held.expected:,} task runs sent" if held is not None else "every task run sent"
    on_progress(
        f"UI: the Prefect server holds {sent}, and {left:,} session chain(s) wait to be sent; "
        f"the rest follows in the background (pid {pid}), see {log_path}; `ape status {output}` says how far it is"
    )
    return log_path
