"""The Prefect task wrappers of the per-session stages, and the worker they run on.

Logic lives in plain functions (``ape.tasks.solving.render.render``,
``ape.tasks.solving.solve.run_solver`` and ``run_adaption``,
``ape.tasks.solving.choices.score_choices``, the checker carousel of
``ape.tasks.checking.check`` and ``ape.tasks.checking.builtin.score_session``); this
module only gives them names, caching and the per-worker objects they need. How a
session's chain calls them is :mod:`ape.tasks.session.chain`.

The stages that call a model are cached by a key made of everything that shapes the
model's answer (:class:`SessionSpec`): the rendered prompt, the model's identity,
solver/adapter/tool settings and the run index, with the stage's name and the source of
its task (Prefect's ``TASK_SOURCE``). The checker is not in the key (unless the model can
call it as a tool), so a changed checker or metric re-scores cached generations without a
model call. A session that ends ERROR raises inside its task, so Prefect writes no cache
entry and a retry calls the model again.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from prefect import task
from prefect.cache_policies import NO_CACHE, TASK_SOURCE, CacheKeyFnPolicy
from prefect.results import ResultRecord
from prefect.states import State
from pydantic import BaseModel, ConfigDict

from ape.schemas.results import CheckResult, Outcome
from ape.schemas.transcript import SolveRecord, SolverState
from ape.tasks.checking.builtin import score_session
from ape.tasks.checking.check import checker_tool
from ape.tasks.models.build import build_model
from ape.tasks.models.scoring import build_scorer
from ape.tasks.models.session_item import session_item
from ape.tasks.session.agent import AgentSetup, agent_solve
from ape.tasks.session.recorder import current_recorder
from ape.tasks.solving.choices import score_choices
from ape.tasks.solving.render import render
from ape.tasks.solving.solve import run_adaption, run_solver
from ape.tasks.solving.tools import load_tools, session_tools
from ape.tasks.storage.cache_format import RecordSerializer
from ape.tasks.storage.prefect_internals import CacheRecords

if TYPE_CHECKING:
    from ape.schemas.config import ApeConfig, ModelConfig
    from ape.tasks.checking.check import CheckerCarousel


class SessionSpec(BaseModel):
    """Everything that determines one session's generation: the cache key.

    Flat strings on purpose: Prefect walks and hashes a task's parameters on every
    call, and a few short strings cost far less than nested dicts.
    """

    model_config = ConfigDict(extra="forbid")

    item_id: str
    run_index: int
    item: str  # the item as JSON (aliases as keys)
    prompt: str
    system: str | None
    fingerprint: str  # hash of the model, solver, adapter and tool settings (ModelSetup.fingerprint)


class SessionFailed(Exception):
    """Raised by a model stage whose session ended ERROR, carrying its record."""

    def __init__(self, record: SolveRecord):
        self.record = record
        message = record.error.message if record.error else "session failed"
        super().__init__(f"{record.error.type if record.error else 'Error'}: {message}")


class StagePlan(Protocol):
    """What the stages need of a run's resolved setup (``ape.tasks.setup.model.ModelSetup`` provides it),
    so this layer does not import the flows above it."""

    @property
    def config(self) -> ApeConfig: ...
    @property
    def model_cfg(self) -> ModelConfig: ...
    @property
    def data_model(self) -> type[BaseModel]: ...
    @property
    def adapter(self) -> Callable[[str], Any]: ...
    @property
    def out_dir(self) -> Path: ...


class Worker:
    """What one solver worker owns: its model client and its (possibly stateful) tools."""

    def __init__(self, setup: StagePlan, carousel: CheckerCarousel):

        self.setup = setup
        self.carousel = carousel  # the run's shared checkers, also behind the checker tool
        self.scorer: Any = None
        if setup.config.choices is not None:  # log-likelihood scoring: a scorer, no chat model
            self.model: Any = None
            self.scorer = build_scorer(setup.model_cfg, setup.config.base_dir)
            self.tools: list[Any] = []
            return
        # a batch model keeps its batch ledger beside the model's results
        self.model = build_model(setup.model_cfg, setup.config.base_dir, batch_dir=setup.out_dir)
        self.tools = load_tools(setup.config.tools, setup.config.base_dir)
        self.agent = AgentSetup.of(setup.config) if setup.config.sandbox is not None else None

    def item(self, spec: SessionSpec) -> BaseModel:
        return self.setup.data_model.model_validate_json(spec.item)

    def tools_for(self, item: BaseModel, sandbox: Any = None) -> list[Any]:
        """The session's tools: the worker's, those of sandbox factories bound to ``sandbox``."""
        tools = list(self.tools)
        if sandbox is not None:
            config = self.setup.config
            tools = session_tools(config.tools, config.base_dir, tools, sandbox)
        cfg = self.setup.config.checker
        if not cfg.expose_as_tool:
            return tools

        tool = checker_tool(self.carousel, item, self.setup.adapter, cfg.checker_tool)
        return [*tools, tool]


_local = threading.local()


def bind_worker(worker: Worker) -> None:
    """Make ``worker`` the one the stage tasks of this thread run on."""
    _local.worker = worker


def current_worker() -> Worker:
    worker = getattr(_local, "worker", None)
    if worker is None:
        raise RuntimeError("no solver worker bound to this thread")
    return worker


def _checked(record: SolveRecord) -> SolveRecord:
    if record.outcome is Outcome.ERROR:
        raise SessionFailed(record)
    return record


# -- model-calling stages (cached) ----------------------------------------------------------
def _solve(worker: Worker, spec: SessionSpec, item: BaseModel, tools: list[Any]) -> SolverState:
    """The solve stage on ``worker``; its end is told to the session's recorder. With a
    ``[sandbox]`` the stage runs in the session's own sandbox (:func:`agent_solve`)."""

    with current_recorder().stage("solve") as end, session_item(item, spec.item_id, spec.run_index):
        # the item is bound for the mocks that answer from it
        if worker.agent is not None:
            state = end.result = agent_solve(worker, worker.agent, spec, item)
        else:
            state = end.result = run_solver(
                worker.model, spec.prompt, spec.system, tools=tools, settings=worker.setup.config.solver, item=item
            )
    return state


def _adapt(worker: Worker, spec: SessionSpec, state: SolverState, item: BaseModel, tools: list[Any]) -> SolveRecord:
    """The adapt stage on ``worker``; its end is told to the session's recorder."""

    settings = worker.setup.config.solver
    stage = current_recorder().stage("adapt", solve_failed=state.error is not None)
    with stage as end, session_item(item, spec.item_id, spec.run_index):
        record = end.result = run_adaption(
            worker.model, state, adapter=worker.setup.adapter, settings=settings, tools=tools, item=item
        )
    return record


@task(name="session", task_run_name="session[{spec.item_id}]#{spec.run_index}", persist_result=True)
def session_task(spec: SessionSpec) -> SolveRecord:
    """solve -> adapt in one task run (the fast default granularity), with one set of tools."""
    worker = current_worker()
    item = worker.item(spec)
    tools = worker.tools_for(item)
    state = _solve(worker, spec, item, tools)
    return _checked(_adapt(worker, spec, state, item, tools))


@task(name="solve", task_run_name="solve[{spec.item_id}]#{spec.run_index}", persist_result=True)
def solve_task(spec: SessionSpec) -> SolverState:
    worker = current_worker()
    item = worker.item(spec)
    return _solve(worker, spec, item, worker.tools_for(item))


@task(name="adapt", task_run_name="adapt[{spec.item_id}]#{spec.run_index}", persist_result=True)
def adapt_task(spec: SessionSpec, state: SolverState) -> SolveRecord:
    worker = current_worker()
    item = worker.item(spec)
    return _checked(_adapt(worker, spec, state, item, worker.tools_for(item)))


@task(name="choices", task_run_name="choices[{spec.item_id}]#{spec.run_index}", persist_result=True)
def choices_task(spec: SessionSpec) -> SolveRecord:
    """Every choice's log-likelihood ([choices] runs; ape.tasks.solving.choices), in one task run."""

    worker = current_worker()
    choices = worker.setup.config.choices
    assert choices is not None  # only [choices] runs use this stage
    recorder = current_recorder()
    item = worker.item(spec)
    with recorder.stage("solve", message="log-likelihood of every choice") as end:
        with session_item(item, spec.item_id, spec.run_index):
            record = end.result = score_choices(worker.scorer, spec.prompt, item, choices)
    with recorder.stage("adapt", solve_failed=record.error is not None, message="the most likely choice") as end:
        end.result = record
    return _checked(record)


# -- cheap stages (stage granularity only; never cached) ------------------------------------
@task(name="render", task_run_name="render[{item_id}]", cache_policy=NO_CACHE, persist_result=False)
def render_task(template: str, item: BaseModel, item_id: str) -> str:

    return render(template, item)


@task(name="check", task_run_name="check[{item_id}]#{run_index}", cache_policy=NO_CACHE, persist_result=False)
def check_task(carousel: CheckerCarousel, item: BaseModel, solution: Any, item_id: str, run_index: int) -> CheckResult:
    """The carousel lends the run's checker and applies its time limit."""
    return carousel.check(item, solution)


@task(name="score", task_run_name="score[{item_id}]#{run_index}", cache_policy=NO_CACHE, persist_result=False)
def score_task(
    outcome: Outcome, check: CheckResult | None, metric: str | None, item_id: str, run_index: int
) -> tuple[float, bool]:

    return score_session(outcome, check, metric)


def _spec_key(context: Any, parameters: dict[str, Any]) -> str:
    """Cache key of a model stage: the stage and its SessionSpec. Hashing the one flat spec
    is cheaper than Prefect's INPUTS policy walking every parameter, and leaves out the
    adapt stage's conversation state, which the spec already determines."""
    spec: SessionSpec = parameters["spec"]
    return hashlib.sha256(f"{context.task.name}\0{spec.model_dump_json()}".encode()).hexdigest()


def cached_variant(stage: Any, cache_dir: Path | None) -> Any:
    """The stage with its cache policy bound to this run's cache folder (or no cache): the
    key is the stage's SessionSpec (:func:`_spec_key`) and its task's source; its result is
    written as JSON (:class:`~ape.tasks.storage.cache_format.RecordSerializer`), never a pickle."""
    if cache_dir is None:
        return stage.with_options(cache_policy=NO_CACHE, persist_result=False)
    policy = CacheKeyFnPolicy(cache_key_fn=_spec_key) + TASK_SOURCE
    policy = policy.configure(key_storage=CacheRecords(basepath=str(cache_dir)))
    return stage.with_options(cache_policy=policy, result_serializer=RecordSerializer())


def unwrap(state: State) -> tuple[Any, bool]:
    """(value, came_from_cache) of a model stage's final state; SessionFailed -> its record."""
    if state.is_completed():
        data = state.data
        # the value is already in memory: skip State.result()'s hop to Prefect's event loop
        value = data.result if isinstance(data, ResultRecord) else state.result()
        return value, state.name == "Cached"
    exc = state.result(raise_on_failure=False)
    if isinstance(exc, SessionFailed):
        return exc.record, False
    raise exc if isinstance(exc, BaseException) else RuntimeError(str(exc))
