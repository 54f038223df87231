"""An unreachable endpoint through the real command line.

- ``base_url`` at a closed port on the loopback: ``ape run`` stops at preflight with exit
  code 2 and one line naming the model, the URL and the cause, within seconds, before any
  session of any model (before, every session ran to an error after its retries and the
  model was ranked with 0.000);
- an endpoint that is there for the preflight request but drops every chat request (a
  real loopback server): every session errors, the session errors name the URL, the
  terminal shows the error once with its count, and the model is listed apart: not on the
  leaderboard, in no pairwise row, and the mocks' ranks and groups are their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("langchain_openai", reason="an openai model needs the 'openai' extra")

from tests.helpers.fake_openai import DROP, LoopbackEndpoint  # noqa: E402
from tests.helpers.paths import REPO_ROOT  # noqa: E402
from tests.helpers.processes import free_port  # noqa: E402
from tests.helpers.runner import make_benchmark  # noqa: E402

MOCKS = """[[model]]
name = "careful"
provider = "mock"
args = { behaviour = "arithmetic", accuracy = 1.0, seed = 1 }

[[model]]
name = "sloppy"
provider = "mock"
args = { behaviour = "arithmetic", accuracy = 0.5, seed = 2 }
"""
OPENAI = """[[model]]
name = "dead"
provider = "openai"
model = "local"
base_url = "{base_url}"
max_retries = 2
retry_initial_s = 0.01
retry_max_s = 0.02
timeout_s = 10
"""


def ape(*args: str, cwd: Path, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "ape", *args],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_a_closed_port_stops_the_run_at_preflight_naming_the_url(tmp_path: Path) -> None:
    base_url = f"http://127.0.0.1:{free_port()}/v1"  # bound and closed: nothing listens
    config = make_benchmark(tmp_path / "bench", n=6, models=MOCKS + OPENAI.format(base_url=base_url))
    started = time.perf_counter()
    done = ape("run", str(config), "--no-server", cwd=tmp_path)
    elapsed = time.perf_counter() - started
    assert done.returncode == 2, f"{done.stdout}\n{done.stderr}"
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    (line,) = errors
    assert "config.toml" in line and "[model] 'dead' base_url" in line
    assert f"{base_url} is unreachable: connection refused" in line
    assert f"GET {base_url}/models" in line
    assert elapsed < 60, f"{elapsed:.1f} s"  # a Python start and one refused connection, not 85 s of retries
    out = tmp_path / "bench" / "out"
    assert not list(out.rglob("results.jsonl")) if out.exists() else True  # no session of any model ran


class DroppingEndpoint(LoopbackEndpoint):
    """There for the preflight request (a GET, answered 501 by the base class) and then gone
    for every chat request: each connection closes without an answer."""

    def __init__(self) -> None:
        super().__init__(lambda request: DROP)


@pytest.fixture
def dropping() -> Iterator[DroppingEndpoint]:
    server = DroppingEndpoint()
    yield server
    server.close()


@pytest.mark.slow
def test_a_model_whose_every_session_errored_is_listed_apart(
    tmp_path: Path, prefect_server: str, dropping: DroppingEndpoint
) -> None:
    config = make_benchmark(tmp_path / "bench", n=12, models=MOCKS + OPENAI.format(base_url=dropping.base_url))
    done = ape("run", str(config), "--no-server", cwd=tmp_path)
    assert done.returncode == 1, f"{done.stdout}\n{done.stderr}"  # errored items fail the run, as before
    assert dropping.requests, "the endpoint was never asked"
    url = f"{dropping.base_url}/chat/completions"

    report = json.loads((tmp_path / "bench" / "out" / "report.json").read_text())
    assert [row["model_id"] for row in report["leaderboard"]] == ["careful", "sloppy"]
    assert [row["rank"] for row in report["leaderboard"]] == [1, 2]
    assert all(row["rank_high"] <= 2 for row in report["leaderboard"])
    (dead,) = report["unranked"]
    assert dead["model_id"] == "dead" and dead["n_items"] == 12 and dead["n_sessions"] == 12
    assert url in dead["error"] and dead["error_sessions"] == 12
    assert [(p["model_a"], p["model_b"]) for p in report["pairwise"]] == [("careful", "sloppy")]

    board = (tmp_path / "bench" / "out" / "leaderboard.md").read_text()
    ranked, _, apart = board.partition("## No result (not ranked)")
    assert apart and "`dead`" in apart and url in apart
    assert "| `dead` |" not in ranked
    assert "## No result (not ranked)" in done.stdout  # the printed leaderboard is the same file

    # the terminal: the error once (naming the URL), then its count; run.log holds all twelve
    errors = [line for line in done.stderr.splitlines() if "session error:" in line]
    assert len(errors) == 1 and url in errors[0], done.stderr
    assert "dead: the same session error on 12 sessions" in done.stderr
    retries = [line for line in done.stderr.splitlines() if "retrying in" in line]
    assert len(retries) == 1 and url in retries[0], done.stderr
    assert "dead: 24 retries after the same error" in done.stderr
    run_log = (tmp_path / "bench" / "out" / "dead" / "run.log").read_text()
    assert run_log.count("session error:") == 12
