"""The stages of one session's chain, called through one object chosen once per run.

render -> solve -> adapt -> check -> score is the same chain at both ``[run]
task_granularity`` settings; only how each stage is called differs:

- ``"session"`` (the default, :class:`InlineStages`): every stage is a plain call, and
  solve -> adapt is cached through Prefect's result store and recorded afterwards as the
  session's task run (``session[q007]#2``, :class:`RecordedAnswer`): one event to the
  server instead of the task engine's three and its client cost, so the model loop runs
  at the model's pace; the stages' task runs are recorded after the fact too
  (:mod:`ape.tasks.recording.stage_runs`);
- ``"stage"`` (:class:`TaskStages`): every stage is a live task run (render, solve, adapt,
  check, score; a second render with a system prompt).

A ``[choices]`` run answers with one ``choices`` session (every choice's log-likelihood;
a live task run at stage granularity) and then picks the answer by the metric, after the
cache, so a changed metric needs no model call.

Each stage is told through one context manager of the session's recorder
(``with current_recorder().stage("check") as end:``, :mod:`ape.tasks.session.recorder`), which
marks its start, end and state from the result it sets or the exception it raises and
counts the live task runs it created; the chain keeps no books of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from ape.schemas.results import CheckResult, Outcome
from ape.schemas.transcript import SolveRecord
from ape.tasks.checking.builtin import score_session
from ape.tasks.session.cache import SessionCache
from ape.tasks.session.recorder import current_recorder
from ape.tasks.session.stages import (
    SessionFailed,
    SessionSpec,
    adapt_task,
    cached_variant,
    check_task,
    choices_task,
    render_task,
    score_task,
    session_task,
    solve_task,
    unwrap,
)
from ape.tasks.solving.choices import choose
from ape.tasks.solving.render import render

if TYPE_CHECKING:
    from ape.schemas.choices import ChoicesConfig
    from ape.schemas.config import ApeConfig
    from ape.tasks.checking.check import CheckerCarousel

# solve -> adapt of one session: (its record, whether it came from the cache)
Answer = Callable[[SessionSpec, bool], tuple[SolveRecord, bool]]


class Stages(Protocol):
    """The phases of one session's chain; solve and adapt are one call, since at the
    default granularity they are one task run."""

    @property
    def session_cache(self) -> SessionCache | None:
        """The session cache read and written without a task engine (None: none, or the
        task engine's own at stage granularity)."""
        ...

    def render(self, item: BaseModel, key: str) -> tuple[str, str | None]:
        """The prompt and the system prompt (None without one)."""
        ...

    def solve_adapt(self, spec: SessionSpec, refresh: bool) -> tuple[SolveRecord, bool]:
        """The session's record, and whether it came from the cache (``refresh``: ignore it)."""
        ...

    def check(self, item: BaseModel, record: SolveRecord, key: str, run_index: int) -> CheckResult | None:
        """The checker's grade on a solved session; None for any other outcome."""
        ...

    def score(
        self, outcome: Outcome, check: CheckResult | None, metric: str | None, key: str, run_index: int
    ) -> tuple[float, bool]:
        """(score, correct) of the session."""
        ...


class OneTaskAnswer:
    """solve -> adapt as one cached task run: the ``session`` stage, or the ``choices`` stage
    followed by the choice its metric picks."""

    def __init__(self, stage: Any, choices: ChoicesConfig | None) -> None:
        self.stage = stage
        self.choices = choices

    def __call__(self, spec: SessionSpec, refresh: bool) -> tuple[SolveRecord, bool]:

        stage = self.stage.with_options(refresh_cache=True) if refresh else self.stage
        # a cached task ran none of its stages: they are marked as the cache's
        with current_recorder().stage("session", task_runs=1, live=True) as end:
            record, cached = end.result, end.cached = unwrap(stage(spec, return_state=True))
        if self.choices is not None:  # the answer by the metric, after the cache (no model call)
            record = choose(record, self.choices.metric)
        return record, cached


class RecordedAnswer:
    """solve -> adapt as a plain call on the worker, cached through Prefect's result store
    directly (:class:`~ape.tasks.session.cache.SessionCache`) and recorded afterwards as
    the session's task run (one event; :meth:`StageRecorder.session`): what the
    ``session`` (or ``choices``) task run did, without the task engine's cost per session.
    A slow session shows as Running meanwhile (the recorder's ``session`` stage).
    """

    def __init__(self, stage: Any, choices: ChoicesConfig | None, cache: SessionCache | None) -> None:
        self.run = stage.fn  # the stage's plain function: the same code as its task run
        self.choices = choices
        self.cache = cache

    def __call__(self, spec: SessionSpec, refresh: bool) -> tuple[SolveRecord, bool]:
        key = self.cache.key(spec) if self.cache is not None else None
        with current_recorder().stage("session") as end:  # a crash is recorded Failed and raised
            record = self.cache.read(key) if key is not None and not refresh and self.cache is not None else None
            cached = end.cached = record is not None  # the task ran none of its stages: the cache's
            if record is None:
                try:
                    record = self.run(spec)
                except SessionFailed as exc:  # ended ERROR: not cached, so a retry asks the model again
                    record, end.result = exc.record, exc
                else:
                    if key is not None and self.cache is not None:
                        self.cache.write(key, record)
            if end.result is None:
                end.result = record
        if self.choices is not None:  # the answer by the metric, after the cache (no model call)
            record = choose(record, self.choices.metric)
        return record, cached


class TwoTaskAnswer:
    """solve, then adapt, as two cached task runs (stage granularity)."""

    def __init__(self, solve: Any, adapt: Any) -> None:
        self.solve = solve
        self.adapt = adapt

    def __call__(self, spec: SessionSpec, refresh: bool) -> tuple[SolveRecord, bool]:
        solve, adapt = self.solve, self.adapt
        if refresh:
            solve, adapt = solve.with_options(refresh_cache=True), adapt.with_options(refresh_cache=True)
        recorder = current_recorder()
        with recorder.stage("solve", task_runs=1, live=True):
            state, cached = unwrap(solve(spec, return_state=True))
        if isinstance(state, SolveRecord):  # the solve stage itself failed with a record
            return state, cached
        with recorder.stage("adapt", task_runs=1, live=True):
            record, adapt_cached = unwrap(adapt(spec, state, return_state=True))
        return record, cached and adapt_cached


class _Stages:
    """What both granularities hold: the templates, the answer step and the checkers."""

    def __init__(self, template: str, system: str | None, answer: Answer, carousel: CheckerCarousel) -> None:
        self.template = template
        self.system = system
        self.answer = answer
        self.carousel = carousel

    @property
    def session_cache(self) -> SessionCache | None:
        return self.answer.cache if isinstance(self.answer, RecordedAnswer) else None


class InlineStages(_Stages):
    """Granularity ``"session"``: the answer is a task run, the cheap stages plain calls."""

    def render(self, item: BaseModel, key: str) -> tuple[str, str | None]:
        with current_recorder().stage("render"):
            prompt = render(self.template, item)
            system = render(self.system, item) if self.system else None
        return prompt, system

    def solve_adapt(self, spec: SessionSpec, refresh: bool) -> tuple[SolveRecord, bool]:
        return self.answer(spec, refresh)

    def check(self, item: BaseModel, record: SolveRecord, key: str, run_index: int) -> CheckResult | None:
        with current_recorder().stage("check") as end:
            if record.outcome is not Outcome.SOLVED:
                end.result = None
            elif record.state_check is not None:  # graded in the session, on the state it left
                end.result = record.state_check
            else:
                end.result = self.carousel.check(item, record.value)
        return end.result

    def score(
        self, outcome: Outcome, check: CheckResult | None, metric: str | None, key: str, run_index: int
    ) -> tuple[float, bool]:
        with current_recorder().stage("score", outcome=outcome) as end:
            score, correct = score_session(outcome, check, metric)
            end.result = score
        return score, correct


class TaskStages(_Stages):
    """Granularity ``"stage"``: every stage is a live task run, named after stage and item."""

    def render(self, item: BaseModel, key: str) -> tuple[str, str | None]:
        with current_recorder().stage("render", task_runs=2 if self.system else 1):
            prompt = render_task(self.template, item, key)
            system = render_task(self.system, item, key) if self.system else None
        return prompt, system

    def solve_adapt(self, spec: SessionSpec, refresh: bool) -> tuple[SolveRecord, bool]:
        return self.answer(spec, refresh)

    def check(self, item: BaseModel, record: SolveRecord, key: str, run_index: int) -> CheckResult | None:
        solved = record.outcome is Outcome.SOLVED
        live = solved and record.state_check is None
        with current_recorder().stage("check", task_runs=1 if live else 0) as end:
            if solved and record.state_check is not None:  # graded in the session, on the state it left
                end.result = record.state_check
            elif solved:
                end.result = check_task(self.carousel, item, record.value, key, run_index)
        check: CheckResult | None = end.result
        return check

    def score(
        self, outcome: Outcome, check: CheckResult | None, metric: str | None, key: str, run_index: int
    ) -> tuple[float, bool]:
        with current_recorder().stage("score", task_runs=1, outcome=outcome) as end:
            score, correct = score_task(outcome, check, metric, key, run_index)
            end.result = score
        return score, correct


def stages_for(
    config: ApeConfig, template: str, system: str | None, carousel: CheckerCarousel, cache_dir: Path | None
) -> Stages:
    """The stages of a run: by its task granularity, with the model stages bound to its
    cache folder (None: no cache)."""
    answer: Answer
    if config.run.task_granularity == "stage" and config.choices is None:
        answer = TwoTaskAnswer(cached_variant(solve_task, cache_dir), cached_variant(adapt_task, cache_dir))
    else:
        stage = choices_task if config.choices is not None else session_task
        if config.run.task_granularity == "stage":  # every stage a live task run
            answer = OneTaskAnswer(cached_variant(stage, cache_dir), config.choices)
        else:
            bound = cached_variant(stage, cache_dir)
            cache = SessionCache(bound) if cache_dir is not None else None
            answer = RecordedAnswer(bound, config.choices, cache)
    if config.run.task_granularity == "stage":
        return TaskStages(template, system, answer, carousel)
    return InlineStages(template, system, answer, carousel)
