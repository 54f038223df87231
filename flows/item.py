"""One item's chain on a solver worker: render -> solve -> adapt -> check -> score, for
every run of the item.

The worker *calls* the stage tasks (it never waits on futures of other pool tasks,
which would starve a bounded pool), so each session is tracked by Prefect as task runs
named after stage and item, and the model-calling stages are cached.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pydantic import BaseModel

from ape.schemas.data import id_field_name, item_id
from ape.schemas.results import CheckResult, CheckStatus, ErrorInfo, Outcome, OutputBatch, SessionResult
from ape.tasks.recording import LEDGER, keep_chain
from ape.tasks.report.health import prompt_hash
from ape.tasks.run_plan import RunPlan
from ape.tasks.solving.choices import choose
from ape.tasks.stage_runs import StageClock, current_flow_run_id, record_stage_runs, start_clock
from ape.tasks.stages import (
    SessionSpec,
    adapt_task,
    cached_variant,
    check_task,
    choices_task,
    mark_adapt,
    render_task,
    score_task,
    session_task,
    solve_task,
    unwrap,
)
from ape.tasks.storage.transcripts import SessionLog

log = logging.getLogger("ape")


def _field_text(item: BaseModel, name: str | None) -> str | None:
    """The item's ``name`` field as text (category, cluster), or None when unset."""
    value = getattr(item, name, None) if name else None
    return None if value is None else str(value)


class ItemProcessor:
    """Runs one item's chain (every run of it) on the calling solver-worker thread."""

    def __init__(self, plan: RunPlan):
        from ape.tasks.checking.check import CheckerCarousel

        self.plan = plan
        cfg = plan.config
        self.granularity = cfg.run.task_granularity
        # the chain as recorded task runs (tasks.stage_runs); stage granularity runs it live
        self.record_stages = self.granularity == "session" and cfg.run.stage_runs
        cache_dir = plan.cache_dir if cfg.run.cache else None
        if cache_dir is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
        self.choices = cfg.choices  # [choices]: log-likelihood scoring (ape.tasks.solving.choices)
        self.session_stage = cached_variant(choices_task if self.choices else session_task, cache_dir)
        self.solve_stage = cached_variant(solve_task, cache_dir)
        self.adapt_stage = cached_variant(adapt_task, cache_dir)
        self.carousel = CheckerCarousel(plan.checker_factory, cfg.run.checker_workers, cfg.checker.timeout_s)
        self.id_name = id_field_name(plan.data_model)

    def _render(self, template: str, item: BaseModel, key: str) -> str:
        from ape.tasks.solving.render import render

        if self.granularity == "stage":
            return render_task(template, item, key)
        return render(template, item)

    def run_session(
        self, item: BaseModel, key: str, run_index: int, refresh: bool = False
    ) -> tuple[SessionResult, list[Any]]:
        from ape.tasks.checking.builtin import score_session
        from ape.tasks.stats.cost import session_cost

        plan = self.plan
        flow_run_id = current_flow_run_id()
        LEDGER.throttle()  # the server keeps up (ape.tasks.recording), or this worker waits
        started = time.perf_counter()
        live = 0  # task runs this session creates (live, and its recorded stages)
        clock = start_clock() if self.record_stages else None
        prompt = self._render(plan.template, item, key)
        system = self._render(plan.system, item, key) if plan.system else None
        if self.granularity == "stage":
            live += 2 if plan.system else 1
        if clock is not None:
            clock.mark("render")
        spec = SessionSpec(
            item_id=key,
            run_index=run_index,
            item=item.model_dump_json(by_alias=True),
            prompt=prompt,
            system=system,
            fingerprint=plan.fingerprint_key,
        )
        if self.granularity == "stage" and self.choices is None:
            solve, adapt = self.solve_stage, self.adapt_stage
            if refresh:
                solve, adapt = solve.with_options(refresh_cache=True), adapt.with_options(refresh_cache=True)
            state, cached = unwrap(solve(spec, return_state=True))
            live += 1
            if hasattr(state, "outcome"):  # the solve stage itself failed with a record
                record = state
            else:
                record, cached2 = unwrap(adapt(spec, state, return_state=True))
                live += 1
                cached = cached and cached2
        else:
            stage = self.session_stage.with_options(refresh_cache=True) if refresh else self.session_stage
            record, cached = unwrap(stage(spec, return_state=True))
            live += 1
            if clock is not None and cached:
                clock.mark("solve", state_name="Cached", message="generation from the run's cache")
                if record.outcome is Outcome.PARSING_FAILED:
                    mark_adapt(clock, record, solve_failed=False)  # still a parse failure
                else:
                    clock.mark("adapt", state_name="Cached")
        if self.choices is not None:  # the answer by the metric, after the cache (no model call)
            record = choose(record, self.choices.metric)
        check = None
        if clock is not None:
            clock.last = time.time()
        if record.outcome is Outcome.SOLVED:
            if self.granularity == "stage":
                check = check_task(self.carousel, item, record.value, key, run_index)
                live += 1
            else:
                check = self.carousel.check(item, record.value)
        # a checker may grade each item with its own metric (task specs do)
        metric = (check.metadata.get("metric") if check is not None else None) or plan.metric
        if self.granularity == "stage":
            score, correct = score_task(record.outcome, check, metric, key, run_index)
            live += 1
        else:
            score, correct = score_session(record.outcome, check, metric)
        if clock is not None:
            _close_chain(clock, record.outcome, check, score)
            if keep_chain(LEDGER.next_session(flow_run_id), clock.marks):
                live += record_stage_runs(flow_run_id, key, run_index, clock.marks)
        LEDGER.add(flow_run_id, live)
        category = _field_text(item, plan.config.data.category_field)
        result = SessionResult(
            item_id=key,
            run_index=run_index,
            model_id=plan.model_id,
            outcome=record.outcome,
            solution=record.solution,
            raw_output=record.raw_output,
            error=record.error,
            check=check,
            metric=metric,
            score=score,
            correct=correct,
            confidence=record.confidence,
            token_nll=record.token_nll,
            token_count=record.token_count,
            input_tokens=record.input_tokens,
            output_tokens=record.output_tokens,
            steps=record.steps,
            latency_s=record.latency_s if not cached else time.perf_counter() - started,
            category=category,
            cached=cached,
            cluster=_field_text(item, plan.config.data.cluster_field),
            cost=session_cost(plan.model_cfg, record.input_tokens, record.output_tokens),
            prompt_hash=prompt_hash(prompt, system),
        )
        return result, record.transcript

    def run_item(
        self, item: BaseModel, refresh: bool = False, session_log: SessionLog | None = None
    ) -> tuple[OutputBatch, list[list[Any]]]:
        """All runs of ``item``. Transcripts go to ``session_log`` as each session closes,
        or are returned (for a Dask worker, whose parent writes them)."""
        key = item_id(item)
        sessions, transcripts = [], []
        for run_index in range(self.plan.config.run.runs_per_data):
            try:
                result, transcript = self.run_session(item, key, run_index, refresh)
            except Exception as exc:  # infrastructure failure outside the solver: keep going
                # one line (the Runner prints it with the other session errors); the
                # traceback goes to the debug log (--debug)
                log.debug("item %s run %d failed", key, run_index, exc_info=True)
                result = SessionResult(
                    item_id=key,
                    run_index=run_index,
                    model_id=self.plan.model_id,
                    outcome=Outcome.ERROR,
                    error=ErrorInfo.from_exception(exc),
                )
                transcript = []
            sessions.append(result)
            if session_log is not None:
                session_log.write(result, transcript)
            else:
                transcripts.append(transcript)
        return OutputBatch(item_id=key, model_id=self.plan.model_id, sessions=sessions), transcripts


def _close_chain(clock: StageClock, outcome: Outcome, check: CheckResult | None, score: float | None) -> None:
    """Mark the check and score stages: a checker that raised is Failed, a wrong answer
    Completed as ``Incorrect`` (a result, not a failure), an unchecked session Skipped."""
    if check is None:
        clock.skipped("check", f"no solution to check ({outcome.value})")
    elif check.status is CheckStatus.ERROR:
        error = check.error
        clock.failed("check", f"check error: {error.line()}" if error else "check error")
    elif check.status is CheckStatus.FAILED:
        reason = check.metadata.get("reason") if isinstance(check.metadata, dict) else None
        clock.mark("check", state_name="Incorrect", message=str(reason) if reason else None)
    else:
        clock.mark("check", state_name="Passed")
    clock.mark("score", message=None if score is None else f"score {score:g}")
