"""After ``ape run`` reports done, the Prefect server APE started holds every session's task
run in a final state and the stage chains docs/server.md promises (ape.tasks.recording).

Runs of 200 and 4,000 instant-model items with 16 solver workers: fast enough that,
before the fix, the server's in-memory broker dropped most of the 4,000-item run.
The counts are taken the moment the command returns, without waiting.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ape.tasks import recording
from tests.helpers.processes import free_port
from tests.helpers.runner import make_benchmark


@pytest.fixture(scope="module")
def ape_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A server started the way ``ape run`` starts one (APE's settings); the env to reach it."""
    from ape import server

    home = tmp_path_factory.mktemp("ape-home")
    env = dict(os.environ, APE_HOME=str(home), APE_SERVER_PORT=str(free_port()))
    env.pop("PREFECT_API_URL", None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("APE_HOME", env["APE_HOME"])
        patch.setenv("APE_SERVER_PORT", env["APE_SERVER_PORT"])
        patch.delenv("PREFECT_API_URL", raising=False)
        info = server.start()
        try:
            yield dict(env, API=info.api_url, AUTH=server.auth_string(info.home))
        finally:
            server.stop()


def _count(ape_server: dict[str, str], name: str, types: tuple[str, ...] = recording.FINAL_TYPES) -> int:
    """What APE's server holds, asked with its credentials (and a CSRF token) as a client must."""
    from ape import server

    body = {"task_runs": {"name": {"like_": name}, "state": {"type": {"any_": list(types)}}}}
    with server.api_session(ape_server["API"], timeout=60, auth=ape_server["AUTH"]) as session:
        response = session.post("/task_runs/count", json=body)
    response.raise_for_status()
    return int(response.json())


def _run(folder: Path, n: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``ape run`` of n instant-model items (ids r<n>x0, r<n>x1, ...) with 16 solver workers."""
    make_benchmark(
        folder,
        n,
        model_args='behaviour = "arithmetic", latency_s = 0.0',
        run="solver_workers = 16",
        id_prefix=f"r{n}x",
    )
    return subprocess.run(
        [sys.executable, "-m", "ape", "run", "config.toml"],
        cwd=folder,
        env={k: v for k, v in env.items() if k not in ("API", "AUTH")},
        capture_output=True,
        text=True,
        timeout=1200,
    )


@pytest.mark.slow
@pytest.mark.parametrize("n", [200, 4000])
def test_the_server_holds_the_whole_run_when_ape_run_returns(
    n: int, ape_server: dict[str, str], tmp_path: Path
) -> None:
    done = _run(tmp_path / "bench", n, ape_server)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    prefix = f"[r{n}x"
    # every session's live task run, finished
    assert _count(ape_server, f"session{prefix}") == n
    assert _count(ape_server, f"session{prefix}", recording.OPEN_TYPES) == 0
    # every stage of the first FULL_CHAINS sessions, then (all passing) one in SAMPLE_EVERY
    full = min(n, recording.FULL_CHAINS)
    chains = full + -(-(n - full) // recording.SAMPLE_EVERY)
    for stage in ("render", "solve", "adapt", "check", "score"):
        assert _count(ape_server, f"{stage}{prefix}") == chains, stage
    assert _count(ape_server, prefix, recording.OPEN_TYPES) == 0
