"""A person changes a run's limit on the Prefect UI's Concurrency page, and the run obeys.

A real ``ape run`` against the Prefect server APE starts (``ape server start``, with its
password) and a loopback OpenAI-compatible endpoint in this test process that counts the
requests in flight and holds them until told: the model's ``max_concurrency = 2`` becomes
the global concurrency limit ``ape:127.0.0.1:<port>:limits``, and the run holds its 2 slots.
A real chromium logs in, opens the Concurrency page, finds that limit's row, opens its menu,
*Edit*, types 5 into *Concurrency Limit* and clicks *Update*: nothing in this test calls the
API to change it. Within seconds 5 requests are in flight, never more, and the run's
``metadata.json`` records the change from 2 to 5 by the Prefect server.

Drives Debian's chromium through the playwright package; skips with the reason when either
is missing (fails instead where ``APE_REQUIRE_BROWSER`` is set). Screenshots go to the test's
temp folder.
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

from tests.helpers.counting_endpoint import CountingEndpoint  # noqa: E402
from tests.helpers.paths import REPO_ROOT  # noqa: E402
from tests.helpers.processes import free_port, start_ape, stop_group  # noqa: E402
from tests.helpers.runner import make_benchmark  # noqa: E402
from tests.integration.test_ui_browser import CHROMIUM, CHROMIUM_ARGS, _browser_ready  # noqa: E402

MODEL = """[model]
name = "m"
provider = "openai"
model = "limits"
base_url = "{base_url}"
api_key_env = "APE_UI_LIMIT_KEY"
max_concurrency = 2
timeout_s = 60
"""


@pytest.fixture
def endpoint() -> Iterator[CountingEndpoint]:
    counting = CountingEndpoint(latency_s=0.05)
    try:
        yield counting
    finally:
        counting.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_limit_changed_on_the_concurrency_page_reaches_the_running_evaluation(
    tmp_path: Path, endpoint: CountingEndpoint
) -> None:
    reason = _browser_ready()
    if reason and os.environ.get("APE_REQUIRE_BROWSER"):
        pytest.fail(f"APE_REQUIRE_BROWSER is set but {reason}")
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import expect, sync_playwright

    port = free_port()
    home = tmp_path / "ape-home"
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, APE_HOME=str(home), APE_SERVER_PORT=str(port), APE_UI_LIMIT_KEY="k", PYTHONPATH=path)
    for key in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING", "PREFECT_UI_URL", "PREFECT_UI_API_URL"):
        env.pop(key, None)
    ape = [sys.executable, "-m", "ape"]
    config = make_benchmark(
        tmp_path / "bench", n=40, run="solver_workers = 8\n", models=MODEL.format(base_url=endpoint.base_url)
    )
    name = f"ape:127.0.0.1:{endpoint.base_url.split(':')[2].split('/')[0]}:limits"
    proc: subprocess.Popen[str] | None = None
    try:
        started = subprocess.run([*ape, "server", "start"], env=env, capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stdout + started.stderr
        password = (home / "server" / "auth").read_text().strip()
        proc = start_ape(config, "--no-progress", env=env)
        # the run holds the server's 2 slots: its requests are held by the endpoint
        assert endpoint.wait_for(2, timeout_s=120) is not None, "the run never had 2 requests in flight"
        time.sleep(1.0)  # a third would have come by now, were the limit not held
        assert endpoint.peak == 2 and proc.poll() is None, endpoint.peaks

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(30_000)
            changes: list[tuple[str, str]] = []  # what the UI itself sent to change a limit
            page.on(
                "request",
                lambda r: changes.append((r.url, r.post_data or "")) if r.method == "PATCH" else None,
            )
            page.goto(f"http://127.0.0.1:{port}/v2/concurrency-limits")
            page.get_by_placeholder("admin:pass").fill(password)
            page.get_by_role("button", name="Login").click()
            row = page.get_by_role("row").filter(has=page.get_by_role("cell", name=name, exact=True))
            expect(row).to_have_count(1)
            expect(row.get_by_role("cell", name="2", exact=True).first).to_be_visible()  # the limit, from the config
            page.screenshot(path=str(tmp_path / "concurrency-before.png"), full_page=True)
            row.get_by_role("button", name="Open menu").click()
            page.get_by_role("menuitem", name="Edit").click()
            dialog = page.get_by_role("dialog")
            field = dialog.get_by_label("Concurrency Limit")
            expect(field).to_have_value("2")
            field.click()
            field.press("Control+a")
            field.press_sequentially("5")
            page.screenshot(path=str(tmp_path / "concurrency-edit.png"), full_page=True)
            dialog.get_by_role("button", name="Update").click()
            expect(dialog).to_have_count(0)
            clicked = time.monotonic()
            # the page refetches the list after the edit: on a loaded machine past expect's 5 s
            expect(row.get_by_role("cell", name="5", exact=True).first).to_be_visible(timeout=30_000)
            reached = endpoint.wait_for(5, timeout_s=15)
            page.reload()
            expect(row.get_by_role("cell", name="5", exact=True).first).to_be_visible(timeout=30_000)
            page.screenshot(path=str(tmp_path / "concurrency-after.png"), full_page=True)
            browser.close()
        assert reached is not None, f"5 in flight never reached after the edit (peak {endpoint.peak})"
        print(f"5 in flight {time.monotonic() - clicked:.1f} s after the click at most")
        assert len(changes) == 1 and json.loads(changes[0][1])["limit"] == 5, changes
        time.sleep(1.0)  # a sixth would have come by now, were the limit not held
        endpoint.go.set()  # the calls end; the run goes on to its end
        output = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0, output
    finally:
        if proc is not None:
            stop_group(proc, 5)
        subprocess.run([*ape, "server", "stop"], env=env, capture_output=True, timeout=60)
    assert endpoint.peak == 5, endpoint.peaks  # never beyond the limit the person set
    assert f"the server's limit {name} changed from 2 to 5" in output, output
    (note,) = json.loads((config.parent / "out" / "metadata.json").read_text())["server_limits"]
    assert note["name"] == name and note["holds"] == "config" and note["config_value"] == 2, note
    assert note["server_value"] == 5, note
    assert [(c["from"], c["to"], c["by"]) for c in note["changes"]] == [(2, 5, "the Prefect server")], note
    for shot in ("concurrency-before.png", "concurrency-edit.png", "concurrency-after.png"):
        assert (tmp_path / shot).stat().st_size > 10_000
