"""Scale-out: the same benchmark on a two-worker Dask LocalCluster gives the thread runner's results."""

from __future__ import annotations

import json

import pytest

from ape.config import load_config
from tests.helpers.runner import make_benchmark, read_results

pytest.importorskip("prefect_dask")
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_server")]


def test_dask_local_cluster_matches_thread_runner(tmp_path):
    from ape.flows.benchmark import benchmark

    args = 'behaviour = "arithmetic", accuracy = 0.6, seed = 5'
    threads = make_benchmark(tmp_path / "threads", n=8, model_args=args, run="runs_per_data = 2")
    dask = make_benchmark(
        tmp_path / "dask", n=8, model_args=args, run='runs_per_data = 2\ntask_runner = "dask"\ndask_workers = 2'
    )
    results = {}
    for name, path in (("threads", threads), ("dask", dask)):
        config = load_config(path)
        state = benchmark(config, return_state=True)
        assert state.is_completed(), state
        rows = read_results(config.run.output / "results.jsonl")
        assert len(rows) == 8
        results[name] = {
            (b["item_id"], s["run_index"]): (s["outcome"], s["solution"], s["score"])
            for b in rows
            for s in b["sessions"]
        }
        transcripts = (config.run.output / "sessions.jsonl").read_text().splitlines()
        assert len(transcripts) == 16
        assert all(json.loads(line)["entries"][-1]["kind"] == "SESSION_END" for line in transcripts)
        # every session's chain counted where the run's summary is, also from the Dask workers
        chains = json.loads((config.run.output / "stage_chains.json").read_text())
        (run,) = chains["flow_runs"]
        assert run["chains_recorded"] + len(run["left_out"]) == 16, (name, run)
    assert results["dask"] == results["threads"]
    assert {v[2] for v in results["dask"].values()} == {0.0, 1.0}


def test_dask_without_a_server_is_a_clear_error(tmp_path, monkeypatch):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from ape.flows.feeders import dask_task_runner
    from ape.schemas.errors import ApeError

    config = load_config(make_benchmark(tmp_path, run='task_runner = "dask"'))
    with temporary_settings({PREFECT_API_URL: None}):
        with pytest.raises(ApeError, match="needs a Prefect server"):
            dask_task_runner(config)
