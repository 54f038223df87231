"""Resume a paused run from its flow run's page in the Prefect UI, in a real browser.

A real ``ape run`` on the server APE starts (with its login), a slow mock model; ``ape ctl
pause OUTPUT`` pauses it: the model's flow run goes Paused. Debian's chromium (through the
playwright package) logs in, opens the flow run's page, its header menu's *Resume* and the dialog's *Resume*: the
run obeys (goes on, finishes with every item exactly once and one model call per item), and
its metadata.json records the resume as the UI's. Skips with the reason when playwright or
chromium is missing (fails instead where ``APE_REQUIRE_BROWSER`` is set).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import free_port, stop_group
from tests.helpers.runner import make_benchmark
from tests.integration.test_ui_browser import CHROMIUM, CHROMIUM_ARGS, _browser_ready

ITEMS = 120


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_paused_run_resumes_from_its_flow_run_page(tmp_path: Path) -> None:
    reason = _browser_ready()
    if reason and os.environ.get("APE_REQUIRE_BROWSER"):
        pytest.fail(f"APE_REQUIRE_BROWSER is set but {reason}")
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import expect, sync_playwright

    args = 'behaviour = "arithmetic", latency_s = 0.5, call_log = "calls.log"'
    config = make_benchmark(tmp_path, n=ITEMS, model_args=args, run="solver_workers = 4\n")
    out, calls = tmp_path / "out", tmp_path / "calls.log"
    port = free_port()
    home = tmp_path / "ape-home"
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))  # this checkout's APE
    env = dict(os.environ, APE_HOME=str(home), APE_SERVER_PORT=str(port), PYTHONPATH=path)
    for key in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING", "PREFECT_UI_URL", "PREFECT_UI_API_URL"):
        env.pop(key, None)
    ape = [sys.executable, "-m", "ape"]
    proc = subprocess.Popen(
        [*ape, "run", str(config), "--no-progress"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not (out / "results.jsonl").exists() or len((out / "results.jsonl").read_text().splitlines()) < 4:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "no item saved"
            time.sleep(0.2)
        paused = subprocess.run([*ape, "ctl", "pause", str(out)], env=env, capture_output=True, text=True, timeout=60)
        assert paused.returncode == 0, paused.stdout + paused.stderr
        flow_run_id = json.loads((out / "live.json").read_text())["flow_run_id"]
        user, _, secret = (home / "server" / "auth").read_text().strip().partition(":")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}/api", auth=(user, secret), trust_env=False) as api:

            def state() -> str:
                return api.get(f"/flow_runs/{flow_run_id}").json()["state"]["type"]

            while state() != "PAUSED":
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline, "never Paused"
                time.sleep(0.3)
            saved = len((out / "results.jsonl").read_text().splitlines())
            time.sleep(2)
            assert len((out / "results.jsonl").read_text().splitlines()) == saved < ITEMS  # nothing runs

            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1600, "height": 1100})
                page.set_default_timeout(60_000)
                page.goto(f"http://127.0.0.1:{port}/v2/runs/flow-run/{flow_run_id}")
                login = page.get_by_placeholder("admin:pass")
                login.fill(f"{user}:{secret}")
                page.get_by_role("button", name="Login").click()
                expect(login).to_have_count(0)
                page.goto(f"http://127.0.0.1:{port}/v2/runs/flow-run/{flow_run_id}")
                expect(page.get_by_text("Paused").first).to_be_visible()
                page.screenshot(path=str(tmp_path / "paused.png"), full_page=True)
                # the page's actions are in the header's menu ("Open menu"); Resume is there while Paused
                page.get_by_role("button", name="Open menu").click()
                page.get_by_role("menuitem", name="Resume").click()
                dialog = page.get_by_role("dialog")
                expect(dialog.get_by_text("Resume Flow Run")).to_be_visible()
                dialog.get_by_role("button", name="Resume", exact=True).click()
                expect(page.get_by_text("Flow run resumed").first).to_be_visible()
                page.screenshot(path=str(tmp_path / "resumed.png"), full_page=True)
                browser.close()
            output = proc.communicate(timeout=180)[0]
            assert state() == "COMPLETED"
    finally:
        stop_group(proc, 5)
        subprocess.run([*ape, "server", "stop"], env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, output
    ids = [json.loads(line)["item_id"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == ITEMS  # every item exactly once
    assert len(calls.read_text().splitlines()) == ITEMS  # no model call again for saved items
    control = json.loads((out / "metadata.json").read_text())["control"]
    assert [e["action"] for e in control] == ["pause", "paused", "resume"], control
    assert control[-1]["by"] == "Prefect UI or API (Resume)"
