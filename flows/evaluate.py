"""The evaluate flow: one model over the data, item by item, resumable.

Shape of a run (seed 001's runner on Prefect):

    DataProvider --(bounded window)--> solver workers --> checker carousel
                                             |
                         OutputBatch per item v
                                        SaveHandler (this thread) -> results.jsonl / metadata.json

Each solver worker is a thread that owns its model client and tools and runs
an item's whole chain (render -> solve -> adapt -> check -> score, for every
run of the item) by *calling* the stage tasks, never by waiting on futures of
other pool tasks (which deadlocks a bounded pool into serial speed). Items are
submitted in a bounded window, so memory stays flat however long the data
file is, and finished batches are saved by the flow's own thread, in groups,
with one fsync per group.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.states import Failed
from pydantic import BaseModel

from flows.plan import Plan, fingerprint_hash, make_plan, run_label
from flows.progress import ProgressView, Tally
from schemas.config import ApeConfig
from schemas.data import id_field_name
from schemas.errors import ApeError
from schemas.plugins import load_object
from schemas.results import ErrorInfo, Outcome, OutputBatch, SessionResult
from tasks.save import SaveHandler
from tasks.stages import (
    SessionSpec,
    Worker,
    adapt_task,
    bind_worker,
    cached_variant,
    check_task,
    render_task,
    score_task,
    session_task,
    solve_task,
    unwrap,
)

log = logging.getLogger("ape")


class ItemsFailed(Exception):
    """The run finished, but more items errored than ``fail_on_error`` tolerates."""


class ItemProcessor:
    """Runs one item's chain (every run of it) on the calling solver-worker thread."""

    def __init__(self, plan: Plan):
        from tasks.check import CheckerCarousel

        self.plan = plan
        cfg = plan.config
        self.granularity = cfg.run.task_granularity
        cache_dir = plan.cache_dir if cfg.run.cache else None
        if cache_dir is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
        self.session_stage = cached_variant(session_task, cache_dir)
        self.solve_stage = cached_variant(solve_task, cache_dir)
        self.adapt_stage = cached_variant(adapt_task, cache_dir)
        self.carousel = CheckerCarousel(plan.checker_factory, cfg.run.checker_workers)
        self.id_name = id_field_name(plan.data_model)

    def _render(self, template: str, item: BaseModel, key: str) -> str:
        from tasks.render import render

        if self.granularity == "stage":
            return render_task(template, item, key)
        return render(template, item)

    def run_session(self, item: BaseModel, key: str, run_index: int,
                    refresh: bool = False) -> tuple[SessionResult, list[Any]]:
        from tasks.check import run_check
        from tasks.score import score_session

        plan = self.plan
        started = time.perf_counter()
        prompt = self._render(plan.template, item, key)
        system = self._render(plan.system, item, key) if plan.system else None
        spec = SessionSpec(item_id=key, run_index=run_index, item=item.model_dump_json(by_alias=True),
                           prompt=prompt, system=system, fingerprint=plan.fingerprint_key)
        if self.granularity == "stage":
            solve, adapt = self.solve_stage, self.adapt_stage
            if refresh:
                solve, adapt = solve.with_options(refresh_cache=True), adapt.with_options(refresh_cache=True)
            state, cached = unwrap(solve(spec, return_state=True))
            if hasattr(state, "outcome"):  # the solve stage itself failed with a record
                record = state
            else:
                record, cached2 = unwrap(adapt(spec, state, return_state=True))
                cached = cached and cached2
        else:
            stage = self.session_stage.with_options(refresh_cache=True) if refresh else self.session_stage
            record, cached = unwrap(stage(spec, return_state=True))
        check = None
        if record.outcome is Outcome.SOLVED:
            with self.carousel.borrow() as checker:
                if self.granularity == "stage":
                    check = check_task(checker, item, record.value, key, run_index)
                else:
                    check = run_check(checker, item, record.value)
        # a checker may grade each item with its own metric (the seed-3 task specs do)
        metric = (check.metadata.get("metric") if check is not None else None) or plan.metric
        if self.granularity == "stage":
            score, correct = score_task(record.outcome, check, metric, key, run_index)
        else:
            score, correct = score_session(record.outcome, check, metric)
        category = None
        if plan.config.data.category_field:
            value = getattr(item, plan.config.data.category_field, None)
            category = None if value is None else str(value)
        result = SessionResult(
            item_id=key, run_index=run_index, model_id=plan.model_id, outcome=record.outcome,
            solution=record.solution, raw_output=record.raw_output, error=record.error, check=check,
            metric=metric, score=score, correct=correct, confidence=record.confidence,
            token_nll=record.token_nll, token_count=record.token_count,
            input_tokens=record.input_tokens, output_tokens=record.output_tokens, steps=record.steps,
            latency_s=record.latency_s if not cached else time.perf_counter() - started,
            category=category, cached=cached,
        )
        return result, record.transcript

    def run_item(self, item: BaseModel, refresh: bool = False,
                 session_log: Any | None = None) -> tuple[OutputBatch, list[list[Any]]]:
        """All runs of ``item``. Transcripts go to ``session_log`` as each session closes,
        or are returned (for a Dask worker, whose parent writes them)."""
        key = str(getattr(item, self.id_name))
        sessions, transcripts = [], []
        for run_index in range(self.plan.config.run.runs_per_data):
            try:
                result, transcript = self.run_session(item, key, run_index, refresh)
            except Exception as exc:  # infrastructure failure outside the solver: keep going
                log.exception("item %s run %d failed", key, run_index)
                result = SessionResult(item_id=key, run_index=run_index, model_id=self.plan.model_id,
                                       outcome=Outcome.ERROR, error=ErrorInfo.from_exception(exc))
                transcript = []
            sessions.append(result)
            if session_log is not None:
                session_log.write(result, transcript)
            else:
                transcripts.append(transcript)
        return OutputBatch(item_id=key, model_id=self.plan.model_id, sessions=sessions), transcripts


class Runner:
    """Runs one Plan: feeds items to the solver workers and saves what they finish."""

    def __init__(self, plan: Plan, redo_outcomes: list[str] | None = None):
        from tasks.transcripts import SessionLog

        self.plan = plan
        cfg = plan.config
        self.processor = ItemProcessor(plan)
        self.id_name = self.processor.id_name
        plan.out_dir.mkdir(parents=True, exist_ok=True)
        self.session_log = SessionLog(plan.out_dir)
        self.redo_outcomes = {Outcome(o) for o in (redo_outcomes or [])}
        self.refresh: set[str] = set()  # items whose cached generations must be regenerated
        self.hook = None
        if cfg.hooks.on_batch_saved:
            self.hook = load_object(cfg.hooks.on_batch_saved, where="[hooks] on_batch_saved",
                                    base_dir=cfg.base_dir)

    def run_item(self, item: BaseModel) -> OutputBatch:
        """Thread mode: runs on a solver-worker thread and writes transcripts there."""
        key = str(getattr(item, self.id_name))
        return self.processor.run_item(item, key in self.refresh, self.session_log)[0]

    # -- the loop (flow thread) ----------------------------------------------------------
    def run(self) -> dict[str, Any]:
        plan, cfg = self.plan, self.plan.config
        started = time.perf_counter()
        saver = SaveHandler(plan.out_dir, save_file=cfg.run.save_file, metadata_file=cfg.run.metadata_file,
                            run_info={"benchmark": cfg.name, "model": plan.model_id,
                                      "model_config": plan.fingerprint["model"],
                                      "solver_config": cfg.solver.model_dump(mode="json"),
                                      "runs_per_data": cfg.run.runs_per_data,
                                      "config_file": str(cfg.config_file) if cfg.config_file else None})
        if cfg.run.load_save:
            saver.load()
            redo = saver.discard(saver.errored_ids())
            if redo:
                log.info("%s: redoing %d item(s) that errored last time", plan.model_id, redo)
            others = self.redo_outcomes - {Outcome.ERROR}
            if others:
                self.refresh = set(saver.ids_with_outcomes(others))
                saver.discard(self.refresh)
                log.info("%s: redoing %d item(s) with outcome %s", plan.model_id, len(self.refresh),
                         "/".join(sorted(o.value for o in others)))
        else:
            saver.reset()
        provider = plan.provider()
        ids = provider.scan()
        skip = set(saver.completed)
        tally = Tally(total=len(ids), done=sum(1 for i in ids if i in skip))
        if tally.done:
            log.info("%s: resuming, %d of %d items already saved", plan.model_id, tally.done, tally.total)
        window = cfg.run.window or 4 * cfg.run.solver_workers
        log.info("%s: %d items, %d to run, %d session(s) each, %d solver worker(s), output %s",
                 plan.model_id, tally.total, tally.total - tally.done, cfg.run.runs_per_data,
                 cfg.run.solver_workers, plan.out_dir)
        label = f"{cfg.name} · {plan.model_id}"
        feeder = DaskFeeder(self) if cfg.run.task_runner == "dask" else ThreadFeeder(self)
        items = (item for item in provider if str(getattr(item, self.id_name)) not in skip)
        try:
            with saver, self.session_log, ProgressView(label, tally, enabled=cfg.cli.progress) as view:
                exhausted = False
                while feeder.pending or not exhausted:
                    while not exhausted and len(feeder.pending) < window:
                        item = next(items, None)
                        if item is None:
                            exhausted = True
                            break
                        feeder.submit(item)
                    if not feeder.pending:
                        break
                    batches = feeder.next_done()
                    saver.save(batches)
                    for batch in batches:
                        tally.done += 1
                        tally.sessions += len(batch.sessions)
                        tally.passed += sum(s.correct for s in batch.sessions)
                        tally.errors += sum(s.outcome is Outcome.ERROR for s in batch.sessions)
                        if self.hook is not None:
                            self._call_hook(batch)
                    view.update()
        finally:
            feeder.close()
        errored = len(saver.errored_ids())
        summary = {"model": plan.model_id, "output": str(plan.out_dir), "items": tally.total,
                   "done": tally.done, "errored_items": errored, "sessions": tally.sessions,
                   "passed": tally.passed, "wall_seconds": round(time.perf_counter() - started, 3)}
        log.info("%s: %s", plan.model_id, tally.line())
        tolerance = cfg.run.fail_on_error
        share = errored / tally.total if tally.total else 0.0
        if errored and (tolerance is True or (not isinstance(tolerance, bool) and share > tolerance)):
            raise ItemsFailed(
                f"{errored} of {tally.total} items of {plan.model_id} errored; rerun or retry the flow "
                f"run to redo only those (see {plan.out_dir / cfg.run.save_file})")
        return summary

    def _call_hook(self, batch: OutputBatch) -> None:
        try:
            self.hook(batch)
        except Exception as exc:  # a broken hook must not lose the run
            log.warning("on_batch_saved hook failed for item %s: %s: %s", batch.item_id,
                        type(exc).__name__, exc)


class ThreadFeeder:
    """Solver workers as threads of this process, each with its own model and tools."""

    def __init__(self, runner: Runner):
        plan = runner.plan

        def start_worker() -> None:
            bind_worker(Worker(plan))

        self.runner = runner
        self.pool = ThreadPoolExecutor(max_workers=plan.config.run.solver_workers,
                                       initializer=start_worker, thread_name_prefix="solver")
        self.pending: set[Future] = set()

    def submit(self, item: BaseModel) -> None:
        # the copied context carries the flow run, so the stage tasks are tracked in it
        ctx = contextvars.copy_context()
        self.pending.add(self.pool.submit(ctx.run, self.runner.run_item, item))

    def next_done(self) -> list[OutputBatch]:
        done, self.pending = wait(self.pending, return_when=FIRST_COMPLETED)
        if self.pending:
            # items of one wave finish together: gather the wave and commit it with one fsync
            more, self.pending = wait(self.pending, timeout=0.005)
            done |= more
        return [f.result() for f in done]

    def close(self) -> None:
        for future in self.pending:
            future.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)


class DaskFeeder:
    """Items as Prefect tasks on the flow's DaskTaskRunner; transcripts are written here."""

    def __init__(self, runner: Runner):
        self.runner = runner
        cfg = runner.plan.config
        self.config = cfg
        self.model_index = cfg.model.index(runner.plan.model_cfg)
        self.pending: set[Any] = set()

    def submit(self, item: BaseModel) -> None:
        key = str(getattr(item, self.runner.id_name))
        payload = item.model_dump(mode="json", by_alias=True)
        future = dask_item_task.with_options(task_run_name=f"item[{key}]").submit(
            self.config, self.model_index, payload, key in self.runner.refresh)
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
            batch, transcripts = future.result()
            for session, transcript in zip(batch.sessions, transcripts):
                self.runner.session_log.write(session, transcript)
            batches.append(batch)
        return batches

    def close(self) -> None:
        for future in self.pending:
            try:
                future.wrapped_future.cancel()
            except Exception:
                pass


_processors: dict[str, ItemProcessor] = {}
_processors_lock = threading.Lock()
_thread_workers = threading.local()


def run_item_on_worker(config: ApeConfig, model_index: int, item: dict[str, Any],
                       refresh: bool) -> tuple[OutputBatch, list[list[Any]]]:
    """One item on a Dask worker: the plan is built once per worker process, the solver
    worker (model client, tools) once per worker thread."""
    key = fingerprint_hash(config.model_dump(mode="json")) + f"#{model_index}"
    with _processors_lock:
        processor = _processors.get(key)
        if processor is None:
            processor = _processors[key] = ItemProcessor(make_plan(config, config.model[model_index]))
    workers = getattr(_thread_workers, "by_plan", None)
    if workers is None:
        workers = _thread_workers.by_plan = {}
    if key not in workers:
        workers[key] = Worker(processor.plan)
    bind_worker(workers[key])
    return processor.run_item(processor.plan.data_model.model_validate(item), refresh)


# Wrapped without the decorator so the plain function keeps its own importable name:
# Dask pickles it by reference, not by value.
dask_item_task = task(name="item", cache_policy=NO_CACHE, persist_result=False)(run_item_on_worker)


def dask_task_runner(config: ApeConfig) -> Any:
    """A DaskTaskRunner for ``[run] task_runner = "dask"``: the given scheduler, or a local
    cluster of worker processes sharing ``solver_workers`` threads."""
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise ApeError("task_runner = 'dask' needs prefect-dask", where="[run] task_runner",
                       hint="pip install 'ape-bench[dask]'") from None
    run = config.run
    if run.dask_address:
        return DaskTaskRunner(address=run.dask_address)
    threads = max(1, -(-run.solver_workers // run.dask_workers))
    return DaskTaskRunner(cluster_kwargs={"n_workers": run.dask_workers, "processes": True,
                                          "threads_per_worker": threads, "dashboard_address": None})


def _run_name() -> str:
    from prefect.runtime import flow_run

    params = flow_run.parameters
    return run_label(params.get("config"), params.get("model_index", 0)) or "evaluate"


def attach_run_log(folder: Path) -> logging.Handler:
    """Send the 'ape' logger to folder/run.log for the duration of a run."""
    folder.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(folder / "run.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger("ape")
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler


@flow(name="evaluate", flow_run_name=_run_name, persist_result=False, validate_parameters=True)
def evaluate(config: ApeConfig, model_index: int = 0,
             redo_outcomes: list[str] | None = None) -> dict[str, Any]:
    """Evaluate one configured model (``config.model[model_index]``) over the data."""
    if not 0 <= model_index < len(config.model):
        raise ApeError(f"model_index {model_index} out of range (config has {len(config.model)} models)")
    plan = make_plan(config, config.model[model_index])
    handler = attach_run_log(plan.out_dir)
    try:
        summary = Runner(plan, redo_outcomes).run()
        get_run_logger().info("finished: %s", summary)
        return summary
    except ItemsFailed as exc:
        # an expected end, not a crash: a Failed state without a traceback in the log
        return Failed(message=str(exc), data=exc)
    finally:
        logging.getLogger("ape").removeHandler(handler)
        handler.close()
