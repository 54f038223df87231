"""One item's chain on a solver worker: render -> solve -> adapt -> check -> score, for
every run of the item.

The worker *calls* the stage tasks (it never waits on futures of other pool tasks,
which would starve a bounded pool), so each session is tracked by Prefect as task runs
named after stage and item, and the model-calling stages are cached. How each stage is
called (a live task run or a plain call, by ``[run] task_granularity``) is decided once
per run (:func:`ape.tasks.session.chain.stages_for`); what the Prefect server should record
sits around the chain, in the flow run's recording it is handed
(:meth:`ape.tasks.recording.RunRecording.session`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ape.schemas.data import id_field_name, item_id
from ape.schemas.results import CheckResult, ErrorInfo, Outcome, OutputBatch, SessionResult
from ape.schemas.transcript import RESULT_FROM_RECORD, SolveRecord
from ape.tasks.checking.check import CheckerCarousel
from ape.tasks.common.prompt_hash import prompt_hash
from ape.tasks.session.chain import stages_for
from ape.tasks.session.recorder import recording_to
from ape.tasks.session.stages import SessionSpec
from ape.tasks.setup.model import ModelSetup
from ape.tasks.solving.solve import revalued
from ape.tasks.stats.cost import session_cost
from ape.tasks.storage.transcripts import SessionLog

if TYPE_CHECKING:
    from ape.tasks.recording import RunRecording

log = logging.getLogger("ape")


def _field_text(item: BaseModel, name: str | None) -> str | None:
    """The item's ``name`` field as text (category, cluster), or None when unset."""
    value = getattr(item, name, None) if name else None
    return None if value is None else str(value)


class ItemProcessor:
    """Runs one item's chain (every run of it) on the calling solver-worker thread."""

    def __init__(self, setup: ModelSetup):

        self.setup = setup
        cfg = setup.config
        cache_dir = setup.cache_dir if cfg.run.cache else None
        if cache_dir is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
        self.carousel = CheckerCarousel(setup.checker_factory, cfg.run.checker_workers, cfg.checker.timeout_s)
        self.stages = stages_for(cfg, setup.template, setup.system, self.carousel, cache_dir)
        self.id_name = id_field_name(setup.data_model)

    def run_session(
        self, item: BaseModel, key: str, run_index: int, recording: RunRecording, refresh: bool = False
    ) -> tuple[SessionResult, list[Any]]:
        with recording.session(key, run_index) as recorder, recording_to(recorder):
            started = time.perf_counter()
            prompt, system = self.stages.render(item, key)
            spec = SessionSpec(
                item_id=key,
                run_index=run_index,
                item=item.model_dump_json(by_alias=True),
                prompt=prompt,
                system=system,
                fingerprint=self.setup.fingerprint_key,
            )
            record, cached = self.stages.solve_adapt(spec, refresh)
            if cached:  # read back as JSON: the adapter's own object again, for the checker
                record = revalued(record, self.setup.adapter)
            check = self.stages.check(item, record, key, run_index)
            # a checker may grade each item with its own metric (task specs do)
            metric = (check.metadata.get("metric") if check is not None else None) or self.setup.metric
            score, correct = self.stages.score(record.outcome, check, metric, key, run_index)
        latency_s = record.latency_s if not cached else time.perf_counter() - started
        result = self._result(item, spec, record, cached, check, metric, (score, correct), latency_s)
        return result, record.transcript

    def _result(
        self,
        item: BaseModel,
        spec: SessionSpec,
        record: SolveRecord,
        cached: bool,
        check: CheckResult | None,
        metric: str | None,
        scored: tuple[float, bool],
        latency_s: float,
    ) -> SessionResult:
        """The session's row: the record, its grade and score, cost and provenance."""

        setup = self.setup
        data = setup.config.data
        price = session_cost(setup.model_cfg, record.input_tokens, record.output_tokens)
        return SessionResult(
            **{name: getattr(record, name) for name in RESULT_FROM_RECORD},  # outcome, solution, tokens...
            item_id=spec.item_id,
            run_index=spec.run_index,
            model_id=setup.model_id,
            check=check,
            metric=metric,
            score=scored[0],
            correct=scored[1],
            latency_s=latency_s,
            category=_field_text(item, data.category_field),
            cached=cached,
            cluster=_field_text(item, data.cluster_field),
            # an answer from the cache cost nothing this run; its price is what the cache saved
            cost=0.0 if cached and price is not None else price,
            cached_cost=price if cached else None,
            prompt_hash=prompt_hash(spec.prompt, spec.system),
            batch=setup.model_cfg.batch and not cached,
        )

    def run_item(
        self, item: BaseModel, recording: RunRecording, refresh: bool = False, session_log: SessionLog | None = None
    ) -> tuple[OutputBatch, list[list[Any]]]:
        """All runs of ``item``, mirrored by the flow run's ``recording``. Transcripts go to
        ``session_log`` as each session closes, or are returned (for a Dask worker, whose
        parent writes them)."""
        key = item_id(item)
        sessions, transcripts = [], []
        for run_index in range(self.setup.config.run.runs_per_data):
            try:
                result, transcript = self.run_session(item, key, run_index, recording, refresh)
            except Exception as exc:  # infrastructure failure outside the solver: keep going
                # one line (the Runner prints it with the other session errors); the
                # traceback goes to the debug log (--debug)
                log.debug("item %s run %d failed", key, run_index, exc_info=True)
                result = SessionResult(
                    item_id=key,
                    run_index=run_index,
                    model_id=self.setup.model_id,
                    outcome=Outcome.ERROR,
                    error=ErrorInfo.from_exception(exc),
                )
                transcript = []
            sessions.append(result)
            if session_log is not None:
                session_log.write(result, transcript)
            else:
                transcripts.append(transcript)
        return OutputBatch(item_id=key, model_id=self.setup.model_id, sessions=sessions), transcripts
