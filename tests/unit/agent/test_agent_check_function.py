"""A user check function grades the state an agent left (issue 49): it runs in APE's process
after every process of the agent has ended, reads the folder without following links, and
its return value is the verdict; what the agent planted (a link to a file holding the right
answer, a FIFO, a verdict file) cannot make it pass or hang."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from ape.schemas.check import Failed, Passed
from ape.schemas.config import SandboxConfig
from ape.schemas.errors import ApeError
from ape.schemas.results import CheckStatus
from ape.tasks.agent.grade import StateCheckArgs, StateView, grade_state, load_check_function
from ape.tasks.agent.sandbox import AgentSandbox
from ape.tasks.agent.tools import files
from tests.helpers.sandbox_kinds import available

pytestmark = pytest.mark.skipif(not available("bwrap"), reason="needs bubblewrap")
HERE = "tests.unit.agent.test_agent_check_function"


class Task(BaseModel):
    id: str
    expected: str = "42"
    tests: dict[str, str] = {}


def answer_is_expected(item: Task, state: StateView) -> Passed | Failed:
    """The check function under test: answer.txt holds the item's expected text."""
    if not state.exists("answer.txt"):
        return Failed("no answer.txt")
    text = state.read("answer.txt").strip()
    return Passed(metadata={"seen": text}) if text == item.expected else Failed(f"answer.txt holds {text!r}")


def runs_the_tests(item: Task, state: StateView) -> bool:
    """A check function that runs the fresh tests in the sandbox."""
    return state.run('bash "$TESTS_DIR/check.sh"').exit_code == 0


def box(item: Task | None = None) -> AgentSandbox:
    config = SandboxConfig(test_files_field="tests", command_timeout_s=10)
    return AgentSandbox(config, item or Task(id="t1"), "t1")


def grade(sandbox: AgentSandbox, name: str = "answer_is_expected") -> Any:
    args = StateCheckArgs(check_function=f"{HERE}:{name}", timeout_s=10)
    return grade_state(sandbox, args, load_check_function(args, Path(".")))


def test_the_functions_verdict_is_the_grade() -> None:
    with box() as sandbox:
        assert grade(sandbox).status is CheckStatus.FAILED  # nothing written yet
        sandbox.bash("echo 42 > answer.txt")
        check = grade(sandbox)
    assert check.status is CheckStatus.PASSED and check.metadata["seen"] == "42"


def test_the_function_can_run_the_fresh_tests_in_the_sandbox() -> None:
    item = Task(id="t1", tests={"check.sh": "grep -qx 7 out.txt\n"})
    with box(item) as sandbox:
        sandbox.bash("echo 7 > out.txt; echo 'exit 0' > check.sh")  # its own check.sh is not the one run
        assert grade(sandbox, "runs_the_tests").status is CheckStatus.PASSED
        sandbox.bash("echo 8 > out.txt")
        assert grade(sandbox, "runs_the_tests").status is CheckStatus.FAILED


def test_a_link_to_a_file_holding_the_answer_fails_the_check(tmp_path: Path) -> None:
    """The agent cannot see the host, but a check in APE's process could follow a link it
    planted (to the data file, through /proc/self/cwd): the read refuses links, so it fails."""
    outside = tmp_path / "reference.txt"
    outside.write_text("42\n")
    with box() as sandbox:
        sandbox.bash("ln -s /proc/self/cwd/reference.txt answer.txt")
        (sandbox.folder / "answer2.txt").symlink_to(outside)  # as if the path were guessed
        sandbox.bash("mv answer2.txt answer.txt")
        check = grade(sandbox)
    assert check.status is CheckStatus.FAILED and check.metadata["refused"] is True
    assert "symbolic link" in check.metadata["reason"] or "regular file" in check.metadata["reason"]


def test_a_fifo_neither_hangs_the_check_nor_the_files_tool() -> None:
    with box() as sandbox:
        sandbox.bash("mkfifo answer.txt")
        outcome: list[Any] = []
        worker = threading.Thread(target=lambda: outcome.append(grade(sandbox)))
        worker.start()
        worker.join(10)
        assert not worker.is_alive() and outcome[0].status is CheckStatus.FAILED
        reply = files(sandbox).invoke({"action": "read", "path": "answer.txt"})
        assert "not a regular file" in reply


def test_a_verdict_file_or_a_printed_pass_changes_nothing() -> None:
    with box() as sandbox:
        sandbox.bash('echo 41 > answer.txt; echo PASSED > verdict.json; echo \'{"status": "PASSED"}\' > .check')
        assert grade(sandbox).status is CheckStatus.FAILED


def test_a_check_function_that_cannot_be_loaded_is_a_config_error() -> None:
    args = StateCheckArgs(check_function=f"{HERE}:no_such_function")
    with pytest.raises(ApeError, match="check_function"):
        load_check_function(args, Path("."))
    with pytest.raises(ValueError, match="exactly one"):
        StateCheckArgs(check_function=f"{HERE}:answer_is_expected", test_command="true")
