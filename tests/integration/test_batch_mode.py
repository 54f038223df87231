"""``[model] batch = true`` through the real command line, against a loopback batch API.

The stub (:mod:`tests.helpers.batch_stub`) speaks OpenAI's files + batches API and counts
what is submitted. Shown here:

- a run's requests go out as batches (none interactively), gathered up to ``batch_size``;
  each session gets its own answer, costs the batch price, and says it went by batch;
  a request the provider rejects is a session ERROR with the provider's message, an
  expired one an ERROR that ``ape retry`` redoes with a new batch;
- ``kill -9`` of ``ape run`` while its batch is in flight, then ``ape run`` again: the
  batch is collected, nothing is submitted again, and every item is saved once.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

pytest.importorskip("langchain_openai", reason="batch mode for provider 'openai' needs the 'openai' extra")

import openai  # noqa: E402

from ape.tasks.models.batch.clients import OpenAIBatchClient  # noqa: E402
from ape.tasks.models.batch.trust import request_hash  # noqa: E402
from tests.helpers.batch_stub import BatchStub  # noqa: E402
from tests.helpers.paths import REPO_ROOT  # noqa: E402
from tests.helpers.runner import make_benchmark, read_results  # noqa: E402

MODEL = """[model]
name = "batched"
provider = "openai"
model = "stub"
base_url = "{base_url}"
temperature = 0.0
batch = true
batch_size = {size}
batch_wait_s = {wait}
batch_poll_s = 0.2
price_input_per_mtok = 1.0
price_output_per_mtok = 2.0
max_retries = 0
"""
INTERACTIVE_COST = (12 * 1.0 + 5 * 2.0) / 1e6  # the stub's usage at the config's prices


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path)


def ape(*args: str, timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ape", *args], cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=timeout
    )


def saved(out: Path) -> dict[str, dict]:
    rows = read_results(out / "results.jsonl")
    ids = [row["item_id"] for row in rows]
    assert len(ids) == len(set(ids)), f"an item was saved twice: {sorted(ids)}"
    return {row["item_id"]: row["sessions"][0] for row in rows}


def ledger(out: Path) -> list[dict]:
    return read_results(out / "batches.jsonl")


@pytest.fixture
def stub() -> Iterator[BatchStub]:
    # i1 ("3 + 4") is rejected by the provider until the test lets it through; i2 ("4 + 7") expires
    server = BatchStub(delay_s=0.5)
    yield server
    server.close()


@pytest.mark.slow
def test_batch_run_errors_and_retry(tmp_path: Path, prefect_server: str, stub: BatchStub) -> None:
    rejected = {"on": True}
    stub.fail = lambda text: "prompt flagged by the provider's policy" if "3 + 4" in text and rejected["on"] else None
    stub.expire = lambda text: "4 + 7" in text and rejected["on"]
    model = MODEL.format(base_url=stub.base_url, size=4, wait=1.0)
    config = make_benchmark(tmp_path / "bench", n=6, models=model, run="solver_workers = 6")
    out = tmp_path / "bench" / "out"

    # the server is shared by this worker's tests: ask only for the logs written from here on
    since = datetime.now(UTC).isoformat()
    first = ape("run", str(config), "--no-server")
    assert first.returncode == 1, f"{first.stdout}\n{first.stderr}"  # two items errored
    assert stub.chat_calls == 0  # nothing went interactively
    assert (stub.submissions, stub.requests) == (2, 6)  # 6 requests, batch_size 4: two batches
    sessions = saved(out)
    assert {k: s["outcome"] for k, s in sessions.items()} == {
        "i0": "SOLVED",
        "i1": "ERROR",
        "i2": "ERROR",
        "i3": "SOLVED",
        "i4": "SOLVED",
        "i5": "SOLVED",
    }
    assert "prompt flagged by the provider's policy" in sessions["i1"]["error"]["message"]
    assert "batch_expired" in sessions["i2"]["error"]["message"]
    assert "ape retry" in sessions["i2"]["error"]["message"]
    solved = [s for s in sessions.values() if s["outcome"] == "SOLVED"]
    assert all(s["batch"] and s["cost"] == pytest.approx(INTERACTIVE_COST * 0.5) for s in solved)
    # the ledger: two batches submitted and ended, owner-only like the other outputs
    events = [row["event"] for row in ledger(out)]
    assert sorted(events) == ["ended", "ended", "submitted", "submitted", "submitting", "submitting"]
    for name in ("batches.jsonl", "batch_results.jsonl"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600, name
    assert "submitted, 4 requests" in first.stderr and "completed" in first.stderr  # state lines, not a frozen bar
    # ... which reach the model's flow run's logs in the UI too, and Prefect warns of nothing
    assert "without a flow run id" not in first.stdout + first.stderr
    # (the first 200 of every log on the server were other tests' once enough had run before)
    query = {"logs": {"timestamp": {"after_": since}}, "sort": "TIMESTAMP_ASC", "limit": 200}
    logs = httpx.post(f"{prefect_server}/logs/filter", json=query, timeout=30).json()
    batch_lines = [row for row in logs if ": submitted, " in row["message"]]
    assert len(batch_lines) == 2 and all(row["flow_run_id"] for row in batch_lines), logs
    report = json.loads((out / "report.json").read_text())
    assert report["leaderboard"][0]["batched"] == 6

    # the provider lets them through now: `ape retry` redoes the two errored items in one new batch
    rejected["on"] = False
    second = ape("retry", str(out), "--no-server")
    assert second.returncode == 0, f"{second.stdout}\n{second.stderr}"
    assert (stub.submissions, stub.requests) == (3, 8)
    assert all(s["outcome"] == "SOLVED" for s in saved(out).values())


@pytest.mark.slow
def test_kill_while_batch_in_flight_then_resume_submits_nothing(
    tmp_path: Path, prefect_server: str, stub: BatchStub
) -> None:
    stub.delay_s = 3600.0  # the batch stays in progress while the run is killed
    model = MODEL.format(base_url=stub.base_url, size=100, wait=1.0)
    config = make_benchmark(tmp_path / "bench", n=4, models=model, run="solver_workers = 4")
    out = tmp_path / "bench" / "out"

    proc = subprocess.Popen(
        [sys.executable, "-m", "ape", "run", str(config), "--no-server"],
        cwd=REPO_ROOT,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while not (out / "batches.jsonl").exists() or len(ledger(out)) < 2:
            assert proc.poll() is None, "ape run ended before its batch was submitted"
            assert time.monotonic() < deadline, "no batch was submitted"
            time.sleep(0.1)
        time.sleep(0.5)  # polling
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert (stub.submissions, stub.requests) == (1, 4)
    assert [row["event"] for row in ledger(out)] == ["submitting", "submitted"]
    assert not (out / "results.jsonl").exists() or not saved(out)  # nothing was answered yet

    stub.delay_s = 0.0  # the provider has finished the batch meanwhile
    again = ape("run", str(config), "--no-server")
    assert again.returncode == 0, f"{again.stdout}\n{again.stderr}"
    assert (stub.submissions, stub.requests, stub.chat_calls) == (1, 4, 0)  # collected, never paid twice
    assert "in flight from an earlier run" in again.stderr
    sessions = saved(out)
    assert sorted(sessions) == ["i0", "i1", "i2", "i3"]
    assert all(s["outcome"] == "SOLVED" and s["batch"] for s in sessions.values())
    assert [row["event"] for row in ledger(out)] == ["submitting", "submitted", "ended"]


@pytest.mark.slow
def test_waiting_batch_is_an_artifact_on_the_flow_run(tmp_path: Path, prefect_server: str, stub: BatchStub) -> None:
    """While the batch waits, the Prefect server holds the model's ``batched-batches`` artifact
    on the run's flow run, with the batch's id and counts; once it ended, the same artifact
    (updated in place) says done."""
    from tests.helpers.prefect_api import PrefectApi

    stub.delay_s = 3600.0  # in progress until the test lets it end
    model = MODEL.format(base_url=stub.base_url, size=100, wait=0.5)
    config = make_benchmark(tmp_path / "bench", n=3, models=model, run="solver_workers = 3")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ape", "run", str(config), "--no-server"],
        cwd=REPO_ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    api = PrefectApi(prefect_server)

    def latest() -> dict | None:
        response = api.get("/artifacts/batched-batches/latest")
        return response.json() if response.status_code == 200 else None

    try:
        deadline = time.monotonic() + 180
        while not ((found := latest()) and "in_progress" in found["data"]):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, f"no waiting batch in the artifact: {found}"
            time.sleep(0.3)
        batch_id = next(row["batch_id"] for row in ledger(tmp_path / "bench" / "out") if "batch_id" in row)
        assert found["data"].startswith("**waiting** for 1 of 1 batch(es)")
        assert f"`{batch_id}`" in found["data"] and "completed 0, failed 0, total 3" in found["data"]
        assert found["flow_run_id"] is not None and found["type"] == "markdown"
        run = api.get(f"/flow_runs/{found['flow_run_id']}").json()
        assert run["state"]["type"] == "RUNNING"  # shown while the run waits, not after

        stub.delay_s = 0.0  # the provider finishes
        output, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    done = latest()
    assert done is not None and done["id"] == found["id"]  # the same artifact, updated in place
    assert done["data"].startswith("**done**: all 1 batch(es)") and "completed 3, failed 0, total 3" in done["data"]


@pytest.mark.slow
def test_kill_between_accept_and_ledger_then_resume_adopts_the_batch(
    tmp_path: Path, prefect_server: str, stub: BatchStub
) -> None:
    """The process dies (SIGKILL, by the test hook) right after the provider accepted its batch,
    before the batch id reached the ledger. The next run finds the batch at the provider by
    the tag in its metadata and collects it: zero new submissions."""
    model = MODEL.format(base_url=stub.base_url, size=100, wait=1.0)
    config = make_benchmark(tmp_path / "bench", n=4, models=model, run="solver_workers = 4")
    out = tmp_path / "bench" / "out"
    env = dict(_env(), APE_BATCH_KILL_AFTER_SUBMIT="1")
    killed = subprocess.run(
        [sys.executable, "-m", "ape", "run", str(config), "--no-server"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert killed.returncode == -signal.SIGKILL, f"{killed.stdout}\n{killed.stderr}"
    assert (stub.submissions, stub.requests) == (1, 4)  # the provider has it, paid for
    assert [row["event"] for row in ledger(out)] == ["submitting"]  # the ledger has only the intent

    again = ape("run", str(config), "--no-server")
    assert again.returncode == 0, f"{again.stdout}\n{again.stderr}"
    assert (stub.submissions, stub.requests, stub.chat_calls) == (1, 4, 0)  # adopted, never paid twice
    assert "accepted by the provider but not recorded" in again.stderr
    sessions = saved(out)
    assert sorted(sessions) == ["i0", "i1", "i2", "i3"]
    assert all(s["outcome"] == "SOLVED" and s["batch"] for s in sessions.values())
    events = ledger(out)
    assert [row["event"] for row in events] == ["submitting", "submitted", "ended"]
    assert events[1]["adopted"] is True and events[1]["tag"] == events[0]["tag"]


@pytest.mark.slow
def test_a_batch_copy_answered_from_the_interactive_entrys_cache_costs_nothing(
    tmp_path: Path, prefect_server: str, stub: BatchStub
) -> None:
    """The same endpoint twice, the second with ``batch = true``: the second entry's sessions all
    come from the first's cache, so nothing is sent and nothing is spent; the report says so."""
    interactive = MODEL.replace('name = "batched"', 'name = "interactive"').replace("batch = true\n", "")
    models = interactive.replace("[model]", "[[model]]") + "\n" + MODEL.replace("[model]", "[[model]]")
    config = make_benchmark(
        tmp_path / "bench", n=4, models=models.format(base_url=stub.base_url, size=100, wait=0.2), run=""
    )
    out = tmp_path / "bench" / "out"

    done = ape("run", str(config), "--no-server")
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert stub.submissions == 0 and stub.chat_calls == 4  # the batch entry asked nothing
    rows = {row["model_id"]: row for row in json.loads((out / "report.json").read_text())["leaderboard"]}
    assert rows["interactive"]["total_cost"] == pytest.approx(4 * INTERACTIVE_COST)
    assert rows["interactive"]["cached"] == 0 and rows["interactive"]["cached_cost"] is None
    copy = rows["batched"]
    assert (copy["cached"], copy["batched"], copy["total_cost"]) == (4, 0, 0.0)
    assert copy["cached_cost"] == pytest.approx(4 * INTERACTIVE_COST * 0.5)  # what its batches would have cost
    line = "4 sessions of `batched` answered from `interactive`'s cache: no batch sent; `[run] cache = false`"
    board_md = (out / "leaderboard.md").read_text()
    assert line in board_md and line in done.stdout, board_md
    assert "| Cached | Batched | Saved by cache |" in done.stdout
    import pyarrow.parquet as pq

    sessions = pq.read_table(out / "sessions.parquet").to_pandas()
    copies = sessions[sessions["model_id"] == "batched"]
    assert copies["cost"].tolist() == [0.0] * 4 and copies["cached_cost"].notna().all()
    board = pq.read_table(out / "leaderboard.parquet").to_pandas().set_index("model_id")
    assert board.loc["batched", "cached_cost"] == pytest.approx(4 * INTERACTIVE_COST * 0.5)


def test_planted_batch_files_are_refused_and_the_items_asked_again(
    tmp_path: Path, prefect_server: str, stub: BatchStub
) -> None:
    """An output folder whose batch files were planted (copied from another run and edited):
    answer rows for a batch its ledger never submitted, and a ``submitted`` line naming
    someone else's batch at the provider, one that holds other requests. No planted answer
    is saved as the model's: each item is asked again in a new batch, the refusals are
    warned of and counted in the run's summary."""
    model = MODEL.format(base_url=stub.base_url, size=100, wait=1.0)
    config = make_benchmark(tmp_path / "bench", n=4, models=model, run="solver_workers = 4\ncache = false")
    out = tmp_path / "bench" / "out"
    first = ape("run", str(config), "--no-server")  # the run whose files are copied and edited
    assert first.returncode == 0, f"{first.stdout}\n{first.stderr}"
    assert (stub.submissions, stub.requests) == (1, 4)
    own = next(row for row in ledger(out) if row["event"] == "submitted")
    rows = read_results(out / "batch_results.jsonl")
    assert sorted(row["custom_id"] for row in rows) == sorted(own["custom_ids"])

    # the planted folder: no results yet; two answer rows of a batch its ledger does not hold,
    # and a ledger line naming a batch of the same size that another client submitted
    for name in ("results.jsonl", "metadata.json", "batches.jsonl", "batch_results.jsonl"):
        (out / name).unlink()
    other = openai.OpenAI(api_key="k", base_url=stub.base_url, max_retries=0)
    theirs = OpenAIBatchClient(other).submit([("x1", _question("100 + 1")), ("x2", _question("100 + 2"))], "ape-x")
    planted_rows, led = rows[:2], [row["custom_id"] for row in rows[2:]]
    forged = _openai_completion_text("The answer is 999.")
    with (out / "batch_results.jsonl").open("w") as handle:
        for row in planted_rows:
            handle.write(json.dumps({**row, "batch_id": "batch_planted", "body": forged}) + "\n")
    line = {"event": "submitted", "batch_id": theirs, "tag": "ape-x", "provider": "openai", "custom_ids": led}
    sent = dict(next(iter(stub.batches.values()))["requests"])  # what the first run sent: its bodies
    line["requests"] = {cid: request_hash(sent[cid]) for cid in led}  # the forger computes them too
    (out / "batches.jsonl").write_text(json.dumps(line) + "\n")
    before = stub.submissions

    again = ape("run", str(config), "--no-server")
    assert again.returncode == 0, f"{again.stdout}\n{again.stderr}"
    sessions = saved(out)
    assert {k: s["outcome"] for k, s in sessions.items()} == dict.fromkeys(["i0", "i1", "i2", "i3"], "SOLVED")
    assert all("answer is 999" not in json.dumps(s) for s in sessions.values())
    assert (stub.submissions - before, stub.requests) == (1, 2 + 4 + 4)  # one new batch with all four
    assert "2 answer row(s) refused" in again.stderr
    assert f"batch {theirs} of batched (from" in again.stderr and "refused" in again.stderr
    assert "3 batch(es) or answer row(s)" in again.stderr
    assert [row["event"] for row in ledger(out)] == ["submitted", "refused", "submitting", "submitted", "ended"]


def _question(text: str) -> dict:
    return {"model": "stub", "messages": [{"role": "user", "content": f"What is {text}?"}]}


def _openai_completion_text(text: str) -> dict:
    return {
        "id": "chatcmpl-planted",
        "object": "chat.completion",
        "created": 0,
        "model": "stub",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    }
