"""A model's limits are the Prefect server's: shared by runs, changed live (ape.tasks.models.limits.server).

Two real ``ape run`` processes against one real Prefect server and one real OpenAI-compatible
endpoint on the loopback (a threaded HTTP server in this test process, so it counts the
requests in flight across both runs as they arrive):

- the first run creates the limit ``ape:127.0.0.1:<port>:shared`` with its config's 4; the
  second run's config asks for 6, and the server's 4 holds: one line says so and both runs'
  ``metadata.json`` records which value held and why;
- while both runs go, never more than 4 requests are in flight together (before, each
  process had its own limiter of 4 and 6: up to 10 at once): the second run is refused while
  the first holds every slot (its calls held by the endpoint), and says so (a Prefect
  variable, for turns);
- ``prefect gcl update NAME --limit 8`` mid-run: 8 requests are in flight within seconds,
  without a restart, and the change is in the run's metadata.
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

from ape.tasks.models.limits.server import waiting_variable  # noqa: E402
from tests.helpers.counting_endpoint import CountingEndpoint
from tests.helpers.paths import REPO_ROOT  # noqa: E402
from tests.helpers.prefect_api import PrefectApi  # noqa: E402
from tests.helpers.processes import start_ape, stop_group  # noqa: E402
from tests.helpers.runner import make_benchmark  # noqa: E402

LATENCY_S = 0.25
ITEMS = 300  # per run: at 4 in flight together, about 40 s of requests
MODEL = """[model]
name = "{name}"
provider = "openai"
model = "shared"
base_url = "{base_url}"
api_key_env = "APE_GCL_KEY"
max_concurrency = {limit}
timeout_s = 30
"""


@pytest.fixture
def endpoint() -> Iterator[CountingEndpoint]:
    counting = CountingEndpoint(LATENCY_S)  # held until go: the first run waits for the second
    try:
        yield counting
    finally:
        counting.close()


def _start(config: Path, key: str, api: str) -> subprocess.Popen[str]:
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return start_ape(config, "--no-server", env=dict(os.environ, PYTHONPATH=path, APE_GCL_KEY=key, PREFECT_API_URL=api))


def _limit(api: PrefectApi, name: str) -> dict | None:
    response = api.get(f"/v2/concurrency_limits/{name}")
    return response.json() if response.status_code == 200 else None


def test_two_runs_share_the_servers_limit_and_a_change_reaches_them_live(
    prefect_server: str, endpoint: CountingEndpoint, tmp_path: Path
) -> None:
    base_url = endpoint.base_url
    name = f"ape:127.0.0.1:{base_url.split(':')[2].split('/')[0]}:shared"
    run = "solver_workers = 16\n"
    first = make_benchmark(tmp_path / "a", n=ITEMS, run=run, models=MODEL.format(name="a", base_url=base_url, limit=4))
    second = make_benchmark(
        tmp_path / "b", n=ITEMS, run=run, models=MODEL.format(name="b", base_url=base_url, limit=6), id_prefix="j"
    )
    procs: list[subprocess.Popen[str]] = []
    with PrefectApi(prefect_server) as api:
        try:
            procs.append(_start(first, "key-a", prefect_server))
            deadline = time.monotonic() + 180
            while _limit(api, name) is None:  # the first run creates it with its config's 4
                assert procs[0].poll() is None, procs[0].communicate()[0]
                assert time.monotonic() < deadline, "the first run never created the limit"
                time.sleep(0.2)
            assert _limit(api, name)["limit"] == 4
            procs.append(_start(second, "key-b", prefect_server))
            deadline = time.monotonic() + 180
            while api.get(f"/variables/name/{waiting_variable(name)}").status_code != 200:
                # the second run is refused: the first holds every slot (its requests are held)
                assert procs[1].poll() is None, procs[1].communicate()[0]
                assert time.monotonic() < deadline, "the second run never said it waits"
                time.sleep(0.2)
            # both runs going, the second refused: the first holds the server's 4, held by the endpoint
            assert endpoint.peak == 4 and all(key != "Bearer key-b" for _, key in endpoint.arrivals), endpoint.peaks
            changed = subprocess.run(
                [sys.executable, "-m", "prefect", "gcl", "update", name, "--limit", "8"],
                env=dict(os.environ, PREFECT_API_URL=prefect_server),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert changed.returncode == 0, changed.stdout + changed.stderr
            assert all(proc.poll() is None for proc in procs), "a run ended before the update"
            reached = endpoint.wait_for(8, timeout_s=15)
            assert reached is not None, f"8 in flight never reached after the update (peak {endpoint.peak})"
            endpoint.go.set()  # the calls end; both runs go on to the end
            outputs = [proc.communicate(timeout=300)[0] for proc in procs]
        finally:
            for proc in procs:
                stop_group(proc, 5)
        assert endpoint.peak == 8, endpoint.peaks  # never beyond the server's limit
        for proc, output in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, output
        # the second run's 6 did not override the server's 4: one line says which value holds
        assert "the server's limit" in outputs[1] and "is 4, [model] max_concurrency is 6" in outputs[1], outputs[1]
        assert "the server's value holds" in outputs[1]
        meta = [json.loads((cfg.parent / "out" / "metadata.json").read_text()) for cfg in (first, second)]
        (a_limit,) = meta[0]["server_limits"]
        (b_limit,) = meta[1]["server_limits"]
        assert a_limit["name"] == name and a_limit["holds"] == "config" and a_limit["config_value"] == 4
        assert b_limit["holds"] == "server" and b_limit["config_value"] == 6 and b_limit["server_value"] == 8
        assert any(c["from"] == 4 and c["to"] == 8 for c in b_limit["changes"]), b_limit
        assert _limit(api, name)["active_slots"] == 0  # both runs handed their slots back
