"""A command a limit killed reads as that limit, not as the agent's exit code; a sandbox
killed from outside the agent's reach, or by the machine's OOM killer, is an infrastructure
error (issue 49)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any

import pytest
from pydantic import BaseModel

from ape.schemas.config import SandboxConfig, SolverConfig
from ape.tasks.agent import kills
from ape.tasks.agent import sandbox as agent_sandbox
from ape.tasks.agent.sandbox import AgentSandbox, SandboxError
from ape.tasks.agent.tools import bash
from ape.tasks.models.mocks.chat import MockChatModel
from ape.tasks.models.session_item import session_item
from ape.tasks.solving.solve import run_solver
from tests.helpers.sandbox_kinds import available

needs_bwrap = pytest.mark.skipif(not available("bwrap"), reason="needs bubblewrap")
MIB = 1024 * 1024


class Task(BaseModel):
    id: str


def box(**changes: Any) -> AgentSandbox:
    settings: dict[str, Any] = {"command_timeout_s": 20, **changes}
    return AgentSandbox(SandboxConfig(**settings), Task(id="t1"), "t1")


def test_the_kinds_are_told_apart_by_the_cgroup_count_and_the_signal() -> None:
    assert kills.classify(137, (1, 1)) == "memory"  # the command's own limit met
    assert kills.classify(137, (1, 0)) == "machine_oom"  # killed below its limit: the machine's lack
    assert kills.classify(0, (1, 3)) == "memory"  # a child killed, the shell went on
    assert kills.classify(152, None) == "cpu" and kills.classify(153, None) == "file_size"
    assert kills.classify(137, (0, 0)) == "sigkill" and kills.classify(137, None) == "sigkill"
    assert kills.classify(1, None) is None and kills.classify(0, (0, 5)) is None


@needs_bwrap
def test_cpu_and_file_limits_are_named_to_the_agent_and_counted() -> None:
    with box(cpu_seconds=1, file_bytes=4096) as sandbox:
        spin = sandbox.bash("python3 -c 'while True: pass'")
        assert spin.killed == "cpu" and "[sandbox] cpu_seconds" in spin.text()
        big = sandbox.bash("head -c 100000 /dev/zero > big.bin")
        assert big.killed == "file_size" and "[sandbox] file_bytes" in big.text()
        own = sandbox.bash("kill -9 $$")  # the agent's own kill is no limit
        assert own.exit_code == 137 and own.killed == "sigkill" and "memory" not in own.text()
        assert sandbox.limits_hit == {"cpu": 1, "file_size": 1}


@needs_bwrap
@pytest.mark.skipif(kills.MemoryCgroup.make(64 * MIB, None) is None, reason="needs a memory cgroup (root)")
def test_an_out_of_memory_kill_reads_as_out_of_memory_not_as_the_exit_code() -> None:
    """Three processes each well under RLIMIT_AS, together past memory_bytes: the cgroup's OOM
    killer kills one; bash goes on and exits 0, and the result still says what happened."""
    hog = "python3 -c 'import time; b = bytearray(70 * 1024 * 1024); time.sleep(3)'"
    with box(memory_bytes=128 * MIB) as sandbox:
        result = sandbox.bash(f"{hog} & {hog} & {hog} & wait; echo after")
        assert result.killed == "memory" and "out of memory" in result.text() and "memory_bytes" in result.text()
        assert sandbox.limits_hit == {"memory": 1}
        calm = sandbox.bash("python3 -c 'b = bytearray(10 * 1024 * 1024)'")  # the next command starts afresh
        assert calm.exit_code == 0 and calm.killed is None


class MachineOom:
    """A memory cgroup whose count says: a process killed, its own limit never met."""

    def wrap(self, argv: list[str]) -> list[str]:
        return argv

    def events(self) -> tuple[int, int]:
        return 1, 0

    def close(self) -> None:
        pass


@needs_bwrap
def test_the_machines_oom_killer_is_an_infrastructure_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process killed while its cgroup stayed under its limit: the machine ran out, not the agent."""
    monkeypatch.setattr(agent_sandbox.MemoryCgroup, "make", lambda limit, shared: MachineOom())
    with box() as sandbox, pytest.raises(SandboxError, match="machine ran out of memory"):
        sandbox.bash("true")


@needs_bwrap
def test_a_sandbox_killed_from_outside_ends_the_session_as_an_infrastructure_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The namespace's outer process lives in a PID namespace the agent cannot see, so only the
    machine or an operator can kill it: the session ends ERROR SandboxError (ape retry redoes it),
    and the model is not told to go on."""
    started: list[subprocess.Popen[bytes]] = []
    real = subprocess.Popen

    def recording(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        process = real(*args, **kwargs)
        started.append(process)
        return process

    monkeypatch.setattr(agent_sandbox.subprocess, "Popen", recording)

    def kill_when_running() -> None:
        deadline = time.monotonic() + 15
        while not started and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        os.kill(started[0].pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_when_running)
    killer.start()
    with box() as sandbox:
        model = MockChatModel(behaviour="agent", steps={"t1": [{"tool": "bash", "args": {"command": "sleep 10"}}]})
        with session_item(sandbox.item, "t1", 0):
            state = run_solver(model, "wait", None, tools=[bash(sandbox)], settings=SolverConfig(), item=sandbox.item)
    killer.join()
    assert state.error is not None and state.error.type == "SandboxError"
    assert "killed from outside" in state.error.message and state.steps == 1
