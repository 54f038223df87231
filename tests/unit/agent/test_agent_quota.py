"""A disk quota on the whole working folder (issue 49, ``[sandbox] disk_bytes``): as root a
tmpfs of that size, so a write past it fails for the agent (ENOSPC) and is recorded; where no
tmpfs can be mounted the size is measured after each command and the session ends at
``disk_limit``. Many files each under ``file_bytes`` cannot pass it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from ape.schemas.config import SandboxConfig, SolverConfig
from ape.tasks.agent import quota
from ape.tasks.agent import sandbox as agent_sandbox
from ape.tasks.agent.sandbox import AgentSandbox
from ape.tasks.agent.tools import bash, files
from ape.tasks.models.mocks.chat import MockChatModel
from ape.tasks.models.session_item import session_item
from ape.tasks.solving.solve import run_solver
from tests.helpers.processes import dead_pid
from tests.helpers.sandbox_kinds import available

pytestmark = pytest.mark.skipif(not available("bwrap"), reason="needs bubblewrap")
MIB = 1024 * 1024
FILL = "for i in 0 1 2 3 4 5; do head -c 400000 /dev/zero > f$i.bin || echo failed-at-$i; done"


class Task(BaseModel):
    id: str


def box(tmp_path: Path, **changes: Any) -> AgentSandbox:
    settings: dict[str, Any] = {"disk_bytes": MIB, "file_bytes": MIB, "root": tmp_path, **changes}
    return AgentSandbox(SandboxConfig(**settings), Task(id="t1"), "t1")


def can_mount(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    mounted = quota.mount(probe, MIB)
    quota.unmount(probe)
    probe.rmdir()
    return mounted


def test_a_write_past_the_quota_fails_for_the_agent_and_is_recorded(tmp_path: Path) -> None:
    if not can_mount(tmp_path):
        pytest.skip("mounting a tmpfs needs root")
    with box(tmp_path) as sandbox:
        assert sandbox.quota == "enforced"
        result = sandbox.bash(FILL)  # six files of 400 kB, each under file_bytes, 2.4 MB in all
        assert "No space left on device" in result.stderr and "failed-at-2" in result.stdout
        assert result.disk_full and "[sandbox] disk_bytes" in result.text()
        assert sandbox.limits_hit == {"disk": 1}
        assert quota.used(sandbox.folder) <= MIB
        freed = sandbox.bash("rm f0.bin f1.bin && head -c 100000 /dev/zero > small.bin && echo ok")
        assert "ok" in freed.stdout and not freed.disk_full  # the agent may make room and go on
        folder = sandbox.folder
    assert not os.path.ismount(folder) and not folder.exists()


def test_a_kept_folder_keeps_its_files_after_the_tmpfs_goes(tmp_path: Path) -> None:
    if not can_mount(tmp_path):
        pytest.skip("mounting a tmpfs needs root")
    with box(tmp_path, keep=True) as sandbox:
        sandbox.bash("echo kept > k.txt")
    assert not os.path.ismount(sandbox.folder) and (sandbox.folder / "k.txt").read_text() == "kept\n"


def test_where_no_tmpfs_can_be_had_the_session_ends_at_disk_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_sandbox.quota, "mount", lambda folder, size: False)
    with box(tmp_path) as sandbox:
        assert sandbox.quota == "measured"
        steps = [{"tool": "bash", "args": {"command": f"head -c 400000 /dev/zero > f{i}.bin"}} for i in range(6)]
        model = MockChatModel(behaviour="agent", steps={"t1": [*steps, "done"]})
        with session_item(sandbox.item, "t1", 0):
            state = run_solver(
                model, "fill it", None, tools=[bash(sandbox)], settings=SolverConfig(max_steps=10), item=sandbox.item
            )
        assert state.end_reason == "disk_limit" and state.error is None
        assert state.steps == 3 and sandbox.limits_hit == {"disk": 1}  # the third write passed 1 MiB
        limit = next(entry for entry in state.transcript if entry.kind.value == "LIMIT")
        assert "[sandbox] disk_bytes" in (limit.content or "")


def test_a_killed_runs_mounted_folder_is_unmounted_and_swept(tmp_path: Path) -> None:
    if not can_mount(tmp_path):
        pytest.skip("mounting a tmpfs needs root")
    home = tmp_path / f"{agent_sandbox.PREFIX}t1-0-{dead_pid()}.1-x"
    (home / "task").mkdir(parents=True)
    assert quota.mount(home / "task", MIB)
    agent_sandbox._swept.discard(str(tmp_path))
    assert agent_sandbox.sweep_stale(tmp_path) == [home]
    assert not home.exists()


def _write(sandbox: AgentSandbox, path: str, size: int) -> str:
    return str(files(sandbox).invoke({"action": "write", "path": path, "content": "x" * size}))


def test_a_files_write_past_the_quota_leaves_no_partial_file(tmp_path: Path) -> None:
    """The tmpfs refuses the write midway (ENOSPC): the tool says the quota refused it, and
    neither a partial new file, nor a damaged old one, nor the temporary file is left."""
    if not can_mount(tmp_path):
        pytest.skip("mounting a tmpfs needs root")
    with box(tmp_path) as sandbox:
        assert sandbox.quota == "enforced"
        sandbox.bash("head -c 600000 /dev/zero > fill.bin")
        assert "wrote" in _write(sandbox, "old.txt", 1000)
        reply = _write(sandbox, "new.txt", 600_000)
        assert "refused" in reply and "[sandbox] disk_bytes" in reply
        assert not (sandbox.folder / "new.txt").exists()
        reply = _write(sandbox, "old.txt", 600_000)
        assert "refused" in reply and (sandbox.folder / "old.txt").read_text() == "x" * 1000
        assert sorted(os.listdir(sandbox.folder)) == ["fill.bin", "old.txt"]
        assert sandbox.limits_hit["disk"] == 2


def test_where_the_quota_is_measured_a_files_write_past_it_is_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_sandbox.quota, "mount", lambda folder, size: False)
    with box(tmp_path) as sandbox:
        assert sandbox.quota == "measured"
        sandbox.bash("head -c 600000 /dev/zero > fill.bin")
        reply = _write(sandbox, "new.txt", 600_000)
        assert "refused" in reply and "[sandbox] disk_bytes" in reply
        assert sorted(os.listdir(sandbox.folder)) == ["fill.bin"] and quota.used(sandbox.folder) <= MIB
        assert "wrote" in _write(sandbox, "small.txt", 100_000)  # what fits is written
        assert sandbox.limits_hit == {"disk": 1}
