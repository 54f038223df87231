"""The Prefect runner end to end against a real Prefect server: saving, resume,
caching (counted model calls), failures and retries, stage granularity."""

from __future__ import annotations

import json

import pytest

from ape.config import load_config
from tests.helpers import mock_calls
from tests.helpers.runner import make_benchmark, plugin_module, read_results

pytestmark = pytest.mark.usefixtures("prefect_server")


def run(path, **overrides):
    from ape.flows.benchmark import benchmark

    config = load_config(path, overrides)
    return config, benchmark(config, return_state=True)


def calls(name="m"):
    return mock_calls.chat_calls(name)


def test_run_saves_batches_transcripts_metadata_and_report(tmp_path):
    path = make_benchmark(
        tmp_path, n=6, extra='[hooks]\non_batch_saved = "benchschema:remember"', run="runs_per_data = 2"
    )
    config, state = run(path)
    assert state.is_completed(), state
    out = config.run.output
    batches = read_results(out / "results.jsonl")
    assert sorted(b["item_id"] for b in batches) == [f"i{i}" for i in range(6)]
    assert all(len(b["sessions"]) == 2 for b in batches)
    assert all(s["outcome"] == "SOLVED" and s["correct"] for b in batches for s in b["sessions"])
    meta = json.loads((out / "metadata.json").read_text())
    assert sorted(meta["completed_ids"]) == [f"i{i}" for i in range(6)]
    assert meta["solver_config"]["max_steps"] == config.solver.max_steps
    lines = (out / "sessions.jsonl").read_text().splitlines()
    assert len(lines) == 12
    assert json.loads(lines[0])["entries"][-1]["kind"] == "SESSION_END"
    assert (out / "sessions.log").read_text().count("SESSION_END") == 12
    assert (out / "run.log").read_text().strip()
    envelope = json.loads((out / "report.json").read_text())
    assert envelope["summary"]["tasks"] == 6 and envelope["error"] is None
    assert sorted(plugin_module(path).SAVED) == [f"i{i}" for i in range(6)]
    # the UI shows the run by benchmark and model, with the leaderboard as an artifact
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        assert client.read_flow_run(state.state_details.flow_run_id).name == "t · m"
        keys = {
            a.key
            for a in client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["t-leaderboard", "t-calibration"]))
            )
        }
    assert keys == {"t-leaderboard", "t-calibration"}
    # every session is a task run in the UI, named after stage and item (none is lost)
    import time

    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterParentFlowRunId,
        TaskRunFilter,
        TaskRunFilterName,
    )

    deadline = time.monotonic() + 30
    while True:
        with get_client(sync_client=True) as client:
            child = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[state.state_details.flow_run_id])
                )
            )
            names = {
                t.name
                for t in client.read_task_runs(
                    flow_run_filter=FlowRunFilter(id={"any_": [r.id for r in child]}),
                    task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_="solve[")),
                    limit=200,
                )
            }
        if len(names) == 12 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert names == {f"solve[i{i}]#{r}" for i in range(6) for r in range(2)}


def test_resume_and_cache_count_model_calls(tmp_path):
    path = make_benchmark(tmp_path, n=5)
    before = calls()
    config, state = run(path)
    first = calls() - before
    assert state.is_completed() and first >= 5
    # a rerun resumes from the save file: nothing to do
    _, state = run(path)
    assert state.is_completed() and calls() - before == first
    # load_save = false starts afresh, but every generation is cached
    _, state = run(path, **{"run.load_save": False})
    assert state.is_completed() and calls() - before == first
    rows = read_results(config.run.output / "results.jsonl")
    assert len(rows) == 5 and all(s["cached"] for b in rows for s in b["sessions"])
    # starting afresh moves old results and transcripts aside rather than mixing them in
    assert len((config.run.output / "sessions.jsonl").read_text().splitlines()) == 5
    assert (config.run.output / "sessions.jsonl.bak").is_file()
    # a changed checker re-scores cached generations without calling the model
    path.write_text(
        path.read_text().replace('implementation = "exact_match"', 'implementation = "benchschema:check_always_fails"')
    )
    _, state = run(path, **{"run.load_save": False})
    assert state.is_completed() and calls() - before == first
    rows = read_results(config.run.output / "results.jsonl")
    assert all(not s["correct"] and s["check"]["status"] == "FAILED" for b in rows for s in b["sessions"])
    # a changed prompt calls the model again
    path.write_text(path.read_text().replace("What is {{ question }}?", "Compute {{ question }}."))
    _, state = run(path, **{"run.load_save": False})
    assert state.is_completed() and calls() - before == 2 * first
    # and so does a changed solver setting
    path.write_text(path.read_text().replace("[checker]", "[solver]\nmax_steps = 3\n\n[checker]"))
    _, state = run(path, **{"run.load_save": False})
    assert state.is_completed() and calls() - before == 3 * first


FLAKY_MODEL = """[model]
name = "flaky"
class = "benchschema:Flaky"
args = {{ fail_marker = "5 + 10", heal_file = "{heal}" }}
max_retries = 0
"""


def test_errored_items_fail_the_flow_and_a_rerun_redoes_only_them(tmp_path):
    heal = tmp_path / "healed"
    path = make_benchmark(tmp_path, n=6, models=FLAKY_MODEL.format(heal=heal))
    config, state = run(path)
    assert state.is_failed()
    assert "1 of 6 items of flaky errored" in str(state.result(raise_on_failure=False))
    out = config.run.output
    rows = {b["item_id"]: b for b in read_results(out / "results.jsonl")}
    assert len(rows) == 6
    bad = rows["i3"]["sessions"][0]
    assert bad["outcome"] == "ERROR" and bad["error"]["type"] == "ConnectionError"
    assert json.loads((out / "metadata.json").read_text())["errored_ids"] == ["i3"]
    assert (out / "report.json").exists()  # the report is built even when items failed
    calls_log = plugin_module(path).CALLS  # every prompt the Flaky model was sent, in order
    asked_before = len(calls_log)
    heal.write_text("ok")
    _, state = run(path)
    assert state.is_completed()
    assert calls_log[asked_before:] == ["What is 5 + 10?"]  # only the errored item called the model
    rows = read_results(out / "results.jsonl")
    assert sorted(b["item_id"] for b in rows) == [f"i{i}" for i in range(6)]
    assert all(s["outcome"] == "SOLVED" for b in rows for s in b["sessions"])
    assert json.loads((out / "metadata.json").read_text())["errored_ids"] == []


def test_fail_on_error_share_tolerates_errors(tmp_path):
    path = make_benchmark(tmp_path, n=6, models=FLAKY_MODEL.format(heal=tmp_path / "never"), run="fail_on_error = 0.2")
    _, state = run(path)
    assert state.is_completed()


def test_stage_granularity_gives_the_same_results(tmp_path):
    a = make_benchmark(tmp_path / "a", n=4, model_args='behaviour = "arithmetic", accuracy = 0.5, seed = 3')
    b = make_benchmark(
        tmp_path / "b",
        n=4,
        model_args='behaviour = "arithmetic", accuracy = 0.5, seed = 3',
        run='task_granularity = "stage"',
    )
    ca, sa = run(a)
    cb, sb = run(b)
    assert sa.is_completed() and sb.is_completed()

    def scores(config):
        return {
            (b["item_id"], s["run_index"]): (s["outcome"], s["score"], s["solution"])
            for b in read_results(config.run.output / "results.jsonl")
            for s in b["sessions"]
        }

    assert scores(ca) == scores(cb)
    assert len({v[1] for v in scores(ca).values()}) == 2  # some right, some wrong


def test_checker_tool_borrows_from_the_shared_carousel(tmp_path):
    """With expose_as_tool, sessions get the checker tool backed by the run's checker_workers
    instances, not a fresh checker each."""
    path = make_benchmark(
        tmp_path,
        n=6,
        run="runs_per_data = 2\nchecker_workers = 2",
        checker='implementation = "benchschema:CountingChecker"\nexpose_as_tool = true',
    )
    config, state = run(path)
    assert state.is_completed(), state
    rows = read_results(config.run.output / "results.jsonl")
    assert all(s["correct"] for b in rows for s in b["sessions"])
    made = plugin_module(path).CountingChecker.made
    assert made <= 2 + 1  # the carousel's two, and the probe that validated the config
