"""A model's ``requests_per_second`` is the Prefect server's rate limit: shared by runs, changed live.

Two real ``ape run`` processes against one real Prefect server and one loopback
OpenAI-compatible endpoint (in this test process, so it sees every request's arrival):

- the endpoint holds every request until both runs have called it, so neither goes ahead
  alone while the other starts;
- both runs' configs say ``requests_per_second = 4``: the limit
  ``ape:127.0.0.1:<port>:rate:per-second`` is a rate limit of 4 slots decaying at 4 per
  second, and the two runs together never send more than ``4 + 4 * W`` requests in any
  window of ``W`` seconds (one more allowed for the time a granted call takes to arrive): the burst is the limit's 4 slots, then Prefect's slot decay frees
  one slot each 1/4 s after the last grant (rounded down);
- ``prefect gcl update NAME --limit 1 --slot-decay-per-second 0.5`` mid-run: from 2 s
  after the command returned, the pair keeps to ``1 + 0.5 * W`` (about 5 in 10 s, where
  they sent 20-30 before), without a restart;
- then ``--limit 20 --slot-decay-per-second 20`` lets them finish; each run's log and
  ``metadata.json`` record both changes (4 to 0.5 to 20).

A change is tested downwards because upwards the server, not the limit, bounds the rate
here: with two runs reporting to it on a shared machine, about one rate acquisition in two
is answered 503 (SQLite busy) after about 2 s, and the pair reached 2-3 requests a second
at 4, and no more at 20.
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

from tests.helpers.counting_endpoint import CountingEndpoint, most_in_window  # noqa: E402
from tests.helpers.paths import REPO_ROOT  # noqa: E402
from tests.helpers.prefect_api import PrefectApi  # noqa: E402
from tests.helpers.processes import start_ape, stop_group  # noqa: E402
from tests.helpers.runner import make_benchmark  # noqa: E402

RATE = 4
LOW = 0.5  # the rate set mid-run: a bucket of 1 slot decaying at 0.5 a second
FAST = 20  # then set to let the runs finish
SLOW_S = 10.0  # how long both runs go at RATE, and then at LOW
GRACE_S = 2.0  # the change holds from this long after `prefect gcl update` returned
SKEW = 1  # a call reaches the endpoint a little after the server granted it, and these delays
# differ: a window of arrivals may hold one call more than the same window of grants
ITEMS = 50  # per run
MODEL = """[model]
name = "{name}"
provider = "openai"
model = "rate"
base_url = "{base_url}"
api_key_env = "APE_RATE_KEY"
requests_per_second = {rate}
timeout_s = 200
"""


@pytest.fixture
def endpoint() -> Iterator[CountingEndpoint]:
    # held until both runs call: a run that starts first must not finish alone before the
    # other one's first call (a loaded machine started the second 14 s late, and the first
    # had done its items before the limit changed)
    counting = CountingEndpoint(latency_s=0.02, held=True)
    try:
        yield counting
    finally:
        counting.close()


def _start(config: Path, key: str, api: str) -> subprocess.Popen[str]:
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return start_ape(
        config,
        "--no-server",
        "--no-progress",
        env=dict(os.environ, PYTHONPATH=path, APE_RATE_KEY=key, PREFECT_API_URL=api),
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_runs_share_the_servers_rate_and_a_change_reaches_them_live(
    prefect_server: str, endpoint: CountingEndpoint, tmp_path: Path
) -> None:
    base_url = endpoint.base_url
    name = f"ape:127.0.0.1:{base_url.split(':')[2].split('/')[0]}:rate:per-second"
    run = "solver_workers = 8\n"
    configs = [
        make_benchmark(
            tmp_path / label,
            n=ITEMS,
            run=run,
            models=MODEL.format(name=label, base_url=base_url, rate=RATE),
            id_prefix=label,
        )
        for label in ("a", "b")
    ]
    procs: list[subprocess.Popen[str]] = []
    with PrefectApi(prefect_server) as api:
        try:
            procs = [_start(cfg, f"key-{cfg.parent.name}", prefect_server) for cfg in configs]
            deadline = time.monotonic() + 180
            while len({key for _, key in list(endpoint.arrivals)}) < 2:  # both runs are calling
                for proc in procs:
                    assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline, "both runs never called the endpoint"
                time.sleep(0.1)
            endpoint.go.set()  # from here both runs go at the shared rate
            both = time.monotonic()
            time.sleep(SLOW_S)
            changed_at = time.monotonic()
            _update(name, 1, LOW, prefect_server)
            low_from = time.monotonic() + GRACE_S
            assert all(proc.poll() is None for proc in procs), "a run ended before the change"
            time.sleep(GRACE_S + SLOW_S)
            low_to = time.monotonic()
            _update(name, FAST, FAST, prefect_server)
            outputs = [proc.communicate(timeout=240)[0] for proc in procs]
        finally:
            for proc in procs:
                stop_group(proc, 5)
        limit = api.get(f"/v2/concurrency_limits/{name}").json()
    for proc, output in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, output
    start = endpoint.times()[0]
    seconds = [int(t - start) for t in endpoint.times()]
    print("requests per second:", [seconds.count(i) for i in range(seconds[-1] + 1)])
    print(f"both from {both - start:.1f} s, {LOW}/s from {changed_at - start:.1f}, {FAST}/s from {low_to - start:.1f}")

    # at RATE: both runs called while the limit held; together within RATE + RATE * W per W s
    keys = {key for t, key in endpoint.arrivals if both <= t < changed_at}
    assert keys == {"Bearer key-a", "Bearer key-b"}, keys
    at_rate = endpoint.times(end=changed_at)
    figures = {w: most_in_window(at_rate, w) for w in (0.5, 1.0, 2.0, 5.0, 10.0)}
    average = len(endpoint.times(both, changed_at)) / (changed_at - both)
    print(f"at {RATE}/s: most requests per window {figures}, average {average:.2f}/s")
    for window_s, most in figures.items():
        assert most <= RATE + RATE * window_s + SKEW, (window_s, most, figures)
    # the change to LOW reached both runs within GRACE_S: 1 + LOW * W in any window after it
    at_low = endpoint.times(low_from, low_to)
    low_figures = {w: most_in_window(at_low, w) for w in (1.0, 2.0, 5.0, 10.0)}
    print(f"at {LOW}/s: most requests per window {low_figures}, {len(at_low)} in {low_to - low_from:.1f} s")
    for window_s, most in low_figures.items():
        assert most <= 1 + LOW * window_s + SKEW, (window_s, most, low_figures)
    assert len(endpoint.times(both, changed_at)) > 1 + LOW * SLOW_S  # the bound would have held before
    assert limit["limit"] == FAST and limit["slot_decay_per_second"] == FAST, limit
    # each run logged both changes and recorded them in its metadata.json
    waits = []
    for cfg, output in zip(configs, outputs, strict=True):
        assert f"the server's limit {name} changed from {RATE} to {LOW}" in output, output
        assert f"the server's limit {name} changed from {LOW} to {FAST}" in output, output
        (note,) = json.loads((cfg.parent / "out" / "metadata.json").read_text())["server_limits"]
        assert note["name"] == name and note["config_value"] == RATE and note["server_value"] == FAST, note
        assert [(c["from"], c["to"]) for c in note["changes"]] == [(RATE, LOW), (LOW, FAST)], note
        sessions = (cfg.parent / "out" / "sessions.jsonl").read_text().splitlines()
        waits += [json.loads(line)["latency_s"] for line in sessions]
    print(f"longest call (waiting for the rate included): {max(waits):.1f} s")


def _update(name: str, limit: int, per_second: float, api: str) -> None:
    """``prefect gcl update``, as a person would type it."""
    changed = subprocess.run(
        [sys.executable, "-m", "prefect", "gcl", "update", name]
        + ["--limit", str(limit), "--slot-decay-per-second", str(per_second)],
        env=dict(os.environ, PREFECT_API_URL=api),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert changed.returncode == 0, changed.stdout + changed.stderr
