"""A served benchmark runs only what its owner deployed: through the REST API, as an attacker
who can reach the server would, every override that names code, a file, a folder or an
endpoint fails before any import; the allow-list works; a retry from the UI still works."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.prefect_api import PrefectApi
from tests.helpers.processes import start_logged, stop_group

DEPLOYMENT = "benchmark/secure"
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def _write_benchmark(folder: Path) -> Path:
    """The owner's benchmark: the arithmetic example with two mock models and five items."""
    example = REPO_ROOT / "examples" / "arithmetic"
    folder.mkdir(parents=True)
    (folder / "arithmetic.py").write_bytes((example / "arithmetic.py").read_bytes())
    lines = (example / "data.jsonl").read_text(encoding="utf-8").splitlines()[:5]
    (folder / "data.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = folder / "config.toml"
    config.write_text(
        """name = "secure"
[data]
file = "data.jsonl"
schema = "arithmetic:Problem"
[prompt]
template = "Solve: {{ question }}"
[[model]]
name = "mock-a"
provider = "mock"
args = { behaviour = "arithmetic", accuracy = 1.0 }
[[model]]
name = "mock-b"
provider = "mock"
args = { behaviour = "arithmetic", accuracy = 1.0 }
[adapter]
implementation = "last_number"
[checker]
implementation = "exact_match"
args = { field = "answer" }
[run]
solver_workers = 2
""",
        encoding="utf-8",
    )
    return config


def _write_attacker(folder: Path, marker: Path) -> None:
    """A plugin folder whose every module writes ``marker`` when imported."""
    folder.mkdir(parents=True)
    body = f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n"
    for name in ("evil", "arithmetic"):
        (folder / f"{name}.py").write_text(
            body + "def hook(batch):\n    pass\nclass Model:\n    pass\nclass Problem:\n    pass\n", encoding="utf-8"
        )


@contextlib.contextmanager
def _serving(config: Path, api_url: str, log_path: Path) -> Iterator[subprocess.Popen]:
    env = dict(os.environ, PREFECT_API_URL=api_url, PREFECT_RUNNER_POLL_FREQUENCY="1")
    command = [sys.executable, "-m", "ape", "serve", str(config), "--name", "secure"]
    proc = start_logged(command, log_path, cwd=config.parent, env=env)
    try:
        yield proc
    finally:
        stop_group(proc, 20)


def _deployment_id(api: PrefectApi, log_path: Path, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = api.get(f"/deployments/name/{DEPLOYMENT}")
        if response.status_code == 200:
            return str(response.json()["id"])
        time.sleep(1)
    raise AssertionError("the deployment never appeared:\n" + log_path.read_text(errors="replace")[-3000:])


def _wait_final(api: PrefectApi, flow_run_id: str, log_path: Path, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = api.get(f"/flow_runs/{flow_run_id}").json()
        if run["state"] and run["state"]["type"] in FINAL:
            return run
        time.sleep(1)
    raise AssertionError(f"flow run {flow_run_id} did not finish:\n" + log_path.read_text(errors="replace")[-3000:])


def _attempt(api: PrefectApi, deployment_id: str, parameters: dict[str, Any], log_path: Path, **body: Any) -> str:
    """Create a flow run with these parameters; the state or the API's refusal, as text."""
    for _ in range(5):  # a busy local server may answer 503 for a moment
        response = api.post(f"/deployments/{deployment_id}/create_flow_run", json={"parameters": parameters, **body})
        if response.status_code != 503:
            break
        time.sleep(2)
    if response.status_code >= 400:
        return f"refused by the API ({response.status_code}): {response.text}"
    run = _wait_final(api, response.json()["id"], log_path)
    for _ in range(20):  # a crash before the flow's code is relabelled by the serving process's hook
        if run["state"]["type"] != "CRASHED":
            break
        time.sleep(1)
        run = api.get(f"/flow_runs/{run['id']}").json()
    return f"{run['state']['type']}: {run['state'].get('message')}"


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a dozen served runs; each starts a process, slow on a busy machine
def test_served_runs_take_only_the_allow_list(prefect_server: str, tmp_path: Path) -> None:
    config = _write_benchmark(tmp_path / "owner")
    marker = tmp_path / "MARKER"
    attacker = tmp_path / "attacker"
    _write_attacker(attacker, marker)
    stolen = tmp_path / "stolen-output"
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text("the owner's secret\n", encoding="utf-8")
    owner_config = {
        "name": "secure",
        "data": {"file": str(config.parent / "data.jsonl"), "schema": "arithmetic:Problem"},
        "prompt": {"template": "Solve: {{ question }}"},
        "model": [{"name": "mock-a", "provider": "mock"}],
        "checker": {"implementation": "exact_match", "args": {"field": "answer"}},
    }
    forbidden = {
        "a plugin folder": {"config": {**owner_config, "base_dir": str(attacker)}},
        "a hook": {"config": {**owner_config, "base_dir": str(attacker), "hooks": {"on_batch_saved": "evil:hook"}}},
        "a model class": {"config": {**owner_config, "model": [{"class": "evil:Model"}]}},
        "a data file": {"config": {**owner_config, "data": {"file": str(secret_file), "schema": "taskspec"}}},
        "an output folder": {"config": {**owner_config, "run": {"output": str(stolen)}}},
        "a base_url": {
            "config": {**owner_config, "model": [{"provider": "openai", "base_url": "http://evil.example"}]}
        },
        "a top-level base_dir": {"base_dir": str(attacker)},
        "a top-level hook": {"hooks": {"on_batch_saved": "evil:hook"}},
        "a top-level output": {"run": {"output": str(stolen)}},
    }
    log_path = tmp_path / "serve.log"
    with (
        _serving(config, prefect_server, log_path),
        PrefectApi(prefect_server) as api,
    ):
        deployment_id = _deployment_id(api, log_path)
        stored = api.get(f"/deployments/{deployment_id}").json()
        # the deployment carries no config: nothing to read back and edit
        assert "config" not in stored["parameters"]
        assert set(stored["parameter_openapi_schema"]["properties"]) == {
            "only_models",
            "redo_outcomes",
            "new_run",
            "note",
        }
        # the server refuses them before a run exists (the deployment's schema is closed) ...
        for name, params in forbidden.items():
            outcome = _attempt(api, deployment_id, params, log_path)
            (key,) = params
            assert outcome.startswith("refused by the API (409)") and repr(key) in outcome, f"{name}: {outcome}"
        # ... and a caller that switches the server's check off gets a run that fails before
        # the flow's code, with the refused parameters named in its state message
        for name in ("a plugin folder", "a top-level hook"):
            outcome = _attempt(api, deployment_id, forbidden[name], log_path, enforce_parameter_schema=False)
            (key,) = forbidden[name]
            assert outcome.startswith("FAILED") and f"'{key}' refused" in outcome, f"{name}: {outcome}"
        assert not marker.exists(), "an override imported the attacker's code"
        assert not stolen.exists(), "an override chose the output folder"
        out = config.parent / "output"
        assert "the owner's secret" not in "".join(
            p.read_text(errors="replace") for p in out.rglob("*") if p.is_file() and p.suffix in {".jsonl", ".log"}
        )

        # an unknown model in the allow-list is a clear failure the UI shows
        wrong = _attempt(api, deployment_id, {"only_models": ["mock-z"]}, log_path)
        assert wrong.startswith("FAILED") and "mock-z" in wrong and "mock-a" in wrong, wrong

        # an allowed override works: one model, in a new run folder
        ok = _attempt(api, deployment_id, {"only_models": ["mock-b"], "note": "nightly check"}, log_path)
        assert ok.startswith("COMPLETED"), ok + "\n" + log_path.read_text(errors="replace")[-3000:]
        runs = [p for p in (out / "runs").iterdir() if p.is_dir()]
        results = [p for run in runs for p in run.rglob("results.jsonl")]
        assert [p.parent.name for p in results] == ["mock-b"]

        # a UI retry of a failed run: the owner's file is broken, the run fails with the
        # reason as its message; fixed, the retry (the UI's "Retry" sets AwaitingRetry) completes
        good = config.read_text(encoding="utf-8")
        config.write_text(good.replace('implementation = "exact_match"', 'implementation = "exact_mtch"'))
        created = api.post(f"/deployments/{deployment_id}/create_flow_run", json={"parameters": {}}).json()
        failed = _wait_final(api, created["id"], log_path)
        assert failed["state"]["type"] == "FAILED" and "exact_mtch" in (failed["state"]["message"] or "")
        config.write_text(good, encoding="utf-8")
        retry = {"state": {"type": "SCHEDULED", "name": "AwaitingRetry", "message": "Retry from the UI"}, "force": True}
        assert api.post(f"/flow_runs/{created['id']}/set_state", json=retry).status_code in (200, 201)
        time.sleep(2)
        retried = _wait_final(api, created["id"], log_path)
        assert retried["state"]["type"] == "COMPLETED", retried["state"]
        assert retried["run_count"] >= 2
    assert not marker.exists()
