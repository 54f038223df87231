"""Crash safety: SIGKILL a real `ape run` mid-run, rerun it, lose and repeat nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.runner import make_benchmark, read_results

pytestmark = pytest.mark.slow


def ape_run(config, env, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "ape", "run", str(config), "--no-server"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        **kw,
    )


def complete_lines(path):
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]


def test_sigkill_mid_run_then_resume(tmp_path, prefect_server, kill_at_end):
    log = tmp_path / "calls.log"
    config = make_benchmark(
        tmp_path,
        n=40,
        model_args=f'behaviour = "arithmetic", latency_s = 0.15, call_log = "{log}"',
        run="solver_workers = 2",
    )
    env = dict(os.environ, PREFECT_API_URL=prefect_server, PYTHONPATH=str(REPO_ROOT))
    results = tmp_path / "out" / "results.jsonl"
    proc = kill_at_end(ape_run(config, env))
    deadline = time.monotonic() + 120
    while len(complete_lines(results)) < 8:
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "the run saved too little in time"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    saved_before = {b["item_id"]: b for b in complete_lines(results)}
    assert 8 <= len(saved_before) < 40
    calls_before = log.read_text().splitlines()

    again = kill_at_end(ape_run(config, env))
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out.decode()[-3000:]

    rows = read_results(results)
    ids = [b["item_id"] for b in rows]
    assert sorted(ids) == sorted(f"i{i}" for i in range(40)), "an item was lost or duplicated"
    assert len(ids) == len(set(ids))
    # no session finished before the kill asked the model again
    questions = {
        json.loads(line)["question"]: json.loads(line)["id"]
        for line in (tmp_path / "data.jsonl").read_text().splitlines()
    }
    new_calls = [json.loads(line) for line in log.read_text().splitlines()[len(calls_before) :]]
    recalled = {questions[q] for c in new_calls for q in questions if q + "?" in c["human"]}
    assert not recalled & set(saved_before), recalled & set(saved_before)
    # every unsaved item is asked once; one whose session finished just before the kill
    # (cached, but its batch not yet saved) is not asked again at all
    window = 4 * 2
    assert 40 - len(saved_before) - window <= len(new_calls) <= 40 - len(saved_before)
    meta = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert sorted(meta["completed_ids"]) == sorted(ids)
