"""Run health end to end: a run whose every answer is the same exits 1 with one health line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ape.config import load_config
from tests.helpers.paths import REPO_ROOT
from tests.helpers.runner import make_benchmark

SAME_ANSWER = 'behaviour = "scripted", responses = ["42"]'


def ape(*args: str, api: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH="", PREFECT_API_URL=api)
    return subprocess.run(
        [sys.executable, "-m", "ape", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_one_answer_to_every_item_exits_1_with_the_health_line(tmp_path: Path, prefect_server: str) -> None:
    config = make_benchmark(tmp_path, n=6, model_args=SAME_ANSWER)
    first = ape("run", str(config), "--no-server", "--no-progress", api=prefect_server)
    assert first.returncode == 1, first.stdout + first.stderr
    line = "suspect results for model 'm': 6 of 6 sessions (100%) ended with the same identical answer: '42'"
    errors = [row for row in first.stderr.splitlines() if row.startswith("error: ")]
    assert errors == [f"error: {line} (if this is expected, set [run] accept_unhealthy = true)"], first.stderr
    assert "ape retry" not in first.stderr  # retrying would ask the same model the same way
    # graded once by the command, not again by the flow it started
    assert first.stderr.count("canary: the checker graded 2 known answers as expected") == 1, first.stderr
    markdown_line = line.replace("'m'", "`m`").replace("'42'", "`'42'`")  # leaderboard.md sets them in code
    assert first.stdout.splitlines()[0] == f"**Run health:** {markdown_line}"
    health = json.loads((tmp_path / "out" / "report.json").read_text())["health"]["m"]
    assert health["suspect"] and health["kind"] == "identical answer"
    assert (health["count"], health["sessions"], health["share"]) == (6, 6, 1.0)

    # accepted by the config: the same results (resumed, no model call) exit 0
    config.write_text(config.read_text().replace("[run]\n", "[run]\naccept_unhealthy = true\n"))
    second = ape("run", str(config), "--no-server", "--no-progress", api=prefect_server)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "suspect results for model `m`" in second.stdout


def test_the_flow_run_of_a_healthy_weak_model_completes(tmp_path: Path, prefect_server: str) -> None:
    """Different wrong answers on every item: a weak model, not a broken run."""
    from ape.flows.benchmark import benchmark

    wrong = ", ".join(f'"{n}"' for n in range(100, 106))
    answers = f'behaviour = "scripted", responses = [{wrong}]'
    # one worker: one model instance walks through the scripted answers, one per item
    config = load_config(make_benchmark(tmp_path, n=6, model_args=answers, run="solver_workers = 1"))
    state = benchmark(config, return_state=True)
    assert state.is_completed(), state
    health = json.loads((tmp_path / "out" / "report.json").read_text())["health"]["m"]
    assert health["suspect"] is False and health["count"] <= 1


def test_the_flow_run_of_a_suspect_model_ends_failed(tmp_path: Path, prefect_server: str) -> None:
    """A deployment's run has no exit code: its state says it."""
    from ape.flows.benchmark import ResultsSuspect, benchmark

    config = load_config(make_benchmark(tmp_path, n=6, model_args=SAME_ANSWER))
    state = benchmark(config, return_state=True)
    assert state.is_failed()
    assert isinstance(state.result(raise_on_failure=False), ResultsSuspect)
    assert "identical answer: '42'" in str(state.message)
