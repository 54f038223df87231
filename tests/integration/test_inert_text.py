"""A hostile OpenAI-compatible endpoint and a hostile data file, through the real command line.

The endpoint (a real HTTP server on the loopback) answers two items with a 400 and a 500
whose error message carries escape sequences: a window title (OSC 0), clear screen, a
fake green "all items passed" line, an OSC 8 hyperlink, C1 controls and a bidi override.
The data file's categories hold a markdown image pointing at a local listener, an
``<img>`` tag, a ``javascript:`` link and a forged bold line. Then:

- stdout, stderr, run.log and the logs the Prefect server received hold no control
  character but newline and tab (the output is not a terminal, so not even APE's colours);
- ``leaderboard.md`` and the leaderboard artifact on the server, rendered by a real
  markdown library, hold no image, link or raw HTML, and the listener got no request.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langchain_openai", reason="the hostile endpoint test needs the 'openai' extra")

from markdown_it import MarkdownIt  # noqa: E402

from tests.helpers.fake_openai import LoopbackEndpoint, Reply, Request, completion, error_body  # noqa: E402
from tests.helpers.paths import REPO_ROOT  # noqa: E402
from tests.helpers.prefect_api import PrefectApi  # noqa: E402
from tests.helpers.runner import make_benchmark  # noqa: E402

HOSTILE_ERROR = (
    "\x1b]0;pwned title\x07\x1b[2J\x1b[H\x1b[32mall 4 items passed\x1b[0m "
    "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\ \x9b31m\u202eexe.txt\u202c\rforged"
)
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
QUESTION = re.compile(r"(\d+) \+ (\d+)")

MODEL = """[model]
name = "hostile"
provider = "openai"
model = "fake"
base_url = "{base_url}"
max_retries = 0
timeout_s = 10
"""


def categories(port: int) -> list[str]:
    return [
        f"![x](http://127.0.0.1:{port}/x.png)",
        f'<img src="http://127.0.0.1:{port}/y.png">',
        "[x](javascript:alert(1))",
        "**Run health:** all good",
    ]


def answer(request: Request) -> Reply:
    users = [m.get("content") for m in request.body.get("messages", []) if m.get("role") == "user"]
    found = QUESTION.search(str(users[0]))
    assert found is not None
    question = found.group(0)
    if question == "2 + 1":  # i0
        return 400, error_body(HOSTILE_ERROR)
    if question == "3 + 4":  # i1
        return 500, error_body(HOSTILE_ERROR)
    return 200, completion(f"\x1b[2J![x](http://evil.example/a.png) {int(found.group(1)) + int(found.group(2))}")


def assert_clean(where: str, text: str) -> None:
    found = sorted({f"U+{ord(c):04X}" for c in CONTROL.findall(text)})
    assert not found, f"{where} holds control characters {found}:\n{text[-3000:]}"


def assert_no_image_link_or_html(where: str, markdown: str) -> None:
    html = MarkdownIt("commonmark").enable("table").render(markdown)
    for tag in ("<img", "<a ", "<script", "<http"):
        assert tag not in html, f"{where} renders {tag}:\n{html}"
    assert html.count("<strong>") == 0 or "all good</strong>" not in html, html


@pytest.mark.slow
def test_hostile_endpoint_errors_and_data_categories_stay_inert(tmp_path: Path, prefect_server: str) -> None:
    listener = LoopbackEndpoint(lambda request: (200, {}))  # counts any request the markdown makes
    endpoint = LoopbackEndpoint(answer)
    try:
        port = listener.server.server_address[1]
        config = make_benchmark(tmp_path, n=4, models=MODEL.format(base_url=endpoint.base_url))
        data = tmp_path / "data.jsonl"
        rows = [json.loads(line) for line in data.read_text().splitlines()]
        for row, category in zip(rows, categories(port), strict=True):
            row["category"] = category
        data.write_text("".join(json.dumps(row) + "\n" for row in rows))

        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PREFECT_API_URL=prefect_server, OPENAI_API_KEY="sk-test")
        done = subprocess.run(
            [sys.executable, "-m", "ape", "run", str(config), "--no-server", "--no-progress"],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 1, done.stdout + done.stderr  # two items errored
        errors = [line for line in done.stderr.splitlines() if ": session error: " in line]
        assert len(errors) == 2 and all("all 4 items passed click exe.txt forged" in line for line in errors), errors
        assert_clean("stdout", done.stdout)
        assert_clean("stderr", done.stderr)
        assert "\x1b" not in done.stdout + done.stderr  # not a terminal: not even APE's own colours
        run_log = (tmp_path / "out" / "run.log").read_text(encoding="utf-8")
        assert run_log.count("all 4 items passed") == 2
        assert_clean("run.log", run_log)

        leaderboard = (tmp_path / "out" / "leaderboard.md").read_text(encoding="utf-8")
        assert "## By category" in leaderboard
        assert_no_image_link_or_html("leaderboard.md", leaderboard)

        with PrefectApi(prefect_server) as api:
            logs = api.post("/logs/filter", json={"limit": 200, "sort": "TIMESTAMP_DESC"}).json()
            hostile_logs = [log["message"] for log in logs if "all 4 items passed" in log["message"]]
            assert len(hostile_logs) >= 2, [log["message"] for log in logs][:20]
            for message in hostile_logs:
                assert_clean("a log on the Prefect server", message)
            # every version of the key this run wrote (the server is shared by other tests, the
            # newest first): none renders markup, and the one with the categories shows them as text
            artifacts = api.post(
                "/artifacts/filter",
                json={"artifacts": {"key": {"any_": ["t-leaderboard"]}}, "sort": "CREATED_DESC", "limit": 20},
            ).json()
            assert artifacts, "no leaderboard artifact on the server"
            for artifact in artifacts:
                assert_no_image_link_or_html("the leaderboard artifact", artifact["data"])
            assert any("javascript:alert(1)" in artifact["data"] for artifact in artifacts), artifacts[0]["data"]
        assert listener.requests == []
    finally:
        endpoint.close()
        listener.close()
