"""`prefect flow-run retry` of a failed benchmark run redoes only the errored item."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.runner import make_benchmark, read_results

pytestmark = pytest.mark.slow


def test_prefect_flow_run_retry_redoes_only_errored_items(tmp_path, prefect_server):
    heal, calls = tmp_path / "healed", tmp_path / "calls.log"
    model = (
        f'[model]\nname = "flaky"\nclass = "benchschema:Flaky"\nmax_retries = 0\n'
        f'args = {{ fail_marker = "5 + 10", heal_file = "{heal}", call_log = "{calls}" }}\n'
    )
    config = make_benchmark(tmp_path, n=6, models=model)
    env = dict(os.environ, PREFECT_API_URL=prefect_server, PYTHONPATH="")
    first = subprocess.run(
        [sys.executable, "-m", "ape", "run", str(config), "--no-server"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 1, first.stdout + first.stderr
    assert "1 of 6 items of flaky errored" in first.stderr
    flow_run_id = re.search(r"runs/flow-run/([0-9a-f-]{36})", first.stderr).group(1)
    assert len(calls.read_text().splitlines()) == 6

    heal.write_text("ok")
    retry = subprocess.run(
        # the prefect CLI of this interpreter (a `prefect` on PATH may belong to another install)
        [
            sys.executable,
            "-m",
            "prefect",
            "flow-run",
            "retry",
            flow_run_id,
            "--entrypoint",
            "ape.flows.benchmark:benchmark",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert retry.returncode == 0, retry.stdout + retry.stderr
    # only the errored item asked the model again
    assert calls.read_text().splitlines()[6:] == ["What is 5 + 10?"]
    rows = read_results(tmp_path / "out" / "results.jsonl")
    assert sorted(b["item_id"] for b in rows) == [f"i{i}" for i in range(6)]
    assert all(s["outcome"] == "SOLVED" for b in rows for s in b["sessions"])
