"""The evaluate flow: one model over the data, item by item, resumable.

Shape of a run on Prefect:

    DataProvider --(bounded window)--> solver workers --> CheckerCarousel
                                             |
                         OutputBatch per item v
                                        SaveHandler (this thread) -> results.jsonl / metadata.json

The solver workers are threads of this process or a Dask cluster (the feeders of
:mod:`ape.flows.feeders`). Each owns its model client and tools and runs an item's
whole chain (render -> solve -> adapt -> check -> score, for every run of the item:
:class:`ape.flows.item.ItemProcessor`) by *calling* the stage tasks, never by waiting
on futures of other pool tasks (which deadlocks a bounded pool into serial speed). Items are
submitted in a bounded window, so memory stays flat however long the data
file is, and finished batches are saved by the flow's own thread, in groups,
with one fsync per group.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from prefect import State, flow
from prefect.runtime import flow_run
from prefect.states import Failed
from pydantic import BaseModel

from ape.flows.feeders import DaskFeeder, Feeder, ThreadFeeder, dask_task_runner
from ape.flows.heartbeats import model_heartbeats
from ape.flows.item import ItemProcessor
from ape.flows.live.control import recorded_events
from ape.flows.live.run import LiveRun
from ape.flows.logs import CONSOLE_SKIP, run_logs
from ape.flows.preflight import handed
from ape.flows.progress import Tally, repeated_errors
from ape.flows.resume import apply_changes, recorded, refuse_mixing, retry_lines
from ape.schemas.data import item_id
from ape.schemas.errors import ApeError
from ape.schemas.results import Outcome, OutputBatch
from ape.tasks.common.collector import fewer_collections
from ape.tasks.common.words import count
from ape.tasks.models.batch.status import take_refused
from ape.tasks.models.limits.policy import limiter_for
from ape.tasks.recording import RunRecording
from ape.tasks.report.provenance import run_provenance
from ape.tasks.setup.model import ModelSetup, make_setup, resume_fingerprints, run_label
from ape.tasks.stats.cost import Budget
from ape.tasks.storage.cache_format import REFUSED
from ape.tasks.storage.config_ref import ConfigParameter, resolve_config
from ape.tasks.storage.live_files import interrupted_flow_run
from ape.tasks.storage.outdir import OutputLock
from ape.tasks.storage.run_files import config_location
from ape.tasks.storage.save import SaveFailed, SaveHandler
from ape.tasks.storage.stage_chains import note_flow_run, note_interrupted, record_command, record_line
from ape.tasks.storage.transcripts import JSONL_FILE, LOG_FILE, SessionLog

__all__ = ["Drained", "ItemsFailed", "ItemProcessor", "Runner", "dask_task_runner", "evaluate"]

log = logging.getLogger("ape")


class ItemsFailed(Exception):
    """The run finished, but more items errored than ``fail_on_error`` tolerates."""


class BudgetReached(ItemsFailed):
    """``[run] max_cost`` was spent before every item ran; the saved items are kept."""


class Drained(ItemsFailed):
    """Drained (``ape ctl drain``): no new item started, those in flight were saved, and the
    run ended resumably; the next ``ape run`` (or ``ape retry``) goes on. Exit code 4."""


class Runner:
    """Runs one ModelSetup: feeds items to the solver workers and saves what they finish."""

    def __init__(self, setup: ModelSetup, redo_outcomes: list[str] | None = None):
        self.setup = setup
        self.processor = ItemProcessor(setup)
        self.id_name = self.processor.id_name
        setup.out_dir.mkdir(parents=True, exist_ok=True)
        self.session_log: SessionLog | None = None  # opened by run(), after a reset
        self.redo_outcomes = {Outcome(o) for o in (redo_outcomes or [])}
        self.refresh: set[str] = set()  # items whose cached generations must be regenerated
        self.chains: dict[str, int] = {}  # stage chains recorded / left out (set when the loop ends)
        self.continues: str | None = None  # the flow run of a killed run this one resumes
        self.superseded: dict[str, int] = {}  # item id -> sessions discarded to redo (SaveHandler)
        self.earlier_control: list[Any] = []  # a resumed folder's earlier pause/resume/drain actions

    # -- the loop (flow thread) ----------------------------------------------------------
    def run(self) -> dict[str, Any]:
        setup = self.setup
        started = time.perf_counter()
        try:
            with OutputLock(setup.out_dir):  # one writer per output folder (see ape.tasks.storage.outdir)
                return self._run_locked(started)
        finally:  # the server's slots this run holds go back now, not when their leases expire
            limiter_for(setup.model_id, setup.model_cfg).close()

    def _run_locked(self, started: float) -> dict[str, Any]:
        setup, cfg = self.setup, self.setup.config
        REFUSED.start(setup.cache_dir)  # this run's first refused cache record warns (cache_format)
        fingerprints = resume_fingerprints(setup)
        saver = self._saver(fingerprints)
        self.superseded = saver.superseded  # the items this run discards to redo, filled as it does
        if cfg.run.load_save:
            self._resume(saver, fingerprints)
        else:
            saver.reset(also=(LOG_FILE, JSONL_FILE))
        self.session_log = SessionLog(setup.out_dir)
        provider = setup.provider()
        ids = provider.scan()
        skip = set(saver.completed)
        tally = Tally(total=len(ids))
        resumed = [key for key in ids if key in skip]
        for key in resumed:
            tally.resumed(saver.counts.get(key, (0, 0)))
        if tally.done:
            log.info("%s: resuming, %d of %d items already saved", setup.model_id, tally.done, tally.total)
        log.info(
            "%s: %d items, %d to run, %s each, %s, output %s",
            setup.model_id,
            tally.total,
            tally.total - tally.done,
            count(cfg.run.runs_per_data, "session"),
            count(cfg.run.solver_workers, "solver worker"),
            setup.out_dir,
        )
        feeder: Feeder
        recording = RunRecording.start(cfg.run)  # this flow run's mirror in the Prefect UI
        if cfg.run.task_runner == "dask":
            feeder = DaskFeeder(setup, self.refresh, self.session_log, recording)
        else:
            feeder = ThreadFeeder(self.processor, self.refresh, self.session_log, recording)
        items = (item for item in provider if item_id(item) not in skip)
        budget = Budget.for_run(cfg)  # [run] max_cost: checked before each item starts
        live = LiveRun(
            setup,
            tally=tally,
            results_path=saver.results_path,
            resumed=resumed,
            in_flight=lambda: len(feeder.pending),
            flow_run_id=recording.flow_run_id,
            earlier_control=self.earlier_control,
        )
        try:
            self._loop(saver, feeder, items, budget, live)
        except OSError as exc:  # a transcript, log or cache write failed (disk full, folder gone)
            where = exc.filename or setup.out_dir  # the session cache may be outside the folder
            raise SaveFailed(
                f"writing to {where} failed: {exc.strerror or exc}; the "
                f"{len(saver.completed)} items saved before are kept"
            ) from exc
        finally:
            feeder.close()
            # also when the run stopped early (budget, a failed save): its chains are listed
            self.chains = self._stage_chains(recording)
        if budget.stopped and tally.done < tally.total:
            raise BudgetReached(budget.message(setup.model_id, tally.total - tally.done))
        if live.mode == "drain" and tally.done < tally.total:
            raise Drained(
                f"{setup.model_id}: drained with {tally.done} of {tally.total} items saved; "
                f"run the same command again (or `ape retry {cfg.run.output}`) to go on from there"
            )
        return self._finish(saver, tally, started)

    def _saver(self, fingerprints: dict[str, Any]) -> SaveHandler:
        """The results file's writer, with what metadata.json says of this run."""
        setup, cfg = self.setup, self.setup.config
        return SaveHandler(
            setup.out_dir,
            save_file=cfg.run.save_file,
            metadata_file=cfg.run.metadata_file,
            run_info={
                "benchmark": cfg.name,
                "model": setup.model_id,
                "model_config": setup.fingerprint["model"],
                "solver_config": cfg.solver.model_dump(mode="json"),
                "runs_per_data": cfg.run.runs_per_data,
                "fingerprints": fingerprints,
                **config_location(cfg.config_file, setup.out_dir),  # config_file, and from the folder
                "provenance": run_provenance(cfg),
            },
        )

    def _resume(self, saver: SaveHandler, fingerprints: dict[str, Any]) -> None:
        """Load the saved results, refusing ones another setup wrote, and discard what is to
        be redone: errored items always, and those with an outcome ``ape retry --outcome`` names."""
        setup, cfg = self.setup, self.setup.config
        previous = recorded(setup.out_dir / cfg.run.metadata_file)
        refuse_mixing(previous, fingerprints, setup.out_dir)  # before anything is rewritten
        self.continues = interrupted_flow_run(setup.out_dir)  # before this run's live.json replaces it
        if self.continues:
            log.info(
                "%s: continues flow run %s, whose process ended mid-run (the server marks it Crashed "
                "once its heartbeats stop)",
                setup.model_id,
                self.continues,
            )
            try:  # its sessions the server lacks go with this run's catch-up (under this run's lock)
                note_interrupted(setup.out_dir, saver.results_path)
            except (OSError, ApeError) as exc:  # the results are safe; this run's end rewrites the file
                log.warning("%s: could not note it in stage_chains.json: %s", setup.model_id, exc)
        self.earlier_control = [e.model_dump(mode="json") for e in recorded_events(saver.load())]
        budget_redone = apply_changes(saver, previous, fingerprints, setup.model_id, cached=cfg.run.cache)
        redo = saver.discard(saver.errored_ids())
        if redo:
            log.info("%s: redoing %d item(s) whose session or check errored last time", setup.model_id, redo)
        others = self.redo_outcomes - {Outcome.ERROR}
        if others:
            self.refresh = set(saver.ids_with_outcomes(others))
            cut = len(self.refresh & set(saver.ids_with_outcomes({Outcome.TRUNCATED})))
            saver.discard(self.refresh)
            budget = fingerprints.get("budget")
            max_tokens = budget.get("max_tokens") if isinstance(budget, dict) else None
            for level, line in retry_lines(setup.model_id, others, len(self.refresh), cut, budget_redone, max_tokens):
                log.log(level, "%s", line)

    def _loop(
        self, saver: SaveHandler, feeder: Feeder, items: Iterator[BaseModel], budget: Budget, live: LiveRun
    ) -> None:
        """Feed items in a window, save what is done, obey the live run's mode (:mod:`ape.flows.live`)."""
        setup, cfg = self.setup, self.setup.config
        assert self.session_log is not None  # opened by run() before the loop
        window = cfg.run.window or 4 * cfg.run.solver_workers
        with saver, self.session_log, live, fewer_collections():
            exhausted = False
            held: deque[BaseModel] = deque()  # items a pause took back before they started
            while feeder.pending or held or not exhausted:
                if live.mode != "run":  # read off the hot path (ape.flows.live.control)
                    held.extend(feeder.withdraw())  # queued, not started: only sessions going finish
                if live.mode == "drain":
                    exhausted = True
                    held.clear()  # not run now: the next run takes them
                while (held or not exhausted) and live.mode == "run" and len(feeder.pending) < window:
                    if not budget.allow(len(feeder.pending)):
                        exhausted = budget.stopped  # else: wait for items in flight, ask again
                        break
                    item = held.popleft() if held else next(items, None)  # taken back ones first
                    if item is None:
                        exhausted = True
                        break
                    feeder.submit(item)
                if not feeder.pending:
                    if live.mode == "pause" and (held or not exhausted):  # in flight all saved: wait
                        live.hold(saver)
                        continue
                    break
                batches = feeder.next_done()
                saver.save(batches)
                budget.add(batches)
                for batch in batches:
                    live.saw(batch)
                    if setup.hook is not None:
                        self._call_hook(batch)
                live.update()
            live.note(saver)  # the server's limits the calls took; who paused, resumed or drained

    def _finish(self, saver: SaveHandler, tally: Tally, started: float) -> dict[str, Any]:
        setup, cfg = self.setup, self.setup.config
        errored = len(saver.errored_ids())
        summary = {
            "model": setup.model_id,
            "output": str(setup.out_dir),
            "items": tally.total,
            "done": tally.done,
            "errored_items": errored,
            "sessions": tally.sessions,
            "errored_sessions": tally.errors,
            "check_errors": tally.check_errors,
            "passed": tally.passed,
            "wall_seconds": round(time.perf_counter() - started, 3),
            "refused_cache_records": REFUSED.take(setup.cache_dir),
            "continues_flow_run": self.continues,
            "refused_batch_records": take_refused(setup.model_id),
            **self.chains,
        }
        for line in repeated_errors(setup.model_id):  # each shown once on the terminal, counted here
            log.warning("%s", line)
        log.info("%s: %s", setup.model_id, tally.line())
        if summary["refused_cache_records"]:  # the count; the run's first refusal was the warning
            log.info(
                "%s: %d cache record(s) in %s refused (not APE's JSON records): never loaded, their sessions redone",
                setup.model_id,
                summary["refused_cache_records"],
                setup.cache_dir,
            )
        if summary["refused_batch_records"]:  # each refusal had its warning line; the count
            log.info(
                "%s: %d batch(es) or answer row(s) of %s refused (not this folder's): their requests asked again",
                setup.model_id,
                summary["refused_batch_records"],
                setup.out_dir,
            )
        tolerance = cfg.run.fail_on_error
        share = errored / tally.total if tally.total else 0.0
        if errored and (tolerance is True or (not isinstance(tolerance, bool) and share > tolerance)):
            raise ItemsFailed(
                f"{errored} of {tally.total} items of {setup.model_id} errored ({tally.errors} session "
                f"error(s), {tally.check_errors} check error(s) in this run); rerun or retry the flow "
                f"run to redo only those (see {setup.out_dir / cfg.run.save_file})"
            )
        return summary

    def _stage_chains(self, recording: RunRecording) -> dict[str, int]:
        """This flow run's stage chains, recorded and left out (:meth:`RunRecording.finish`), also
        written to the model folder's ``stage_chains.json`` for ``ape record``."""
        setup = self.setup
        flow_run_id = recording.flow_run_id
        chains = recording.finish()
        if flow_run_id is not None:
            try:
                note_flow_run(
                    setup.out_dir,
                    setup.model_id,
                    flow_run_id,
                    chains.recorded,
                    chains.left_out,
                    keep_earlier=setup.config.run.load_save,
                    superseded=self.superseded,
                )
            except OSError as exc:  # the results are saved; only `ape record` loses its list
                log.warning("%s: could not write stage_chains.json: %s", setup.model_id, exc.strerror or exc)
        if chains.left_out:  # in run.log and the UI; the terminal gets the run's one line, in the report
            command = record_command(setup.config.run.output)
            line = record_line(chains.recorded, len(chains.left_out), [command])
            log.info("%s: %s", setup.model_id, line, extra={CONSOLE_SKIP: True})
        return {"chains_recorded": chains.recorded, "chains_left_out": len(chains.left_out)}

    def _call_hook(self, batch: OutputBatch) -> None:
        hook = self.setup.hook
        assert hook is not None  # called only when the setup has a hook
        try:
            hook(batch)
        except Exception as exc:  # a broken hook must not lose the run
            log.warning("on_batch_saved hook failed for item %s: %s: %s", batch.item_id, type(exc).__name__, exc)


def _run_name() -> str:

    params = flow_run.parameters
    return run_label(params.get("config"), params.get("model_index", 0)) or "evaluate"


@flow(name="evaluate", flow_run_name=_run_name, persist_result=False, validate_parameters=True)
def evaluate(
    config: ConfigParameter, model_index: int = 0, redo_outcomes: list[str] | None = None, preflight: str | None = None
) -> dict[str, Any] | State:
    """Evaluate one configured model (``config.model[model_index]``) over the data.
    ``preflight``: the run token of the benchmark's preflight (:func:`ape.flows.preflight.hand_over`),
    whose setup for this model the flow takes, pointed at the run's folder; without one this
    process knows (a Dask worker, a test, a flow run on its own) it builds its own. ``config``
    may be a reference to a stored config (:mod:`ape.tasks.storage.config_ref`)."""
    config = resolve_config(config)
    if not 0 <= model_index < len(config.model):
        raise ApeError(f"model_index {model_index} out of range (config has {len(config.model)} models)")
    checked = handed(preflight)
    setup = checked.setup(model_index).for_run(config) if checked else make_setup(config, config.model[model_index])
    with run_logs(setup.out_dir), model_heartbeats():
        try:
            return Runner(setup, redo_outcomes).run()
        except (ItemsFailed, SaveFailed) as exc:
            # an expected end, not a crash: a Failed state without a traceback in the log
            log.error("%s", exc, extra={CONSOLE_SKIP: True})  # the CLI prints it once itself
            return Failed(message=str(exc), data=exc)
