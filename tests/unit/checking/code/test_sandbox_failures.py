"""code_exec when the sandbox itself fails: an error to fix and redo, never a score for the model.

The launchers here are real processes standing where bwrap would: one that fails the
way bwrap does when the machine has no user namespaces left, one that starts slowly,
one that never starts. The end-to-end test puts such a ``bwrap`` first on PATH of a
real ``ape run`` and then reruns with the real one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ape.schemas.results import CheckStatus, Outcome, OutputBatch, SessionResult
from ape.tasks.checking.builtin import builtin_checker, score_session
from ape.tasks.checking.check import run_check
from ape.tasks.checking.code import code_exec
from ape.tasks.checking.code import sandbox as sandboxes
from ape.tasks.checking.code.code_exec import SandboxError, WarmPool, run_code
from tests.unit.checking.code.test_code_exec_run import PLUGIN, ape_run, attack_config

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sandboxes need Linux")

ADD = "def add(a, b):\n    return a + b\n"
TESTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\n"
BWRAP_SAYS = "bwrap: Creating new namespace failed: No space left on device"
FAILING = f'echo launched >> "$0"; echo "{BWRAP_SAYS}" >&2; exit 1'


@pytest.fixture
def launcher(monkeypatch, tmp_path):
    """Make kind ``bwrap`` start its interpreters through a shell script instead of bubblewrap.

    Each check starts its own interpreter (a pool that keeps none ready), so every
    launch is one attempt; a script can count them with ``echo launched >> "$0"``
    (``$0`` is the file ``launches``: the launcher gets no environment of the run).
    """
    launches = tmp_path / "launches"
    pools: list[WarmPool] = []

    def use(script: str) -> Path:
        monkeypatch.setattr(sandboxes, "prefix", lambda kind: ("sh", "-c", script, str(launches)))
        pool = WarmPool(code_exec._PoolKey("bwrap", sys.executable), size=0)
        pools.append(pool)
        monkeypatch.setattr(code_exec, "pool_for", lambda kind: pool)
        return launches

    yield use
    for pool in pools:
        pool.close()


def attempts(launches: Path) -> int:
    return len(launches.read_text().splitlines()) if launches.exists() else 0


def test_a_sandbox_that_cannot_start_is_an_error_naming_the_cause(launcher):
    launches = launcher(FAILING)
    with pytest.raises(SandboxError) as info:
        run_code(ADD, TESTS, sandbox="bwrap", timeout_s=2.0)
    message = str(info.value)
    assert BWRAP_SAYS in message and "exit code 1" in message and "not run" in message
    assert "\n" not in message
    assert attempts(launches) == code_exec.START_ATTEMPTS


def test_a_sandbox_that_fails_once_is_started_again_and_scores_normally(launcher, tmp_path):
    flag = tmp_path / "failed-once"
    launches = launcher(f'echo launched >> "$0"; [ -e {flag} ] && exec "$@"; touch {flag}; exit 1')
    result = run_code(ADD, TESTS + "assert add(1, 1) == 3\n", sandbox="bwrap", timeout_s=2.0)
    assert (result.passed, result.total) == (2, 3)
    assert attempts(launches) == 2


def test_the_time_limit_starts_once_the_sandbox_has_started(launcher):
    launcher('sleep 2; exec "$@"')
    result = run_code(ADD, TESTS, sandbox="bwrap", timeout_s=0.5)
    assert result.score == 1.0 and not result.timed_out, result
    assert result.start_s >= 2.0  # the launcher slept 2 s: none of it was charged to the code
    looping = run_code("def add(a, b):\n    while True:\n        pass\n", TESTS, sandbox="bwrap", timeout_s=0.5)
    assert looping.timed_out and looping.score == 0.0  # the limit still binds the candidate


def test_a_sandbox_that_never_starts_is_an_error_and_cannot_block_the_check(launcher, monkeypatch):
    launches = launcher('echo launched >> "$0"; exec sleep 600')
    monkeypatch.setattr(code_exec, "START_LIMIT_S", 0.5)
    big = ADD + "# " + "x" * 300_000 + "\n"  # more than a pipe holds: the job is never read
    raised: list[BaseException] = []
    check = threading.Thread(target=lambda: raised.extend(_raises(big)), daemon=True)
    check.start()
    check.join(timeout=120)  # a hang guard, not a measurement
    assert not check.is_alive(), "run_code blocked on a sandbox that never read its job"
    assert len(raised) == 1 and isinstance(raised[0], SandboxError)
    assert "no start within 0.5 s" in str(raised[0])
    assert attempts(launches) == code_exec.START_ATTEMPTS


def _raises(code: str) -> list[BaseException]:
    try:
        run_code(code, TESTS, sandbox="bwrap", timeout_s=1.0)
    except BaseException as exc:
        return [exc]
    return []


def test_the_check_stage_records_a_check_error_that_is_redone(launcher):
    launcher(FAILING)
    checker = builtin_checker("code_exec", {"sandbox": "bwrap", "timeout_s": 2.0})
    check = run_check(checker, {"id": "q1", "tests": TESTS}, ADD)
    assert check.status is CheckStatus.ERROR and check.score is None
    assert check.error is not None and check.error.type == "SandboxError" and BWRAP_SAYS in check.error.message
    session = SessionResult(item_id="q1", run_index=0, model_id="m", outcome=Outcome.SOLVED, check=check)
    batch = OutputBatch(item_id="q1", model_id="m", sessions=[session])
    assert batch.check_errors == 1 and batch.needs_redo
    assert score_session(Outcome.SOLVED, check, "code_exec") == (0.0, False)


# ------------------------------------------------------------------ through `ape run`

CONFIG = attack_config("sandbox-down", 'timeout_s = 10.0, memory_mb = 256, sandbox = "bwrap"', "solver_workers = 2")

# passes the start-up probe (`bwrap ... true`), fails every real sandbox
BROKEN_BWRAP = f"""#!/bin/sh
for last; do :; done
[ "$last" = true ] && exit 0
echo "{BWRAP_SAYS}" >&2
exit 1
"""


def _bwrap_works() -> bool:
    try:
        sandboxes.prefix("bwrap")
    except sandboxes.SandboxUnavailable:
        return False
    return True


@pytest.mark.skipif(shutil.which("bwrap") is None or not _bwrap_works(), reason="needs a working bubblewrap")
def test_a_broken_sandbox_stops_ape_run_at_the_canary_then_a_rerun_checks_everything(tmp_path, prefect_server):
    """A sandbox that cannot start is caught before any item: the canary's known-correct code
    cannot run, so `ape run` stops with exit 2 in one line and saves nothing. (A sandbox that
    breaks in the middle of a run makes check errors: the check-stage test above.)"""
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "plugin.py").write_text(PLUGIN)
    (folder / "config.toml").write_text(CONFIG)
    right, wrong = ADD, "def add(a, b):\n    return a - b\n"
    with (folder / "items.jsonl").open("w") as handle:
        for number, code in enumerate([right, right, wrong]):
            handle.write(json.dumps({"id": f"q{number}", "code": code, "tests": TESTS}) + "\n")
    broken = tmp_path / "broken-bin"
    broken.mkdir()
    (broken / "bwrap").write_text(BROKEN_BWRAP)
    (broken / "bwrap").chmod(0o755)
    env = dict(os.environ, PREFECT_API_URL=prefect_server)

    def checks() -> dict[str, dict]:
        lines = (folder / "out" / "results.jsonl").read_text().splitlines()
        return {batch["item_id"]: batch["sessions"][0]["check"] for batch in map(json.loads, lines)}

    down = ape_run(folder / "config.toml", dict(env, PATH=f"{broken}{os.pathsep}{env['PATH']}"))
    assert down.returncode == 2, down.stdout[-3000:] + down.stderr[-3000:]
    assert down.stderr.count("\n") == 1 and "canary of checker 'code_exec'" in down.stderr
    assert "SandboxError" in down.stderr and BWRAP_SAYS in down.stderr
    assert not (folder / "out" / "results.jsonl").exists()

    fixed = ape_run(folder / "config.toml", env)
    assert fixed.returncode == 0, fixed.stdout[-3000:] + fixed.stderr[-3000:]
    after = checks()
    assert {item: check["status"] for item, check in after.items()} == {"q0": "PASSED", "q1": "PASSED", "q2": "FAILED"}
    assert {check["metadata"]["sandbox"] for check in after.values()} == {"bwrap"}


# ------------------------------------------------------------------ an interpreter under /tmp

RUN_ONE_CHECK = """
import site, sys
for folder in {sites!r}:
    site.addsitedir(folder)
from ape.tasks.checking.code.code_exec import run_code
result = run_code("def add(a, b):\\n    return a + b\\n", "assert add(1, 2) == 3\\n", sandbox={kind!r}, timeout_s=10.0)
print(sys.prefix, result.sandbox, result.score)
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bwrap", "unshare"])
def test_a_virtual_environment_under_tmp_runs_in_the_sandbox(kind):
    """The sandbox mounts a private /tmp; a venv made there (as CI often does) is bound back in."""
    try:
        sandboxes.prefix(kind)
    except sandboxes.SandboxUnavailable as exc:
        pytest.skip(str(exc))
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="ape-venv-", dir="/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "venv")], check=True, timeout=120)
        python = folder / "venv" / "bin" / "python"
        # every package folder this interpreter sees (a venv of its own may sit on a base's)
        sites = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
        script = RUN_ONE_CHECK.format(sites=sites, kind=kind)
        done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == [str(folder / "venv"), kind, "1.0"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------ killed from outside


@pytest.mark.parametrize("kind", ["bwrap", "unshare"])
def test_a_sandbox_killed_from_outside_mid_check_is_an_error_not_a_score(kind):
    """An operator or the host kills the interpreter while the tests run: the code's result is
    unknown, so the check is a SandboxError (a check error), not a score for the tests not run."""
    try:
        sandboxes.prefix(kind)
    except sandboxes.SandboxUnavailable as exc:
        pytest.skip(str(exc))
    import uuid

    from tests.helpers.attacks import processes_with

    marker = "ape-outside-kill-" + uuid.uuid4().hex
    tests = f"assert add(1, 2) == 3\nimport subprocess\nsubprocess.run(['sh', '-c', 'sleep 60; : {marker}'])\nassert add(2, 2) == 4\n"
    killed: list[int] = []

    def kill_the_interpreter() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not killed:
            for line in processes_with(marker):
                pid = int(line.split(":")[0])
                status = Path(f"/proc/{pid}/status").read_text()
                parent = int(next(row.split()[1] for row in status.splitlines() if row.startswith("PPid:")))
                os.kill(parent, signal.SIGKILL)  # the interpreter running the tests, from outside
                killed.append(parent)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_interpreter)
    killer.start()
    try:
        with pytest.raises(SandboxError, match="killed from outside during the check") as caught:
            run_code(ADD, tests, sandbox=kind, timeout_s=20.0)
    finally:
        killer.join()
    assert killed and "after 1 of 2 tests" in str(caught.value)
    # (the check stage turns a SandboxError into a check error: see the check-stage test above)
