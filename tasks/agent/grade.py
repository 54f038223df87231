"""The ``sandbox_state`` checker: grade the state an agent left, by the item's test command.

``[checker] implementation = "sandbox_state"`` with ``args`` ``test_command`` (one command
for every item) or ``test_command_field`` (the item field holding it), and optionally
``timeout_s``. When the session's tool loop has ended (and before its sandbox is removed),
:func:`grade_state` writes the item's tests afresh into a folder the agent never saw,
bound read-only at ``/tests``, and runs the command in the same working folder under the
same isolation and limits as the agent's commands. The verdict is the command's exit code
as APE reads it outside the sandbox: 0 passes, anything else fails. Nothing of the agent
runs any more at that point (each of its commands took its processes with it), no file
holds the verdict, and the tests are not the copies the agent could have edited, so the
agent cannot write its own grade. What it can still influence is the code the test runs
(the package under test, files in the working folder the test reads): a test command
should judge what that code does, not trust what it says (docs/agents.md).

The grade is made inside the session (while its folder exists) and travels in the
session's record (``SolveRecord.state_check``); the checker stage passes it on. Called
like any checker (an item and a solution, without a session) it has no state to grade and
says so.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ape.schemas.results import CheckResult, CheckStatus, ErrorInfo
from ape.tasks.agent.sandbox import AgentSandbox, SandboxError
from ape.tasks.solving.stops import SessionLimit

NAME = "sandbox_state"


class StateCheckArgs(BaseModel):
    """``[checker.args]`` of ``sandbox_state``."""

    model_config = ConfigDict(extra="forbid")

    test_command: str | None = Field(default=None, description="The bash command that passes with exit code 0.")
    test_command_field: str | None = Field(default=None, description="The item field that holds the test command.")
    timeout_s: float = Field(default=120.0, gt=0, description="Wall-clock limit of the test command.")

    @model_validator(mode="after")
    def _one_command(self) -> StateCheckArgs:
        if (self.test_command is None) == (self.test_command_field is None):
            raise ValueError("give exactly one of test_command and test_command_field")
        return self

    def command_for(self, item: Any) -> str:
        if self.test_command is not None:
            return self.test_command
        assert self.test_command_field is not None
        value = getattr(item, self.test_command_field, None)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"the item's field '{self.test_command_field}' holds no test command")
        return value


class SandboxStateChecker:
    """The checker stage's side of ``sandbox_state``: the grade was made in the session."""

    def __init__(self, **args: Any):
        self.args = StateCheckArgs.model_validate(args)

    def __call__(self, item: Any, solution: Any) -> Any:
        raise RuntimeError(
            "sandbox_state grades the working folder a session leaves, so it runs inside a session "
            "with a [sandbox] section; this call had no session"
        )


def grade_state(sandbox: AgentSandbox, args: StateCheckArgs) -> CheckResult:
    """Run the item's test command on the state the session left; the verdict by exit code."""
    started = time.perf_counter()
    try:
        command = args.command_for(sandbox.item)
        tests = sandbox.fresh_tests()
        result = sandbox.run(["bash", "-c", command], tests=tests, timeout_s=args.timeout_s, counted=False)
    except (SandboxError, SessionLimit):
        raise
    except Exception as exc:
        return CheckResult(
            status=CheckStatus.ERROR, runtime_s=time.perf_counter() - started, error=ErrorInfo.from_exception(exc)
        )
    passed = result.exit_code == 0 and not result.timed_out
    return CheckResult(
        status=CheckStatus.PASSED if passed else CheckStatus.FAILED,
        score=1.0 if passed else 0.0,
        runtime_s=time.perf_counter() - started,
        metadata={
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "killed": result.killed,
            "stdout": result.stdout[-2000:],
            "stderr": result.stderr[-2000:],
        },
    )
