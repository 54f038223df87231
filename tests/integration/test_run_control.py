"""Pause, resume and drain a running evaluation (ape.flows.live.control, ``ape ctl``).

Real ``ape run`` processes with a slow mock model that logs each call (``call_log``), a real
Prefect server (the ``prefect_server`` fixture), and ``ape ctl`` run as a user would:

- pause (by the output folder) -> the model's flow run is Paused, every item whose model
  call was made is saved and no new session starts while paused (results.jsonl and the call
  log stay fixed); a hostile value in the control variable is ignored; resume (by the flow
  run's id, through the variable) -> the run finishes with every item exactly once and one
  model call per item (none again for saved items); metadata.json and report.json list the
  actions with who asked;
- drain -> exit code 4 with fewer items saved, then the same ``ape run`` completes, each item
  once and one call per item over both runs;
- without any server (Prefect's temporary one), the file channel pauses and resumes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from tests.helpers.paths import REPO_ROOT
from tests.helpers.prefect_api import PrefectApi
from tests.helpers.processes import start_ape, stop_group
from tests.helpers.runner import make_benchmark

ITEMS = 80
ARGS = 'behaviour = "arithmetic", latency_s = 0.5, call_log = "calls.log"'
RUN = "solver_workers = 4\n"
# long enough (about 20 s) that `ape ctl pause` starts and acts before the run ends on a busy machine
FILE_ITEMS = 160


def _env(api: str | None) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    if api:
        env["PREFECT_API_URL"] = api
    else:
        env.pop("PREFECT_API_URL", None)
    return env


def _start(config: Path, api: str | None) -> subprocess.Popen[str]:
    return start_ape(config, "--no-server", env=_env(api))


def _ctl(verb: str, run: str, api: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ape", "ctl", verb, run], env=_env(api), capture_output=True, text=True, timeout=120
    )


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _ids(out: Path) -> Counter[str]:
    return Counter(json.loads(line)["item_id"] for line in _lines(out / "results.jsonl"))


def _wait(what: str, check, proc: subprocess.Popen[str], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended while waiting for {what}: {proc.communicate()[0]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _still(out: Path, calls: Path, seconds: float) -> tuple[int, int]:
    """Results and calls while paused: the same at the start and the end of ``seconds``."""
    before = (len(_lines(out / "results.jsonl")), len(_lines(calls)))
    time.sleep(seconds)
    after = (len(_lines(out / "results.jsonl")), len(_lines(calls)))
    assert before == after, f"(results, calls) moved while paused: {before} -> {after}"
    return after


def test_pause_then_resume_loses_nothing_and_calls_no_saved_item_again(prefect_server: str, tmp_path: Path) -> None:
    config = make_benchmark(tmp_path, n=ITEMS, model_args=ARGS, run=RUN)
    out, calls = tmp_path / "out", tmp_path / "calls.log"
    proc = _start(config, prefect_server)
    try:
        _wait("4 saved items", lambda: len(_lines(out / "results.jsonl")) >= 4, proc)
        paused = _ctl("pause", str(out), prefect_server)
        assert paused.returncode == 0, paused.stdout + paused.stderr
        flow_run_id = json.loads((out / "live.json").read_text())["flow_run_id"]
        with PrefectApi(prefect_server) as api:

            def state() -> str:
                return api.get(f"/flow_runs/{flow_run_id}").json()["state"]["type"]

            _wait("the flow run Paused", lambda: state() == "PAUSED", proc)
            saved, made = _still(out, calls, 3.0)
            assert made == saved < ITEMS, (made, saved)  # every call made is saved: none in flight, none lost
            # a hostile value in the control variable: logged and ignored, the run stays paused
            name = f"ape-control-{flow_run_id}"
            hostile = api.patch(f"/variables/name/{name}", json={"value": "rm -rf /"})
            assert hostile.status_code == 204, hostile.text
            assert _still(out, calls, 2.0) == (saved, made) and state() == "PAUSED"
            # ape status by the flow run's id (the server knows its folder): paused, and no countdown
            shown = subprocess.run(
                [sys.executable, "-m", "ape", "status", flow_run_id],
                env=_env(prefect_server),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert shown.returncode == 0, shown.stdout + shown.stderr
            assert "paused," in shown.stdout and "about " not in shown.stdout.split("time left", 1)[1], shown.stdout
            resumed = _ctl("resume", flow_run_id, prefect_server)  # by the flow run: through the variable
            assert resumed.returncode == 0, resumed.stdout + resumed.stderr
            assert f"`ape status {out}` shows it" in resumed.stdout  # the folder, not the flow run's id
            output = proc.communicate(timeout=120)[0]
            assert api.get(f"/flow_runs/{flow_run_id}").json()["state"]["type"] == "COMPLETED"
            assert api.get(f"/variables/name/{name}").status_code == 404  # the run deleted its variable
    finally:
        stop_group(proc, 5)
    assert proc.returncode == 0, output
    ids = _ids(out)
    assert len(ids) == ITEMS and set(ids.values()) == {1}, ids  # every item exactly once
    assert len(_lines(calls)) == ITEMS  # one model call per item: none again for the saved ones
    control = json.loads((out / "metadata.json").read_text())["control"]
    assert [e["action"] for e in control] == ["pause", "paused", "resume"], control
    user = control[0]["by"]
    assert user.startswith("ape ctl by ") and control[2]["by"] == user, control
    assert "is not one of run, pause, drain" in (out / "run.log").read_text()
    report = json.loads((out / "report.json").read_text())
    assert [e["action"] for e in report["summary"]["control"]] == ["pause", "paused", "resume"]
    assert report["summary"]["control"][0]["model"] == "m"


def test_drain_ends_resumably_with_exit_4_and_the_next_run_goes_on(prefect_server: str, tmp_path: Path) -> None:
    config = make_benchmark(tmp_path, n=ITEMS, model_args=ARGS, run=RUN)
    out, calls = tmp_path / "out", tmp_path / "calls.log"
    proc = _start(config, prefect_server)
    try:
        _wait("5 saved items", lambda: len(_lines(out / "results.jsonl")) >= 5, proc)
        drained = _ctl("drain", str(out), prefect_server)
        assert drained.returncode == 0, drained.stdout + drained.stderr
        output = proc.communicate(timeout=120)[0]
    finally:
        stop_group(proc, 5)
    assert proc.returncode == 4, output
    assert "drained" in output and "run the same command again" in output
    first = _ids(out)
    assert 5 <= len(first) < ITEMS and set(first.values()) == {1}
    assert len(_lines(calls)) == len(first)  # what was in flight finished and was saved
    assert [e["action"] for e in json.loads((out / "metadata.json").read_text())["control"]] == ["drain"]

    again = subprocess.run(
        [sys.executable, "-m", "ape", "run", str(config), "--no-server"],
        cwd=tmp_path,
        env=_env(prefect_server),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    ids = _ids(out)
    assert len(ids) == ITEMS and set(ids.values()) == {1}, ids
    assert len(_lines(calls)) == ITEMS  # the second run called only what the first had not saved
    # the resumed run keeps the first run's drain in its log and report
    assert [e["action"] for e in json.loads((out / "metadata.json").read_text())["control"]] == ["drain"]
    report = json.loads((out / "report.json").read_text())
    assert [e["action"] for e in report["summary"]["control"]] == ["drain"]


def test_without_a_server_the_file_channel_pauses_and_resumes(tmp_path: Path) -> None:
    config = make_benchmark(tmp_path, n=FILE_ITEMS, model_args=ARGS, run=RUN)
    out, calls = tmp_path / "out", tmp_path / "calls.log"
    proc = _start(config, None)
    try:
        _wait("4 saved items", lambda: len(_lines(out / "results.jsonl")) >= 4, proc)
        assert _ctl("pause", str(out), None).returncode == 0
        assert (out / "control.json").stat().st_mode & 0o777 == 0o600
        _wait("the pause", lambda: "paused with" in (out / "run.log").read_text(), proc)
        saved, made = _still(out, calls, 2.5)
        assert made == saved < FILE_ITEMS
        # the live view says so (ape status reads it), and ape ctl still finds the run by its folder
        _wait("live.json paused", lambda: json.loads((out / "live.json").read_text())["state"] == "paused", proc)
        assert _ctl("resume", str(out), None).returncode == 0
        output = proc.communicate(timeout=120)[0]
    finally:
        stop_group(proc, 5)
    assert proc.returncode == 0, output
    ids = _ids(out)
    assert len(ids) == FILE_ITEMS and set(ids.values()) == {1}
    assert len(_lines(calls)) == FILE_ITEMS
