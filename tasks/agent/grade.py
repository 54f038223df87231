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

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.tools import ToolException
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ape.schemas.results import CheckResult, CheckStatus, ErrorInfo
from ape.tasks.agent.sandbox import AgentSandbox, CommandResult, SandboxError
from ape.tasks.agent.tools import READ_LIMIT, inside, read_file
from ape.tasks.checking.check import to_check_result
from ape.tasks.common.deadline import PluginTimeout, call_with_timeout
from ape.tasks.plugins.loader import load_object
from ape.tasks.solving.stops import SessionLimit

NAME = "sandbox_state"


class StateCheckArgs(BaseModel):
    """``[checker.args]`` of ``sandbox_state``."""

    model_config = ConfigDict(extra="forbid")

    test_command: str | None = Field(default=None, description="The bash command that passes with exit code 0.")
    test_command_field: str | None = Field(default=None, description="The item field that holds the test command.")
    check_function: str | None = Field(
        default=None,
        description="A function 'module:function' called as (item, state) -> Passed | Failed | bool, in APE's "
        "process after the session; state reads the folder without following links and runs commands in the "
        "sandbox (StateView).",
    )
    timeout_s: float = Field(default=120.0, gt=0, description="Wall-clock limit of the test command or function.")

    @model_validator(mode="after")
    def _one_command(self) -> StateCheckArgs:
        given = [self.test_command, self.test_command_field, self.check_function]
        if sum(value is not None for value in given) != 1:
            raise ValueError("give exactly one of test_command, test_command_field and check_function")
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


class StateRefused(ToolException):
    """The state holds what a check must not read: a link, a path out of the folder, no regular
    file. The agent's doing, so the check fails (rather than errs)."""


class StateView:
    """What a check function sees of the state a session left: reads below the working folder
    that never follow a link (like the ``files`` tool), and commands run in the session's
    sandbox, with the fresh tests at ``/tests``. No path of the folder is handed out, so a
    link the agent planted (to the data file, through ``/proc/self/cwd``) cannot be followed
    by a plain ``open``."""

    def __init__(self, sandbox: AgentSandbox, tests: Path | None, timeout_s: float):
        self._sandbox = sandbox
        self._tests = tests
        self._timeout_s = timeout_s

    def _path(self, path: str) -> Path:
        try:
            return inside(self._sandbox.folder, path)
        except ToolException as exc:
            raise StateRefused(str(exc)) from None

    def exists(self, path: str) -> bool:
        """Whether ``path`` is there (a link counts as there, and is refused by :meth:`read`)."""
        return os.path.lexists(self._path(path))

    def read(self, path: str) -> str:
        """The text of a regular file below the folder (up to READ_LIMIT bytes); StateRefused for
        a link on the way, a FIFO or device, or a missing file."""
        target = self._path(path)
        try:
            mode = os.lstat(target).st_mode
        except FileNotFoundError:
            raise StateRefused(f"there is no file '{path}'") from None
        if not stat.S_ISREG(mode):
            raise StateRefused(f"'{path}' is not a regular file")
        try:
            return read_file(target, READ_LIMIT)
        except ToolException as exc:
            raise StateRefused(str(exc)) from None

    def list(self, path: str = ".") -> list[str]:
        """The names in a folder below the working folder (folders end with ``/``)."""
        target = self._path(path)
        if not target.is_dir() or target.is_symlink():
            raise StateRefused(f"'{path}' is not a folder")
        return sorted(
            name + ("/" if (target / name).is_dir() and not (target / name).is_symlink() else "")
            for name in os.listdir(target)
        )

    def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        """``bash -c command`` in the working folder, in the session's sandbox and limits, the
        tests at ``/tests`` (``$TESTS_DIR``)."""
        limit = min(timeout_s, self._timeout_s) if timeout_s is not None else self._timeout_s
        return self._sandbox.run(["bash", "-c", command], tests=self._tests, timeout_s=limit, counted=False)


def load_check_function(args: StateCheckArgs, base_dir: Path) -> Callable[..., Any] | None:
    """The ``check_function`` the args name (a config error, exit 2, when it cannot be loaded)."""
    if args.check_function is None:
        return None
    return load_object(args.check_function, where="[checker] args.check_function", base_dir=base_dir)


def grade_state(sandbox: AgentSandbox, args: StateCheckArgs, function: Callable[..., Any] | None = None) -> CheckResult:
    """Grade the state the session left: by the item's test command's exit code, or by the
    check ``function`` (:class:`StateView`)."""
    if function is not None:
        return _grade_by_function(sandbox, args, function)
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


def _grade_by_function(sandbox: AgentSandbox, args: StateCheckArgs, function: Callable[..., Any]) -> CheckResult:
    """The user's verdict on the state: its return value, read in APE's process. A read the
    state refused (a planted link) fails the check; any other raise is a check error."""
    started = time.perf_counter()
    try:
        view = StateView(sandbox, sandbox.fresh_tests(), args.timeout_s)
        returned = call_with_timeout(
            function,
            sandbox.item,
            view,
            limit_s=args.timeout_s,
            label="the check function",
            key="[checker] args.timeout_s",
        )
    except (SandboxError, SessionLimit):
        raise
    except StateRefused as exc:
        return CheckResult(
            status=CheckStatus.FAILED,
            score=0.0,
            runtime_s=time.perf_counter() - started,
            metadata={"reason": f"the state was refused: {exc}", "refused": True},
        )
    except (PluginTimeout, Exception) as exc:
        return CheckResult(
            status=CheckStatus.ERROR, runtime_s=time.perf_counter() - started, error=ErrorInfo.from_exception(exc)
        )
    return to_check_result(returned, time.perf_counter() - started)
