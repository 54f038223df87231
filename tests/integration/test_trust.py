"""End to end against a real Prefect server: session cost and the max_cost budget (stop,
resume), clustered intervals from [data] cluster_field, provenance in metadata.json and
report.json, owner-only outputs, and the expected value of failed checks."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest

from ape.config import load_config
from tests.helpers import mock_calls
from tests.helpers.runner import make_benchmark, read_results

pytestmark = pytest.mark.usefixtures("prefect_server")

PRICED = (
    '[model]\nname = "m"\nprovider = "mock"\nargs = {{ behaviour = "arithmetic", accuracy = 0.5, '
    "seed = 3 }}\nprice_input_per_mtok = 1000000\nprice_output_per_mtok = 2000000\n"
)


def run(path, **overrides):
    from ape.flows.benchmark import benchmark

    config = load_config(path, overrides)
    return config, benchmark(config, return_state=True)


def test_max_cost_stops_cleanly_and_a_higher_budget_resumes(tmp_path):
    path = make_benchmark(tmp_path, n=6, models=PRICED.format(), run="solver_workers = 1\nwindow = 1\nmax_cost = 1.0")
    config, state = run(path)
    assert state.is_failed()
    message = str(state.result(raise_on_failure=False))
    assert message.startswith("budget reached:") and "5 item(s) of m not run" in message
    out = config.run.output
    first = read_results(out / "results.jsonl")
    assert [b["item_id"] for b in first] == ["i0"]
    session = first[0]["sessions"][0]
    # one token costs 1 (input) or 2 (output) at these prices
    assert session["cost"] == session["input_tokens"] * 1.0 + session["output_tokens"] * 2.0 > 1.0
    assert (out / "report.json").exists()  # the report covers what was saved

    before = mock_calls.chat_calls("m")
    config, state = run(path, **{"run.max_cost": 1000.0})
    assert state.is_completed(), state
    assert mock_calls.chat_calls("m") - before == 5  # the saved item was not redone
    rows = read_results(out / "results.jsonl")
    assert sorted(b["item_id"] for b in rows) == [f"i{i}" for i in range(6)]
    report = json.loads((out / "report.json").read_text())
    costs = [s["cost"] for b in rows for s in b["sessions"]]
    board = report["leaderboard"][0]
    assert board["total_cost"] == pytest.approx(sum(costs))
    correct = sum(s["correct"] for b in rows for s in b["sessions"])
    assert board["cost_per_correct"] == pytest.approx(sum(costs) / correct)
    assert "| Cost | Cost/correct |" in (out / "leaderboard.md").read_text()


def test_clusters_provenance_file_modes_and_expected_values(tmp_path):
    path = make_benchmark(tmp_path, n=8, models=PRICED.format(), run="runs_per_data = 2")
    path.write_text(
        path.read_text().replace(
            'category_field = "category"', 'category_field = "category"\ncluster_field = "category"'
        )
    )
    config, state = run(path)
    assert state.is_completed(), state
    out = config.run.output

    sessions = pd.read_parquet(out / "sessions.parquet")
    assert set(sessions["cluster"]) == {"even", "odd"}
    failed = sessions[sessions["check_status"] == "FAILED"]
    assert len(failed), "accuracy 0.5 should fail some checks"
    data = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "data.jsonl").open()}
    for row in failed.itertuples():
        assert row.expected == str(data[row.item_id]["answer"])
    assert sessions.loc[sessions["check_status"] == "PASSED", "expected"].isna().all()
    log = (out / "sessions.log").read_text()
    some = failed.iloc[0]
    assert f'"expected": "{some.expected}"' in log
    assert '"cost": ' in log  # SESSION_END carries the session's cost

    report = json.loads((out / "report.json").read_text())
    row = report["leaderboard"][0]
    assert row["ci_method"] == "wilson-clustered"
    assert row["n_effective"] <= 16

    meta = json.loads((out / "metadata.json").read_text())
    provenance = meta["provenance"]
    assert provenance["data_sha256"] == hashlib.sha256((tmp_path / "data.jsonl").read_bytes()).hexdigest()
    assert provenance["config_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert provenance["seeds"]["models"] == {"m": 3}
    assert provenance["packages"]["prefect"] and provenance["ape_version"]
    assert report["summary"]["provenance"]["runs"]["m"]["data_sha256"] == provenance["data_sha256"]

    # owner-only whatever the test process's umask (tests/integration/test_output_modes.py
    # walks a whole run's folder); atomically written files included, not only appended ones
    for name in ("report.json", "metadata.json", "leaderboard.md", "results.jsonl"):
        assert (out / name).stat().st_mode & 0o777 == 0o600, name


def test_a_run_the_budget_stopped_still_lists_the_chains_it_left_out(tmp_path, monkeypatch):
    # the list `ape record` works from is written however the loop ended, a stop on
    # [run] max_cost included
    from ape.tasks.recording import server as recording
    from ape.tasks.storage.stage_chains import read_chains

    monkeypatch.setattr(recording, "CHAIN_MAX_LAG", 0)  # no room for plain chains
    models = PRICED.format().replace("accuracy = 0.5", "accuracy = 1.0")  # plain chains only
    path = make_benchmark(
        tmp_path, n=6, models=models, run="solver_workers = 1\nwindow = 1\nmax_cost = 1.0", id_prefix="stopped-"
    )
    config, state = run(path)
    assert state.is_failed() and "budget reached" in str(state.message)
    chains = read_chains(config.run.output)
    assert chains is not None
    left_out = [entry.item_id for flow_run in chains.flow_runs for entry in flow_run.left_out]
    assert left_out == ["stopped-0"]  # the one item saved before the stop
