"""A config larger than Prefect's limit on a flow run's parameters (512 kB by default) runs:
the flows receive it by reference (:mod:`ape.tasks.storage.config_ref`), a real ``ape run``
against a real Prefect server, with 1.2 MB of scripted answers in its config."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import start_ape, stop_group
from tests.helpers.runner import make_benchmark

ITEMS = 6
PADDING = 200_000  # characters of each scripted answer before its number


def test_a_config_over_a_megabyte_runs_through_a_real_server(tmp_path: Path, prefect_server: str) -> None:
    answers = ", ".join(f'i{i} = "{"x" * PADDING} {(i + 2) + (3 * i + 1)}"' for i in range(ITEMS))
    config = make_benchmark(
        tmp_path / "bench", ITEMS, model_args=f'behaviour = "scripted", responses = {{ {answers} }}'
    )
    assert config.stat().st_size > 1_000_000
    home = tmp_path / "ape-home"
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, PREFECT_API_URL=prefect_server, APE_HOME=str(home))
    proc = start_ape(config, "--no-server", env=env)
    try:
        output, _ = proc.communicate(timeout=300)
    finally:
        stop_group(proc, timeout=30)
    assert proc.returncode == 0, output[-3000:]
    records = [json.loads(line) for line in (config.parent / "out" / "results.jsonl").read_text().splitlines()]
    outcomes = [session["outcome"] for record in records for session in record["sessions"]]
    assert len(records) == ITEMS and outcomes == ["SOLVED"] * ITEMS, outcomes
    stored = list((home / "configs").glob("*.json"))
    assert stored, "the flows did not receive the config by reference"
    assert stat.S_IMODE((home / "configs").stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in stored)
