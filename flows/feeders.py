"""How items reach the solver workers: threads of this process, or a Dask cluster.

A :class:`Feeder` takes items (``submit``), hands back finished OutputBatches
(``next_done``) and keeps track of what is in flight (``pending``), so the
runner's loop is the same for both. A feeder is given exactly what it uses (the
item processor, the items to regenerate, the session log) rather than the runner.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Collection, Sized
from concurrent.futures import Future, ThreadPoolExecutor
from queue import Empty, SimpleQueue
from typing import Any, Protocol

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.settings import PREFECT_API_URL
from pydantic import BaseModel

from ape.flows.item import ItemProcessor
from ape.schemas.config import ApeConfig
from ape.schemas.data import item_id
from ape.schemas.errors import ApeError
from ape.schemas.results import OutputBatch
from ape.tasks.common.write_behind import WriteBehind
from ape.tasks.recording import RunRecording
from ape.tasks.session.stages import Worker, bind_worker
from ape.tasks.setup.model import ModelSetup, fingerprint_hash, make_setup
from ape.tasks.storage.transcripts import SessionLog

log = logging.getLogger("ape")


class Feeder(Protocol):
    """What the runner's loop needs of a feeder."""

    @property
    def pending(self) -> Sized: ...

    def submit(self, item: BaseModel) -> None: ...

    def next_done(self) -> list[OutputBatch]: ...

    def withdraw(self) -> list[BaseModel]: ...

    def close(self) -> None: ...


class ThreadFeeder:
    """Solver workers as threads of this process, each with its own model and tools.

    The worker threads make no file system calls of their own for a session: its
    transcripts are kept by the session log and its cache record is handed to one writer
    thread (:class:`~ape.tasks.common.write_behind.WriteBehind`); :meth:`next_done` returns an
    item only once both are on disk, so the runner saves nothing whose transcripts or cache
    record a crash could still lose. (Each such call let the other 255 threads of a
    256-worker run take the interpreter lock while the session waited to get it back.)
    """

    def __init__(
        self, processor: ItemProcessor, refresh: Collection[str], session_log: SessionLog, recording: RunRecording
    ):
        setup, carousel = processor.setup, processor.carousel

        def start_worker() -> None:
            bind_worker(Worker(setup, carousel))

        self.processor = processor
        self.recording = recording
        self.refresh = refresh
        self.session_log = session_log
        self.pool = ThreadPoolExecutor(
            max_workers=setup.config.run.solver_workers, initializer=start_worker, thread_name_prefix="solver"
        )
        self.pending: set[Future] = set()
        self._items: dict[Future, BaseModel] = {}  # what each pending future runs (for withdraw)
        # futures as they finish, put by their done callback: next_done takes them in O(1) each;
        # concurrent.futures.wait over the window (4x the workers) locked and unlocked every
        # pending future per call, a fifth of the run's CPU at 256 workers
        self._finished: SimpleQueue[Future] = SimpleQueue()
        self.cache = processor.stages.session_cache
        self.writer = WriteBehind("ape-cache-writer") if self.cache is not None else None
        if self.cache is not None:
            self.cache.writer = self.writer
        self._raised: BaseException | None = None  # a failed cache write next_done raised already

    def _run(self, item: BaseModel) -> tuple[OutputBatch, int]:
        """The item's batch and the ticket of its last cache write (0: none)."""
        batch = self.processor.run_item(item, self.recording, item_id(item) in self.refresh, self.session_log)[0]
        return batch, self.writer.mine() if self.writer is not None else 0

    def submit(self, item: BaseModel) -> None:
        # the copied context carries the flow run, so the stage tasks are tracked in it
        ctx = contextvars.copy_context()
        future = self.pool.submit(ctx.run, self._run, item)
        self.pending.add(future)
        self._items[future] = item
        future.add_done_callback(self._finished.put)

    def next_done(self) -> list[OutputBatch]:
        """The batches of the items that finished: waits for one, then gathers what finishes
        within 5 ms (items of one wave finish together, and are committed with one fsync)."""
        done: list[Future] = []
        deadline = None
        while self.pending:
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                future = self._finished.get(timeout=timeout)
            except Empty:
                break
            if future not in self.pending:  # withdrawn (cancelled) by a pause or drain
                continue
            self.pending.discard(future)
            self._items.pop(future, None)
            done.append(future)
            if deadline is None:
                deadline = time.monotonic() + 0.005
        finished = [f.result() for f in done]
        if self.writer is not None and finished:
            try:
                self.writer.wait(max(ticket for _, ticket in finished))  # their cache records are written
            except BaseException as exc:  # the run stops with it (SaveFailed names the file)
                self._raised = exc
                raise
        self.session_log.flush()  # and their transcripts
        return [batch for batch, _ in finished]

    def withdraw(self) -> list[BaseModel]:
        """Take back the items queued but not started (a pause or a drain: only the sessions
        going now finish); in the order they were submitted."""
        taken = [future for future in self._items if future.cancel()]
        for future in taken:
            self.pending.discard(future)
        return [self._items.pop(future) for future in taken]

    def close(self) -> None:
        for future in self.pending:
            future.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)
        if self.cache is not None:
            self.cache.writer = None
        if self.writer is not None:
            try:
                self.writer.close()  # what sessions not saved queued: written, or its error shown
            except Exception as exc:  # the run's own error (if any) is the one raised
                if exc is not self._raised:  # said once: the run's error already names it
                    log.warning("a session cache write failed: %s", exc)


class DaskFeeder:
    """Items as Prefect tasks on the flow's DaskTaskRunner; transcripts are written here."""

    def __init__(self, setup: ModelSetup, refresh: Collection[str], session_log: SessionLog, recording: RunRecording):
        self.config = setup.config
        self.recording = recording
        self.model_index = setup.config.model.index(setup.model_cfg)
        self.refresh = refresh
        self.session_log = session_log
        self.pending: set[Any] = set()

    def submit(self, item: BaseModel) -> None:
        key = item_id(item)
        payload = item.model_dump(mode="json", by_alias=True)
        future = dask_item_task.with_options(task_run_name=f"item[{key}]").submit(
            self.config, self.model_index, payload, key in self.refresh
        )
        self.pending.add(future)

    def next_done(self) -> list[OutputBatch]:
        while True:
            done = {f for f in self.pending if f.wrapped_future.done()}
            if done:
                break
            time.sleep(0.02)
        self.pending -= done
        batches = []
        for future in done:
            batch, transcripts, chains = future.result()
            for session, transcript in zip(batch.sessions, transcripts):
                self.session_log.write(session, transcript)
            self.recording.add_chains(chains)  # counted in this process, where the run's summary is
            batches.append(batch)
        self.session_log.flush()  # the transcripts on disk before the runner saves their items
        return batches

    def withdraw(self) -> list[BaseModel]:
        """Items on a Dask cluster are not taken back: those submitted finish and are saved."""
        return []

    def close(self) -> None:
        for future in self.pending:
            try:
                future.wrapped_future.cancel()
            except Exception:
                pass


_processors: dict[str, ItemProcessor] = {}
_processors_lock = threading.Lock()
_thread_workers = threading.local()


def run_item_on_worker(
    config: ApeConfig, model_index: int, item: dict[str, Any], refresh: bool
) -> tuple[OutputBatch, list[list[Any]], list[tuple[str, int, bool]]]:
    """One item on a Dask worker: the setup is built once per worker process, the solver
    worker (model client, tools) once per worker thread. Returns the item's batch, its
    transcripts and its stage chains (recorded or left out) for the flow's process."""
    key = fingerprint_hash(config.model_dump(mode="json")) + f"#{model_index}"
    with _processors_lock:
        processor = _processors.get(key)
        if processor is None:
            processor = _processors[key] = ItemProcessor(make_setup(config, config.model[model_index]))
    workers = getattr(_thread_workers, "by_plan", None)
    if workers is None:
        workers = _thread_workers.by_plan = {}
    if key not in workers:
        workers[key] = Worker(processor.setup, processor.carousel)
    bind_worker(workers[key])
    recording = RunRecording.start(config.run, collect=True)  # this item's sessions, for the flow's process
    batch, transcripts = processor.run_item(processor.setup.data_model.model_validate(item), recording, refresh)
    return batch, transcripts, recording.collected


# Wrapped without the decorator so the plain function keeps its own importable name:
# Dask pickles it by reference, not by value.
dask_item_task = task(name="item", cache_policy=NO_CACHE, persist_result=False)(run_item_on_worker)


def dask_task_runner(config: ApeConfig) -> Any:
    """A DaskTaskRunner for ``[run] task_runner = "dask"``: the given (TLS) scheduler, or a local
    cluster of worker processes sharing ``solver_workers`` threads that admits only this run's
    client (see :mod:`ape.flows.dask_cluster`)."""
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise ApeError(
            "task_runner = 'dask' needs prefect-dask", where="[run] task_runner", hint="pip install 'ape-bench[dask]'"
        ) from None

    from ape.flows.dask_cluster import external_cluster, local_cluster

    run = config.run
    # checked first: the address is the config's alone, the server may come later
    external = external_cluster(run) if run.dask_address else None
    if not PREFECT_API_URL.value():
        # without one, every Dask worker process would start a temporary Prefect server of
        # its own, which outlives the flow and loses the task runs
        raise ApeError(
            "task_runner = 'dask' needs a Prefect server for the workers to report to",
            where="[run] task_runner",
            hint="run without --no-server, or set PREFECT_API_URL",
        )
    if external is not None:
        return DaskTaskRunner(**external)
    threads = max(1, -(-run.solver_workers // run.dask_workers))
    return DaskTaskRunner(**local_cluster(run.dask_workers, threads))
