"""The Prefect UI in a real browser: the link ``ape run`` prints, on a server APE started on
a non-default port, asks for the server's credentials, then shows the flow run, an item's
stage chain, the leaderboard artifact and a failed check. The data's categories hold a
markdown image and an ``<img>`` tag pointing at a local listener and a ``javascript:``
link: opened in both Prefect UIs, the leaderboard artifact makes no request to it.

Drives Debian's chromium through the playwright package (no browser download); skips
with the reason when either is missing
(fails instead where ``APE_REQUIRE_BROWSER`` is set, as ``.ci/run`` does). Screenshots go to the test's temp folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.helpers.processes import free_port
from tests.helpers.runner import make_benchmark

CHROMIUM = os.environ.get("APE_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

SCHEMA = '''from pydantic import BaseModel


class Problem(BaseModel):
    id: str
    question: str
    answer: int
    category: str


def check(item, solution):
    """Exact match; raises for item p3, so one check errors."""
    if item.id == "p3":
        raise RuntimeError("checker crashed on p3")
    return solution == item.answer
'''

CONFIG = """name = "uicheck"
[data]
file = "data.jsonl"
schema = "uischema:Problem"
category_field = "category"
[prompt]
template = "What is {{ question }}?"
[[model]]
name = "mock-exact"
provider = "mock"
args = { behaviour = "arithmetic", accuracy = 1.0, latency_s = 0.01, seed = 1 }
[adapter]
implementation = "last_number"
[checker]
implementation = "uischema:check"
[run]
solver_workers = 2
output = "out"
"""


def _hostile_categories(port: int) -> list[str]:
    """Categories that would load an image from, or link to, the listener on ``port``."""
    return [
        f"![x](http://127.0.0.1:{port}/md.png)",
        f'<img src="http://127.0.0.1:{port}/tag.png">',
        "[x](javascript:alert(1))",
    ]


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A loopback HTTP server that records the path of every request it receives."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(404)
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


def _browser_ready() -> str | None:
    """Why the test cannot run here, or None."""
    if not Path(CHROMIUM).exists():
        return f"chromium not installed at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install playwright)"
    return None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_printed_link_shows_chain_leaderboard_and_failed_check(tmp_path: Path, listener: tuple[int, list[str]]) -> None:
    reason = _browser_ready()
    if reason and os.environ.get("APE_REQUIRE_BROWSER"):
        pytest.fail(f"APE_REQUIRE_BROWSER is set but {reason}")
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import expect, sync_playwright

    listener_port, listener_requests = listener
    (tmp_path / "uischema.py").write_text(SCHEMA)
    with (tmp_path / "data.jsonl").open("w") as handle:
        pairs = [(2, 3), (4, 5), (6, 7)]
        for i, ((a, b), category) in enumerate(zip(pairs, _hostile_categories(listener_port), strict=True), start=1):
            row = {"id": f"p{i}", "question": f"{a} + {b}", "answer": a + b, "category": category}
            handle.write(json.dumps(row) + "\n")
    (tmp_path / "config.toml").write_text(CONFIG)

    port = free_port()
    env = dict(os.environ, APE_HOME=str(tmp_path / "ape-home"), APE_SERVER_PORT=str(port))
    for key in ("PREFECT_API_URL", "PREFECT_UI_URL", "PREFECT_UI_API_URL", "PREFECT_SERVER_UI_API_URL"):
        env.pop(key, None)
    ape = [sys.executable, "-m", "ape"]
    try:
        run = subprocess.run(
            [*ape, "run", str(tmp_path / "config.toml"), "--no-progress"],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        output = run.stdout + run.stderr
        assert run.returncode in (0, 1), output
        match = re.search(r"Flow run: (\S+)", output)
        assert match, output
        link = match.group(1)
        assert link.startswith(f"http://127.0.0.1:{port}/"), link
        # a new shell reaches the same server with the printed export lines (address, credentials)
        printed_env = subprocess.run([*ape, "server", "env"], env=env, capture_output=True, text=True, timeout=60)
        password = (tmp_path / "ape-home" / "server" / "auth").read_text().strip()
        assert printed_env.stdout.strip().splitlines() == [
            f"export PREFECT_API_URL=http://127.0.0.1:{port}/api",
            f"export PREFECT_API_AUTH_STRING={password}",
        ]

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1600, "height": 1100})
            page.set_default_timeout(60_000)
            api_calls: list[str] = []
            page.on("request", lambda request: api_calls.append(request.url) if "/api/" in request.url else None)
            page.goto(f"http://127.0.0.1:{port}/")
            # the server requires credentials: a wrong password is refused, the one in
            # APE_HOME/server/auth (as docs/server.md says) opens the UI, once per browser
            login = page.get_by_placeholder("admin:pass")
            login.fill("ape:guess")
            page.get_by_role("button", name="Login").click()
            page.wait_for_timeout(2000)
            expect(login).to_be_visible()  # still at the login form
            page.screenshot(path=str(tmp_path / "login.png"), full_page=True)
            login.fill(password)
            page.get_by_role("button", name="Login").click()
            expect(login).to_have_count(0)
            page.goto(link)
            # the flow run itself, and the leaderboard artifact of its report
            expect(page.get_by_text("uicheck · mock-exact").first).to_be_visible()
            page.screenshot(path=str(tmp_path / "flow-run.png"), full_page=True)
            # (the run graph is drawn on a canvas: read the tabs, which are text)
            page.get_by_text("Artifacts", exact=True).click()
            expect(page.get_by_text("uicheck-leaderboard").first).to_be_visible()
            page.screenshot(path=str(tmp_path / "artifacts.png"), full_page=True)
            # the UI talks to this server's API, not to a default port
            assert api_calls and all(f"127.0.0.1:{port}" in url for url in api_calls), api_calls[:5]

            # the model's evaluate subflow holds the items' task runs
            page.get_by_text("Subflow Runs", exact=True).click()
            page.get_by_text("evaluate").first.wait_for()
            page.get_by_role("link", name=re.compile("mock-exact")).first.click()
            page.get_by_text("Task Runs", exact=True).click()
            for stage in ("render", "solve", "adapt", "check", "score"):
                expect(page.get_by_text(f"{stage}[p1]#0").first).to_be_visible()
            # the check that raised is a Failed task run
            expect(page.get_by_text("check[p3]#0").first).to_be_visible()
            # three items, each render, solve, adapt, check, score and the live session: the
            # UI counts them by state name (two checks Passed, p3's check Failed)
            expect(page.get_by_text("18 Task runs").first).to_be_visible()
            counts = r"^\((?=.*\b15 Completed\b)(?=.*\b2 Passed\b)(?=.*\b1 Failed\b).*\)$"
            expect(page.get_by_text(re.compile(counts))).to_be_visible()
            page.screenshot(path=str(tmp_path / "task-runs.png"), full_page=True)
            page.get_by_text("check[p3]#0").first.click()
            expect(page.get_by_text("Failed", exact=True).first).to_be_visible()
            page.screenshot(path=str(tmp_path / "failed-check.png"), full_page=True)

            # the leaderboard artifact, built from the hostile categories, in the new UI and the
            # classic one: the categories show as text, nothing is fetched from the listener
            user, _, secret = password.partition(":")
            with httpx.Client(base_url=f"http://127.0.0.1:{port}/api", auth=(user, secret), trust_env=False) as api:
                token = api.get("/csrf-token", params={"client": "browser-test"}).json()["token"]
                found = api.post(
                    "/artifacts/filter",
                    json={"artifacts": {"key": {"any_": ["uicheck-leaderboard"]}}, "limit": 1},
                    headers={"Prefect-Csrf-Token": token, "Prefect-Csrf-Client": "browser-test"},
                ).json()
            assert isinstance(found, list) and "javascript:alert(1)" in found[0]["data"], found
            for ui, path in (("v2", "/v2"), ("classic", "")):
                page.goto(f"http://127.0.0.1:{port}{path}/artifacts/artifact/{found[0]['id']}")
                table, login = page.get_by_text("By category").first, page.get_by_placeholder("admin:pass")
                expect(table.or_(login).first).to_be_visible()
                if login.count():  # each UI keeps its own login
                    login.fill(password)
                    page.get_by_role("button", name="Login").click()
                expect(table).to_be_visible()
                page.wait_for_timeout(1500)  # time for any image the markdown made to load
                page.screenshot(path=str(tmp_path / f"artifact-{ui}.png"), full_page=True)
                assert listener_requests == [], (ui, listener_requests)
                assert page.locator("a[href^='javascript:']").count() == 0, ui
                expect(page.get_by_text("javascript:alert(1)").first).to_be_visible()  # as text
            browser.close()
        shots = ["login.png", "flow-run.png", "artifacts.png", "task-runs.png", "failed-check.png"]
        for name in [*shots, "artifact-v2.png", "artifact-classic.png"]:
            assert (tmp_path / name).stat().st_size > 10_000
    finally:
        subprocess.run([*ape, "server", "stop"], env=env, capture_output=True, timeout=60)
        shutil.rmtree(tmp_path / "out" / ".cache", ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_printed_link_opens_the_login_then_the_flow_run_in_a_fresh_browser(tmp_path: Path) -> None:
    """A newcomer pastes the printed link into a browser that never logged in: the login form,
    the password from the file every line names, then the flow run itself; and the UI behind
    the link is the one the front page opens. Before: the classic UI's 404 page with
    "Authentication failed." and no login form, and the auth file named only at the start."""
    reason = _browser_ready()
    if reason and os.environ.get("APE_REQUIRE_BROWSER"):
        pytest.fail(f"APE_REQUIRE_BROWSER is set but {reason}")
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import expect, sync_playwright

    config = make_benchmark(tmp_path / "bench", n=3)
    port = free_port()
    home = tmp_path / "ape-home"
    auth_file = home / "server" / "auth"
    env = dict(os.environ, APE_HOME=str(home), APE_SERVER_PORT=str(port))
    for key in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING", "PREFECT_UI_URL", "PREFECT_UI_API_URL"):
        env.pop(key, None)
    ape = [sys.executable, "-m", "ape"]
    hint = f"(the UI's password is the line in {auth_file})"
    try:
        outputs = []
        for _ in range(2):  # the first run starts the server, the second reuses it
            run = subprocess.run(
                [*ape, "run", str(config), "--no-progress"], env=env, capture_output=True, text=True, timeout=240
            )
            outputs.append(run.stdout + run.stderr)
            assert run.returncode == 0, outputs[-1]
        started, reused = outputs
        link = re.search(r"Flow run: (\S+)", reused).group(1)
        flow_run_id = link.rsplit("/", 1)[1]
        password = auth_file.read_text().strip()

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1400, "height": 900})  # no login yet
            page = context.new_page()
            page.set_default_timeout(60_000)
            page.goto(link)
            login = page.get_by_placeholder("admin:pass")
            expect(login).to_be_visible(timeout=30_000)
            page.screenshot(path=str(tmp_path / "fresh-login.png"), full_page=True)
            login.fill(password)
            page.get_by_role("button", name="Login").click()
            expect(login).to_have_count(0, timeout=30_000)
            expect(page).to_have_url(re.compile(rf"/v2/runs/flow-run/{flow_run_id}"), timeout=30_000)
            expect(page.get_by_text("t · m").first).to_be_visible(timeout=30_000)  # the flow run's name
            expect(page.get_by_text("Authentication failed.")).to_have_count(0)
            page.screenshot(path=str(tmp_path / "fresh-flow-run.png"), full_page=True)
            page.goto(f"http://127.0.0.1:{port}/")  # the front page opens the same UI
            expect(page).to_have_url(re.compile(rf"^http://127\.0\.0\.1:{port}/v2/"), timeout=30_000)
            browser.close()
        # the UI the front page opens (Prefect's V2), not the classic one
        assert link == f"http://127.0.0.1:{port}/v2/runs/flow-run/{flow_run_id}", link
        # every line that names the server or links into its UI says where the password is
        assert f"Starting a Prefect server at http://127.0.0.1:{port} (log: " in started, started
        assert f"Reusing the Prefect server at http://127.0.0.1:{port} {hint}" in reused, reused
        for output in outputs:
            assert re.search(rf"Flow run: \S+ {re.escape(hint)}", output), output
    finally:
        subprocess.run([*ape, "server", "stop"], env=env, capture_output=True, timeout=60)
