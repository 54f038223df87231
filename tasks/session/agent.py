"""The solve stage of an agent session: the tool loop inside the session's own sandbox.

With a ``[sandbox]`` section every session gets an :class:`AgentSandbox` (a working folder
seeded from its item); the tools whose factory takes a ``sandbox`` are bound to it; the
tool loop runs (:func:`ape.tasks.solving.solve.run_solver`); then, with ``[checker]
implementation = "sandbox_state"``, the folder it left is graded
(:func:`ape.tasks.agent.grade.grade_state`) and the grade goes into the session's state,
before the folder is removed. The sandbox lives only in the solve stage: the adapt stage
declines every tool call, and the grade is made before it, so a cached session keeps its
grade and a resumed run never needs a folder that is gone.

A sandbox that cannot be made, or fails to start a command, ends the session ERROR with
error type ``SandboxError``: an infrastructure error, counted apart from the model's
answers, not cached, and redone by ``ape retry``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ape.schemas.results import ErrorInfo
from ape.schemas.transcript import EntryKind, SolverState, TranscriptEntry
from ape.tasks.agent.grade import NAME as STATE_CHECKER
from ape.tasks.agent.grade import StateCheckArgs, grade_state, load_check_function
from ape.tasks.agent.sandbox import AgentSandbox, SandboxError
from ape.tasks.solving.solve import run_solver

if TYPE_CHECKING:
    from ape.schemas.config import ApeConfig, SandboxConfig


@dataclass(frozen=True)
class AgentSetup:
    """A run's sandbox settings and, with the ``sandbox_state`` checker, its grading args."""

    sandbox: SandboxConfig
    grade: StateCheckArgs | None
    check_function: Callable[..., Any] | None = None  # [checker] args.check_function, loaded

    @classmethod
    def of(cls, config: ApeConfig) -> AgentSetup:
        """The agent setup of a run with a ``[sandbox]``; a check function that cannot be loaded is a
        config error (exit 2), raised here, before any model call."""
        assert config.sandbox is not None
        checker = config.checker
        grade = StateCheckArgs.model_validate(checker.args) if checker.implementation == STATE_CHECKER else None
        function = load_check_function(grade, config.base_dir) if grade is not None else None
        return cls(config.sandbox, grade, function)


def _failed(spec: Any, exc: BaseException, started: float) -> SolverState:
    error = ErrorInfo.from_exception(exc)
    entry = TranscriptEntry(kind=EntryKind.SESSION_END, t=time.perf_counter() - started, error=error)
    return SolverState(prompt=spec.prompt, system=spec.system, error=error, transcript=[entry])


def _hit_key(limit: str) -> str:
    return "disk_full" if limit == "disk" else f"killed_{limit}"


def agent_solve(worker: Any, agent: AgentSetup, spec: Any, item: BaseModel) -> SolverState:
    """The solve stage in a sandbox of its own, graded before the sandbox goes (module doc)."""
    started = time.perf_counter()
    try:
        sandbox = AgentSandbox(agent.sandbox, item, spec.item_id, spec.run_index)
    except SandboxError as exc:
        return _failed(spec, exc, started)
    grade_s = 0.0
    try:
        tools = worker.tools_for(item, sandbox)
        state = run_solver(
            worker.model, spec.prompt, spec.system, tools=tools, settings=worker.setup.config.solver, item=item
        )
        if state.error is None and agent.grade is not None:
            graded = time.perf_counter()
            try:
                check = grade_state(sandbox, agent.grade, agent.check_function)
            except SandboxError as exc:
                state.error = ErrorInfo.from_exception(exc)
            else:
                state.state_check = check
                data = {"status": check.status.value, **check.metadata}
                state.transcript.append(
                    TranscriptEntry(kind=EntryKind.STATE_CHECK, t=state.elapsed_s, data=data, error=check.error)
                )
            grade_s = time.perf_counter() - graded
    finally:
        sandbox.close()
    network = sandbox.network()
    if network is not None:  # [sandbox] allow_hosts: every connection the session's commands asked for
        state.transcript.append(TranscriptEntry(kind=EntryKind.NETWORK, t=state.elapsed_s, data=network))
    state.sandbox = {
        "start_s": sandbox.start_s,
        "commands_s": sandbox.used_s,
        "grade_s": grade_s,
        "teardown_s": sandbox.teardown_s,
        # commands a limit killed, by limit (killed_memory, killed_cpu, killed_file_size), and those
        # that left the disk quota full or passed a measured one (disk_full)
        **{_hit_key(limit): float(count) for limit, count in sandbox.limits_hit.items()},
        # connections through the network proxy, allowed and refused, and the bytes they moved
        **(
            {f"net_{key}": float(network[key]) for key in ("allowed", "refused", "bytes")}
            if network is not None
            else {}
        ),
    }
    return state
