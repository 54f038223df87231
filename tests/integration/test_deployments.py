"""Deployments: the config stays in its file (a run reads it afresh; parameters are only the
run overrides), the cron schedule is registered, and a served deployment run by
``run_deployment`` completes and writes its output."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prefect import flow

from ape.cli import main as ape_main
from ape.config import load_config
from ape.deployments.serve import cron_schedule, deployment_for
from ape.flows.served import OVERRIDES, RunOverrides, load_served
from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import start_logged, stop_group

PREFECT_YAML = REPO_ROOT / "deployments" / "prefect.yaml"
PROBE_FLOW = "ape-deployment-probe"
CRON = "17 4 * * 1"


@flow(name=PROBE_FLOW, persist_result=False)
def write_marker(only_models: list[str] | None = None, note: str | None = None) -> dict[str, str]:
    """Stands in for the benchmark flow: records the config it read from the served file."""
    config = load_served(RunOverrides(only_models=only_models, note=note))
    out = Path(config.run.output)
    out.mkdir(parents=True, exist_ok=True)
    marker = out / "marker.json"
    marker.write_text(
        json.dumps(
            {
                "type": type(config).__name__,
                "name": config.name,
                "models": [m.model_id for m in config.model if not only_models or m.model_id in only_models],
                "schema": config.data.schema_,
                "template": config.prompt.template,
                "note": note,
            }
        ),
        encoding="utf-8",
    )
    return {"marker": str(marker)}


@flow(name="ape-no-config")
def no_config(limit: int = 1) -> int:
    return limit


def make_config(output: Path, name: str = "deploy-probe") -> ApeConfig:
    """A config file beside ``output`` (a served config is always read from its file)."""
    folder = output.parent
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.jsonl").write_text('{"id": "q1", "question": "1+1"}\n', encoding="utf-8")
    path = folder / f"{name}.toml"
    path.write_text(
        f"""name = "{name}"
[data]
file = "data.jsonl"
schema = "probe.schema:Item"
[prompt]
template = "Q: {{{{ question }}}}"
[[model]]
provider = "mock"
name = "mock-a"
[[model]]
provider = "mock"
name = "mock-b"
[checker]
implementation = "exact_match"
[run]
output = "{output.name}"
solver_workers = 2
""",
        encoding="utf-8",
    )
    return load_config(path)


# ------------------------------------------------------------------ no server needed


def test_deployment_carries_schedule_and_only_the_run_overrides(tmp_path: Path) -> None:
    config = make_config(tmp_path / "out")
    deployment = deployment_for(write_marker, config, CRON, "weekly", timezone="Europe/Berlin")
    assert deployment.name == "weekly"
    assert [s.schedule.cron for s in deployment.schedules] == [CRON]
    assert deployment.schedules[0].schedule.timezone == "Europe/Berlin"
    assert deployment.parameters == {}  # no config: it stays in the owner's file
    assert set(deployment._parameter_openapi_schema.properties) == {"only_models", "note"}  # the UI form
    assert deployment.enforce_parameter_schema
    # and closed: the server refuses a run with any other parameter before it exists
    assert deployment._parameter_openapi_schema.model_dump(exclude_unset=True)["additionalProperties"] is False
    assert deployment.entrypoint.endswith("test_deployments.py:write_marker")

    unscheduled = deployment_for(write_marker, config, None, "on-demand")
    assert not unscheduled.schedules


def test_the_served_flow_takes_only_the_documented_overrides() -> None:
    from ape.flows.served import served_benchmark

    assert set(served_benchmark.parameters.properties) == set(OVERRIDES)
    with pytest.raises(ValueError, match="printable"):
        RunOverrides(note="line one\nline two")
    with pytest.raises(ValueError):
        RunOverrides(redo_outcomes=["EVERYTHING"])
    with pytest.raises(ValueError):
        RunOverrides.model_validate({"base_dir": "/tmp"})


def test_bad_cron_and_flow_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ApeError, match="invalid schedule '0 3 \\* \\*'") as err:
        cron_schedule("0 3 * *")
    assert err.value.where == "--cron"
    with pytest.raises(ApeError, match="timezone"):
        cron_schedule("0 3 * * *", timezone="Mars/Olympus")
    with pytest.raises(ApeError, match="takes parameter\\(s\\) limit beyond the run overrides"):
        deployment_for(no_config, make_config(tmp_path / "out"), None, "x")


def test_serve_reports_a_missing_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.toml"
    assert ape_main(["serve", str(missing), "--cron", "0 3 * * *"]) == 2
    assert "nope.toml" in capsys.readouterr().err


def test_serve_takes_a_timezone_and_rejects_a_bad_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        (REPO_ROOT / "examples" / "arithmetic" / "config.toml")
        .read_text()
        .replace('file = "data.jsonl"', 'file = "data.jsonl"')
    )
    for name in ("data.jsonl", "arithmetic.py"):
        (tmp_path / name).write_bytes((REPO_ROOT / "examples" / "arithmetic" / name).read_bytes())
    code = ape_main(["serve", str(config), "--cron", "0 3 * * *", "--timezone", "Mars/Olympus"])
    err = capsys.readouterr().err
    assert code == 2 and "timezone" in err and "--cron" in err


def _yaml_deployment() -> dict[str, Any]:
    spec = yaml.safe_load(PREFECT_YAML.read_text(encoding="utf-8"))
    (deployment,) = spec["deployments"]
    return {"spec": spec, **deployment}


def test_prefect_yaml_is_a_valid_benchmark_deployment() -> None:
    deployment = _yaml_deployment()
    assert deployment["entrypoint"] == "ape.flows.served:served_benchmark"  # module form: any cwd
    from prefect.flows import load_flow_from_entrypoint

    assert load_flow_from_entrypoint(deployment["entrypoint"]).name == "benchmark"
    (step,) = deployment["spec"]["pull"]
    assert "prefect.deployments.steps.set_working_directory" in step
    for schedule in deployment["schedules"]:
        cron_schedule(schedule["cron"], schedule.get("timezone"))
    # the config is the owner's file, named in the deployment's job variables, never a parameter
    assert set(deployment["parameters"]) <= set(OVERRIDES)
    RunOverrides.model_validate(deployment["parameters"])
    assert deployment["enforce_parameter_schema"] is True
    config_file = deployment["work_pool"]["job_variables"]["env"]["APE_CONFIG"]
    assert not Path(config_file).is_absolute()  # relative to the project folder the worker runs in
    config = load_config(REPO_ROOT / config_file)
    assert config.checker.implementation == "exact_match"
    # No machine-specific path: the worker names the project folder at run time.
    assert step["prefect.deployments.steps.set_working_directory"] == {"directory": "{{ $APE_PROJECT_DIR }}"}


# ------------------------------------------------------------------ against a real server


@contextlib.contextmanager
def serving(config: ApeConfig, api_url: str, workdir: Path) -> Iterator[Path]:
    """Serve the probe flow in a subprocess, as ``ape serve`` does; kill it afterwards."""
    config_file = config.config_file
    assert config_file is not None
    script = (
        "import sys\n"
        "from prefect.flows import load_flow_from_entrypoint\n"
        "from ape.config import load_config\n"
        "from ape.deployments.serve import serve_config\n"
        "flow = load_flow_from_entrypoint('tests/integration/test_deployments.py:write_marker')\n"
        f"serve_config(flow, load_config(sys.argv[1]), {CRON!r}, 'weekly')\n"
    )
    env = dict(os.environ, PREFECT_API_URL=api_url, PREFECT_RUNNER_POLL_FREQUENCY="1")
    log_path = workdir / "serve.log"
    proc = start_logged([sys.executable, "-c", script, str(config_file)], log_path, cwd=REPO_ROOT, env=env)
    try:
        yield log_path
    finally:
        stop_group(proc, 15)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_scheduled_deployment_is_served_and_its_run_writes_output(prefect_server: str, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    config = make_config(tmp_path / "out", name="served-probe")
    deployment_id = deployment_for(write_marker, config, CRON, "weekly").apply()
    with get_client(sync_client=True) as client:
        stored = client.read_deployment(deployment_id)
    assert [s.schedule.cron for s in stored.schedules] == [CRON]
    assert stored.parameters == {}
    assert set(stored.parameter_openapi_schema["properties"]) == {"only_models", "note"}

    with serving(config, prefect_server, tmp_path) as log_path:
        flow_run = run_deployment(
            f"{PROBE_FLOW}/weekly", parameters={"only_models": ["mock-b"]}, timeout=120, poll_interval=1
        )
        assert flow_run.state is not None
        assert flow_run.state.is_completed(), (
            f"flow run ended {flow_run.state.name}: {flow_run.state.message}\n"
            + log_path.read_text(errors="replace")[-3000:]
        )
    assert flow_run.deployment_id == deployment_id  # served under the registered deployment
    marker = json.loads((config.run.output / "marker.json").read_text(encoding="utf-8"))
    assert marker == {
        "type": "ApeConfig",
        "name": "served-probe",
        "models": ["mock-b"],  # the allowed override reached the flow
        "schema": "probe.schema:Item",
        "template": "Q: {{ question }}",  # read from the owner's file
        "note": None,
    }


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_prefect_yaml_deploys_as_written(prefect_server: str) -> None:
    """``prefect deploy`` accepts the file and keeps the run-time project folder unresolved."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="ape", type="process"), overwrite=True)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "prefect",
            "--no-prompt",
            "deploy",
            "--prefect-file",
            str(PREFECT_YAML),
            "--name",
            "nightly-benchmark",
        ],
        cwd=REPO_ROOT,
        env=dict(os.environ, PREFECT_API_URL=prefect_server),
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with get_client(sync_client=True) as client:
        stored = client.read_deployment_by_name("benchmark/nightly-benchmark")
    expected = _yaml_deployment()
    assert [s.schedule.cron for s in stored.schedules] == ["0 3 * * *"]
    assert stored.work_pool_name == "ape"
    assert stored.pull_steps == expected["spec"]["pull"]
    assert stored.parameters == expected["parameters"]
