"""Agent sessions in their own sandbox (issue 49): state persists within a session and never
leaks between sessions; a hostile agent reaches no network, none of the user's files, leaves
no process behind and cannot write its grade; limits end the session with their reason."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from ape.schemas.config import SandboxConfig, SolverConfig
from ape.schemas.results import CheckStatus
from ape.tasks.agent import sandbox as agent_sandbox
from ape.tasks.agent.grade import StateCheckArgs, grade_state
from ape.tasks.agent.sandbox import AgentSandbox, SandboxError
from ape.tasks.agent.tools import bash, files, python
from ape.tasks.models.mocks.chat import MockChatModel
from ape.tasks.models.session_item import session_item
from ape.tasks.solving.solve import run_solver
from tests.helpers.other_user import ensure_user
from tests.helpers.processes import dead_pid
from tests.helpers.sandbox_kinds import available

pytestmark = pytest.mark.skipif(not available("bwrap"), reason="needs bubblewrap")


class Task(BaseModel):
    id: str
    files: dict[str, str] = {}
    tests: dict[str, str] = {}


def config(**changes: Any) -> SandboxConfig:
    settings: dict[str, Any] = {"files_field": "files", "test_files_field": "tests", "command_timeout_s": 10}
    return SandboxConfig(**{**settings, **changes})


def box(item: Task | None = None, **changes: Any) -> AgentSandbox:
    return AgentSandbox(config(**changes), item or Task(id="t1", files={"seed.txt": "from the item"}), "t1")


def test_state_persists_across_a_sessions_tool_calls_and_the_seed_is_there() -> None:
    with box() as sandbox:
        shell, py, io = bash(sandbox), python(sandbox), files(sandbox)
        assert "from the item" in shell.invoke({"command": "cat seed.txt"})
        shell.invoke({"command": "echo one > a.txt"})
        py.invoke({"code": "open('b.txt', 'w').write(open('a.txt').read().strip() + ' two')"})
        io.invoke({"action": "write", "path": "sub/c.txt", "content": "three"})
        out = shell.invoke({"command": "cat b.txt sub/c.txt; echo; pwd"})
        assert "one two" in out and "three" in out and "/task" in out
        assert io.invoke({"action": "read", "path": "b.txt"}) == "one two"
        assert "sub/" in io.invoke({"action": "list", "path": "."})
        folder = sandbox.home
    assert not folder.exists()  # removed at the session's end


def test_sessions_never_share_a_folder() -> None:
    item = Task(id="t1")
    with AgentSandbox(config(), item, "t1", 0) as first, AgentSandbox(config(), item, "t1", 1) as second:
        first.bash("echo secret-of-run-0 > left.txt")
        seen = second.bash("ls -a; cat left.txt")
        assert "secret-of-run-0" not in seen.stdout and seen.exit_code != 0
        assert first.folder != second.folder


def test_keep_leaves_the_folder_for_debugging(tmp_path: Path) -> None:
    with box(keep=True, root=tmp_path) as sandbox:
        sandbox.bash("echo kept > k.txt")
    assert (sandbox.folder / "k.txt").read_text().strip() == "kept"


def test_a_folder_left_by_a_dead_process_is_swept_and_no_other(tmp_path: Path) -> None:
    """What a kill -9 leaves (a folder whose name carries a process that is gone) is removed
    when the next process makes its first sandbox there; a live owner's and a kept folder stay."""
    dead = dead_pid()
    orphan = tmp_path / f"ape-agent-x-0-{dead}.1-abc_12"
    (orphan / "task").mkdir(parents=True)
    reused = tmp_path / f"ape-agent-x-0-{os.getpid()}.1-abc_34"  # our own pid, another process's start time
    reused.mkdir()
    live = tmp_path / f"ape-agent-x-0-{agent_sandbox._owner_tag()}-abc_56"
    live.mkdir()
    earlier = tmp_path / "ape-agent-x-0-earlier"  # an earlier layout: the owner in a file beside the folder
    earlier.mkdir()
    (earlier / agent_sandbox.OWNER_FILE).write_text(f"{dead} 1")
    with box(keep=True, root=tmp_path) as kept:
        pass
    other = tmp_path / "ape-agent-not-ours"  # no owner named: not made by a sandbox
    other.mkdir()
    assert not orphan.exists() and not reused.exists() and not earlier.exists()
    assert live.exists() and kept.home.exists() and other.exists()
    assert agent_sandbox._owner_tag() in kept.home.name and (kept.home / agent_sandbox.KEPT_FILE).exists()
    agent_sandbox._swept.discard(str(tmp_path))
    assert agent_sandbox.sweep_stale(tmp_path) == []  # a second sweep finds nothing of the living or the kept


KILLED_AT_BIRTH = """
import os, signal, sys, tempfile
from ape.schemas.config import SandboxConfig
from ape.tasks.agent.sandbox import AgentSandbox

made = tempfile.mkdtemp
def mkdtemp(*args, **kwargs):
    path = made(*args, **kwargs)
    print(path, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # the instant the folder exists, before anything else
tempfile.mkdtemp = mkdtemp
AgentSandbox(SandboxConfig(root=sys.argv[1]), {"id": "t1"}, "t1")
"""


def test_a_run_killed_the_instant_its_folder_exists_leaves_nothing(tmp_path: Path) -> None:
    """The first moment a working folder exists already says whose it is: a process killed
    right after ``mkdtemp`` returned (before any other step) leaves a folder the next sweep removes."""
    import subprocess
    import sys

    root = tmp_path / "root"
    child = subprocess.run([sys.executable, "-c", KILLED_AT_BIRTH, str(root)], capture_output=True, text=True)
    assert child.returncode == -9, child.stderr
    left = Path(child.stdout.strip())
    assert left.is_dir() and left.parent == root
    agent_sandbox._swept.discard(str(root))
    assert agent_sandbox.sweep_stale(root) == [left]
    assert not left.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to a second local user needs root")
def test_another_users_folder_is_never_swept(tmp_path: Path) -> None:
    """A folder planted by another user, named as if its owner died, is not ours to remove."""
    planted = tmp_path / f"ape-agent-x-0-{dead_pid()}.1-abc_78"
    (planted / "task").mkdir(parents=True)
    os.chown(planted, *ensure_user())
    agent_sandbox._swept.discard(str(tmp_path))
    assert agent_sandbox.sweep_stale(tmp_path) == []
    assert (planted / "task").is_dir()


def test_no_network_not_even_the_hosts_loopback() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted: list[Any] = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    try:
        with box() as sandbox:
            result = sandbox.python(
                f"import socket\ns = socket.socket()\ns.settimeout(3)\ns.connect(('127.0.0.1', {port}))\nprint('IN')"
            )
            outside = sandbox.python("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=3)\nprint('IN')")
        assert result.exit_code != 0 and "IN" not in result.stdout
        assert outside.exit_code != 0 and "IN" not in outside.stdout
        assert not accepted
    finally:
        server.close()


def test_the_users_files_are_not_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    places = [tmp_path / "ape-home", tmp_path / "output", Path.home() / f".ape-test-{uuid.uuid4().hex[:8]}"]
    for place in places:
        place.mkdir()
        (place / "key.txt").write_text(secret)
    monkeypatch.setenv("APE_HOME", str(places[0]))
    try:
        with box() as sandbox:
            for place in places:
                result = sandbox.bash(f"cat {place}/key.txt; ls {place}")
                assert secret not in result.stdout and result.exit_code != 0
            env = sandbox.bash("env").stdout
            assert str(places[0]) not in env and "APE_HOME" not in env
            refused = files(sandbox).invoke({"action": "read", "path": str(places[2] / "key.txt")})
            assert secret not in refused and "leaves the working folder" in refused
    finally:
        (places[2] / "key.txt").unlink()
        places[2].rmdir()


def test_proc_shows_nothing_of_the_hosts_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The namespace's pid 1 (bubblewrap) and the command's own process: their environment,
    command line and working folder, read from /proc inside, name no folder of the host (the
    run's working folder, the sandbox's own path) and none of the run's variables."""
    here = tmp_path / f"host-cwd-{uuid.uuid4().hex[:8]}"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("APE_HOST_MARK", f"mark-{uuid.uuid4().hex}")
    with box() as sandbox:
        read = "for p in /proc/[0-9]*; do echo $p; cat $p/environ $p/cmdline; echo; readlink $p/cwd $p/root; done"
        result = sandbox.bash(read + "; echo; cat /proc/1/environ /proc/self/environ /proc/1/cmdline; echo end")
        seen = result.stdout.replace("\0", "\n")
        assert result.exit_code == 0 and seen.rstrip().endswith("end") and "/proc/1\n" in seen
        assert "bwrap" in seen  # pid 1 was read
        for host in (str(here), str(tmp_path), str(sandbox.home), os.environ["APE_HOST_MARK"], "APE_HOST_MARK"):
            assert host not in seen, host
        cwds = {line for line in seen.splitlines() if line.startswith("/") and not line.startswith("/proc")}
        assert cwds <= {"/task", "/"}, cwds


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(pid))
    return found


def test_no_process_outlives_its_command() -> None:
    marker = "313.25"  # an unusual sleep length to find the processes by
    with box() as sandbox:
        result = sandbox.bash(
            f"(sleep {marker} &); setsid sleep {marker} & nohup sleep {marker} >/dev/null 2>&1 & echo started"
        )
        assert "started" in result.stdout
        assert _processes_with(f"sleep\x00{marker}") == []  # gone already, between two tool calls
        later = sandbox.bash("ps -e -o comm=")
        assert "sleep" not in later.stdout


def test_files_refuses_paths_that_leave_the_folder() -> None:
    with box() as sandbox:
        io = files(sandbox)
        sandbox.bash("ln -s / root_link; ln -s /etc etc_link; mkdir d")
        for path in ("../x", "/etc/hostname", "root_link/etc/hostname", "etc_link", "d/../../x"):
            reply = io.invoke({"action": "read", "path": path})
            assert "leaves the working folder" in reply or "symbolic link" in reply, (path, reply)
        # a name of its own: a shared /tmp may already hold a file or folder called x
        target = f"ape-escape-{uuid.uuid4().hex}"
        assert "symbolic link" in io.invoke({"action": "write", "path": f"root_link/tmp/{target}", "content": "x"})
        assert not (Path("/tmp") / target).exists()


def test_the_agent_cannot_write_its_grade() -> None:
    tests = {"check.sh": 'test "$(cat answer.txt)" = "42"\n'}
    item = Task(id="t1", tests=tests)
    args = StateCheckArgs(test_command='bash "$TESTS_DIR/check.sh"')
    with AgentSandbox(config(), item, "t1") as sandbox:
        # a hostile agent: a passing check.sh of its own, an attempt at /tests, a process
        # left to rewrite the tests later, and a verdict file
        hostile = sandbox.bash(
            "echo 'exit 0' > check.sh; mkdir -p tests; echo 'exit 0' > tests/check.sh;"
            "echo 'exit 0' > /tests/check.sh; echo PASSED > verdict.txt; echo 0 > exit_code;"
            "(sleep 2; echo 'exit 0' > check.sh) & echo 41 > answer.txt"
        )
        assert hostile.exit_code == 0 or hostile.exit_code != 0  # whatever it reports, the grade below
        graded = grade_state(sandbox, args)
        assert graded.status is CheckStatus.FAILED and graded.metadata["exit_code"] == 1
        sandbox.bash("echo 42 > answer.txt")
        assert grade_state(sandbox, args).status is CheckStatus.PASSED


def test_tests_are_invisible_during_the_session() -> None:
    item = Task(id="t1", tests={"check.sh": "exit 0\n"})
    with AgentSandbox(config(), item, "t1") as sandbox:
        seen = sandbox.bash("ls /tests; echo ${TESTS_DIR:-none}; find / -name check.sh 2>/dev/null")
        assert "check.sh" not in seen.stdout and "none" in seen.stdout


def test_output_is_cut_to_the_documented_size() -> None:
    with box(output_bytes=1000) as sandbox:
        result = sandbox.bash("head -c 50000 /dev/zero | tr '\\0' a")
        assert len(result.stdout) < 1100 and "bytes cut" in result.stdout


def test_a_command_past_its_time_is_killed_with_exit_code_124() -> None:
    with box(command_timeout_s=1) as sandbox:
        result = sandbox.bash("sleep 30")
        assert result.timed_out and result.exit_code == 124 and result.seconds < 10


def agent(steps: list[Any]) -> MockChatModel:
    return MockChatModel(behaviour="agent", steps={"t1": steps})


def solve(model: MockChatModel, sandbox: AgentSandbox, max_steps: int = 8):  # type: ignore[no-untyped-def]
    tools = [bash(sandbox), python(sandbox), files(sandbox)]
    item = sandbox.item
    with session_item(item, "t1", 0):
        return run_solver(model, "do it", None, tools=tools, settings=SolverConfig(max_steps=max_steps), item=item)


def test_the_sandbox_time_limit_ends_the_session_with_its_reason() -> None:
    with box(session_timeout_s=1.5) as sandbox:
        steps = [{"tool": "bash", "args": {"command": "sleep 1"}}] * 5 + ["done"]
        state = solve(agent(steps), sandbox)
    assert state.end_reason == "sandbox_time_limit" and state.error is None
    assert any(entry.kind.value == "LIMIT" for entry in state.transcript)
    assert state.steps < 6


def test_the_step_limit_ends_the_session_with_its_reason() -> None:
    with box() as sandbox:
        steps = [{"tool": "bash", "args": {"command": f"echo {i} >> log.txt"}} for i in range(10)]
        state = solve(agent(steps), sandbox, max_steps=3)
        assert sandbox.bash("wc -l < log.txt").stdout.strip() == "3"
    assert state.end_reason == "step_limit" and state.forced


def test_a_sandbox_that_cannot_start_is_an_infrastructure_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable(kind: str) -> tuple[str, ...]:
        raise agent_sandbox.namespaces.SandboxUnavailable("'bwrap' is not installed")

    monkeypatch.setattr(agent_sandbox.namespaces, "prefix", unavailable)
    with pytest.raises(SandboxError, match="bwrap"):
        box()


def test_a_sandbox_failing_mid_session_ends_it_error_not_a_tool_message(monkeypatch: pytest.MonkeyPatch) -> None:
    with box() as sandbox:
        monkeypatch.setattr(agent_sandbox.namespaces, "bwrap_argv", lambda **_: ["/nonexistent/bwrap", "--"])
        state = solve(agent([{"tool": "bash", "args": {"command": "true"}}, "done"]), sandbox)
    assert state.error is not None and state.error.type == "SandboxError"


def test_a_command_is_waited_for_without_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Popen.wait(timeout) polls with sleeps doubling to 50 ms, so every command ended on a step
    of about 32 ms; the end of the command is now waited for on a pidfd."""
    import subprocess

    timeouts: list[float | None] = []
    real_wait = subprocess.Popen.wait

    def wait(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        timeouts.append(timeout)
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    with box() as sandbox:
        assert sandbox.bash("true").exit_code == 0
    assert timeouts and all(timeout is None for timeout in timeouts)


def test_stdin_a_command_never_reads_holds_up_neither_its_time_limit_nor_its_end() -> None:
    with box(command_timeout_s=1) as sandbox:
        big = b"x" * (4 * 1024 * 1024)  # far past a pipe's buffer
        late = sandbox.run(["sleep", "30"], stdin=big)
        assert late.timed_out and late.exit_code == 124 and late.seconds < 10
        early = sandbox.run(["true"], stdin=big)
        assert early.exit_code == 0 and not early.timed_out
        code = "# " + "y" * 1_000_000 + "\nprint('read it all')\n"
        assert sandbox.python(code).stdout.strip() == "read it all"


def test_a_proxy_folder_left_by_a_dead_process_is_swept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session whose working folder's path is too long for a socket keeps its network proxy's
    socket in a short folder of the system's temporary folder; a kill -9 leaves it, owned like a
    working folder, and the next process's first sandbox removes it (a live owner's stays)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "system-tmp"))
    (tmp_path / "system-tmp").mkdir()
    orphan = tmp_path / "system-tmp" / f"{agent_sandbox.PROXY_PREFIX}{dead_pid()}.1-abc_12"
    orphan.mkdir()
    live = tmp_path / "system-tmp" / f"{agent_sandbox.PROXY_PREFIX}{agent_sandbox._owner_tag()}-abc_34"
    live.mkdir()
    monkeypatch.setattr(agent_sandbox, "_swept", set())
    assert agent_sandbox.sweep_stale(tmp_path / "root") == [orphan]
    assert not orphan.exists() and live.exists()
