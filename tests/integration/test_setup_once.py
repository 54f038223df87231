"""A run resolves each model's setup once, in preflight: the model flows take that setup
(pointed at the run's folder) instead of reading every plugin, template and hook again."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ape.cli import main
from ape.flows import evaluate as evaluate_module
from ape.flows import preflight as preflight_module
from ape.tasks.setup import model as model_setup
from tests.helpers.runner import make_benchmark

TWO_MODELS = "".join(
    f'[[model]]\nname = "{name}"\nprovider = "mock"\n'
    f'args = {{ behaviour = "arithmetic", seed = {seed}, call_log = "{{log}}/{name}.log" }}\n'
    for seed, name in enumerate(("setup-once-a", "setup-once-b"))
)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts make_setup calls per model, wherever they come from."""
    counted: Counter[str] = Counter()
    real = model_setup.make_setup

    def counting(config, model_cfg, judge=None):
        counted[model_cfg.model_id] += 1
        return real(config, model_cfg, judge)

    monkeypatch.setattr(model_setup, "make_setup", counting)
    monkeypatch.setattr(preflight_module, "make_setup", counting)
    monkeypatch.setattr(evaluate_module, "make_setup", counting)
    return counted


@pytest.mark.parametrize("new_run", [False, True], ids=["in-place", "new-run"])
def test_ape_run_builds_each_models_setup_once(
    tmp_path: Path, prefect_server: str, builds: Counter[str], new_run: bool
) -> None:
    config = make_benchmark(
        tmp_path / "bench", n=3, models=TWO_MODELS.replace("{log}", str(tmp_path)), id_prefix=f"once{int(new_run)}-"
    )
    argv = ["run", str(config), "--no-server", "--no-progress", *(["--new-run"] if new_run else [])]
    assert main(argv) == 0
    assert builds == {"setup-once-a": 1, "setup-once-b": 1}
    calls = {
        name: len((tmp_path / f"{name}.log").read_text().splitlines()) for name in ("setup-once-a", "setup-once-b")
    }
    assert calls == {"setup-once-a": 3, "setup-once-b": 3}  # every item solved, once
    out = tmp_path / "bench" / "out"
    report = json.loads(((out / "latest") if new_run else out).joinpath("report.json").read_text())
    assert {row["model_id"] for row in report["leaderboard"]} == {"setup-once-a", "setup-once-b"}


def test_a_new_run_takes_preflights_setup_with_the_runs_own_cache_scope(
    tmp_path: Path, prefect_server: str, builds: Counter[str]
) -> None:
    # the setup handed on is pointed at the run folder: a second new run calls the model
    # afresh (its cache scope is its own run id), as a setup built in the run folder would
    config = make_benchmark(
        tmp_path / "bench", n=2, models=TWO_MODELS.replace("{log}", str(tmp_path)), id_prefix="scope-"
    )
    for _ in range(2):
        assert main(["run", str(config), "--no-server", "--no-progress", "--new-run"]) == 0
    assert builds == {"setup-once-a": 2, "setup-once-b": 2}  # once per run
    calls = {
        name: len((tmp_path / f"{name}.log").read_text().splitlines()) for name in ("setup-once-a", "setup-once-b")
    }
    assert calls == {"setup-once-a": 4, "setup-once-b": 4}  # no answer reused across the runs


def test_a_model_flow_started_without_preflight_builds_its_setup(
    tmp_path: Path, prefect_server: str, builds: Counter[str]
) -> None:
    from ape.config import load_config
    from ape.flows.evaluate import evaluate

    config = load_config(make_benchmark(tmp_path, n=2, id_prefix="alone-"))
    summary = evaluate(config, 0, preflight="a-token-this-process-never-handed-over")
    assert summary["done"] == 2
    assert sum(builds.values()) == 1


def test_the_preflight_result_is_found_by_its_token_only_while_handed_over(tmp_path: Path) -> None:
    from ape.config import load_config

    config = load_config(make_benchmark(tmp_path, n=2, id_prefix="match-"))
    checked = preflight_module.preflight(config)
    with preflight_module.hand_over(checked) as token:
        assert token is not None and preflight_module.handed(token) is checked
        moved = config.model_copy(update={"run": config.run.model_copy(update={"output": tmp_path / "runs" / "r1"})})
        pointed = checked.setup(0).for_run(moved)
        assert pointed.checker_factory is checked.setup(0).checker_factory
        assert pointed.out_dir == moved.output_dir_for(config.model[0])
    assert preflight_module.handed(token) is None  # nothing kept after the run
    with preflight_module.hand_over(None) as nothing:
        assert nothing is None and preflight_module.handed(nothing) is None


@pytest.mark.llm
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_served_llama_cpp_models_setup_is_built_once(
    tmp_path: Path, prefect_server: str, builds: Counter[str]
) -> None:
    """APE serves a llama-cpp model for the run: its model flow takes preflight's setup pointed
    at the server (the setup is not built again because the server changed its base_url)."""
    from tests.helpers.llm_server import llm_missing

    missing = llm_missing()
    if missing:
        pytest.skip(missing)
    local = (
        '[[model]]\nname = "local"\nprovider = "llama-cpp"\nmodel = "smollm2-135m"\n'
        "max_tokens = 8\ntemperature = 0.0\nargs = { n_ctx = 512 }\n"
    )
    config = make_benchmark(tmp_path / "bench", n=2, models=local, id_prefix="llama-once-")
    assert main(["run", str(config), "--no-server", "--no-progress"]) in (0, 1)  # a tiny model's answers may err
    assert builds == {"local": 1}
    sessions = (tmp_path / "bench" / "out" / "sessions.jsonl").read_text().splitlines()
    assert len(sessions) == 2
    assert all(json.loads(line).get("outcome") != "ERROR" for line in sessions), sessions  # the server answered
