"""code_exec against hostile code, one test per attack, in every sandbox this machine has.

Each test asserts the honest score, that nothing appeared outside the sandbox's own
temporary folder, that the secret of a process outside is in no part of the result,
and that no process the candidate started outlives the check.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ape.tasks.checking.code import sandbox as sandboxes
from ape.tasks.checking.code.code_exec import close_pools, run_code
from tests.helpers.attacks import ATTACKS, TESTS, processes_with, target_fields
from tests.helpers.sandbox_kinds import KINDS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces need Linux")


# Attacks on the harness itself do not depend on namespaces: they must fail without them too.
ALL_KINDS = [*KINDS, "none"]
SECRET = "ape-secret-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def secret_process():
    """A process outside the sandbox whose environment holds a secret (like an API key)."""
    proc = subprocess.Popen(["sleep", "600"], env={"APE_SECRET_KEY": SECRET, "PATH": os.environ["PATH"]})
    yield proc.pid
    proc.kill()
    proc.wait()


@pytest.fixture
def world(tmp_path, secret_process):
    """The places an attacker aims at: a home, an output folder, /tmp, a listening socket."""
    home, output = tmp_path / "home", tmp_path / "output"
    home.mkdir()
    output.mkdir()
    (output / "results.jsonl").write_text('{"honest": true}\n')
    fields, listener = target_fields(home, output, secret_process)
    fields["listener"] = listener
    yield fields
    listener.close()
    # what a failed attack left behind must not outlive its test: processes and /tmp files
    for line in processes_with(fields["marker"]):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
    for name in os.listdir("/tmp"):
        if fields["marker"] in name:
            path = Path("/tmp") / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def attack(kind: str, name: str, world: dict, timeout_s: float = 5.0):
    code, honest = ATTACKS[name]
    before_tmp = set(os.listdir("/tmp"))
    result = run_code(code.format(**world), TESTS, timeout_s=timeout_s, memory_mb=256, sandbox=kind)
    text = result.model_dump_json()
    assert result.sandbox == kind
    assert 0.0 <= result.score <= 1.0
    assert result.score == pytest.approx(honest), result
    assert SECRET not in text
    assert processes_with(world["marker"]) == []
    leaked = [p for p in set(os.listdir("/tmp")) - before_tmp if world["marker"] in p]
    assert leaked == []
    assert sorted(os.listdir(world["home"])) == []
    assert sorted(os.listdir(world["output"])) == ["results.jsonl"]
    assert (world["output"] / "results.jsonl").read_text() == '{"honest": true}\n'
    return result


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_forged_records_on_every_descriptor_are_rejected(kind, world):
    result = attack(kind, "forge_channel", world)
    assert (result.passed, result.total) == (0, 2)
    assert "the solution process sent" in (result.error or ""), result  # its own pipe to the harness


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_replacing_json_dumps_changes_nothing(kind, world):
    attack(kind, "replace_json_dumps", world)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_replacing_builtins_compile_changes_nothing(kind, world):
    attack(kind, "replace_compile", world)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_replaced_builtins_do_not_reach_the_tests(kind, world):
    attack(kind, "replace_builtins", world)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_frame_introspection_is_refused(kind, world):
    attack(kind, "read_frames", world)


@pytest.mark.parametrize("kind", KINDS)
def test_parent_environment_is_out_of_sight(kind, world):
    result = attack(kind, "read_parent_environ", world)
    assert result.failures  # it ran and reported what it saw, which held no secret


@pytest.mark.parametrize("kind", KINDS)
def test_killing_the_parent_is_impossible(kind, world):
    attack(kind, "kill_parent", world)  # this test process is the parent: it is still here


@pytest.mark.parametrize("kind", KINDS)
def test_writes_outside_the_private_folder_fail(kind, world):
    attack(kind, "write_outside", world)


@pytest.mark.parametrize("kind", KINDS)
def test_setsid_children_die_with_the_check(kind, world):
    attack(kind, "setsid_children", world)


@pytest.mark.parametrize("kind", KINDS)
def test_no_network(kind, world):
    attack(kind, "network", world)
    with pytest.raises(TimeoutError):  # nobody connected to the listening socket
        world["listener"].accept()


@pytest.mark.parametrize("kind", KINDS)
def test_fork_bomb_is_bounded(kind, world):
    if os.geteuid() == 0 and sandboxes.pids_cgroup_root() is None:
        pytest.skip("as root without a pids cgroup the process count is not bounded")
    attack(kind, "fork_bomb", world, timeout_s=20.0)


@pytest.mark.parametrize("kind", KINDS)
def test_printing_gigabytes_is_cut_at_the_file_limit(kind, world):
    result = attack(kind, "print_gigabytes", world, timeout_s=20.0)
    assert len(result.stdout_tail) <= 2000


@pytest.mark.parametrize("kind", KINDS)
def test_filling_the_disk_stops_at_the_private_folder(kind, world):
    attack(kind, "fill_disk", world, timeout_s=20.0)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_sys_exit_is_not_a_pass(kind, world):
    result = attack(kind, "sys_exit", world)
    assert "SystemExit" in result.failures[0]


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_os_exit_is_not_a_pass(kind, world):
    result = attack(kind, "os_exit", world)
    assert result.passed == 0 and "ended" in result.error


def my_descendants() -> set[str]:
    """Pids of the live processes this test process started, directly or not."""
    parents = {}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            parents[entry.name] = fields[1]
    mine, me = set(), str(os.getpid())
    for pid in parents:
        seen, current = set(), pid
        while current in parents and current not in seen:
            seen.add(current)
            current = parents[current]
            if current == me:
                mine.add(pid)
                break
    return mine


def test_closing_the_pools_leaves_no_interpreter_waiting():
    run_code("def f():\n    return 1\n", "assert f() == 1\n", sandbox="none")  # a pool exists
    close_pools()
    harnesses = {line.split(":")[0] for line in processes_with("The program that runs candidate code")}
    assert harnesses & my_descendants() == set()
