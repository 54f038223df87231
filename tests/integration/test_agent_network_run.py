"""examples/agent through ``ape run`` with ``[sandbox] allow_hosts``: the mock agent fetches a
file from a real local server through the proxy and is graded on it; a fetch from a port not
listed is refused; both are in the session's transcript, its counts and the run's provenance."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import run_ape
from tests.helpers.paths import REPO_ROOT
from tests.helpers.sandbox_kinds import available

pytestmark = pytest.mark.skipif(not available("bwrap"), reason="needs bubblewrap")


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        body = b"hello world\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_an_agent_run_reaches_only_the_listed_host(prefect_server: str, tmp_path: Path) -> None:
    allowed = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    for server in (allowed, other):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    port, other_port = allowed.server_address[1], other.server_address[1]
    try:
        example = tmp_path / "agent"
        shutil.copytree(REPO_ROOT / "examples" / "agent", example, ignore=shutil.ignore_patterns("output"))
        config = example / "config.toml"
        text = config.read_text()
        hello = 'hello_file = [{ tool = "bash", args = { command = "echo \'hello world\' > hello.txt" } }, "done"]'
        fetch = f"curl -sSf http://127.0.0.1:{port}/hello.txt > hello.txt; curl -sSf http://127.0.0.1:{other_port}/"
        assert hello in text
        text = text.replace(hello, f'hello_file = [{{ tool = "bash", args = {{ command = "{fetch}" }} }}, "done"]')
        config.write_text(text.replace("[sandbox]\n", f'[sandbox]\nallow_hosts = ["127.0.0.1:{port}"]\n'))
        done = run_ape("run", str(config), "--no-progress", cwd=tmp_path)
    finally:
        allowed.shutdown()
        other.shutdown()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    output = example / "output"
    report = json.loads((output / "report.json").read_text())
    assert report["leaderboard"][0]["pass_rate"] == pytest.approx(0.8)  # hello_file passes on the fetched file
    sessions = {
        s["item_id"]: s
        for line in (output / "results.jsonl").read_text().splitlines()
        for s in json.loads(line)["sessions"]
    }
    assert sessions["hello_file"]["check"]["status"] == "PASSED"
    assert (
        sessions["hello_file"]["sandbox"]["net_allowed"] == 1 and sessions["hello_file"]["sandbox"]["net_refused"] == 1
    )
    assert sessions["count_lines"]["sandbox"]["net_allowed"] == 0
    transcripts = {t["item_id"]: t for t in map(json.loads, (output / "sessions.jsonl").read_text().splitlines())}
    network = [e["data"] for e in transcripts["hello_file"]["entries"] if e["kind"] == "NETWORK"]
    assert len(network) == 1
    seen = [(c["port"], c["allowed"]) for c in network[0]["connections"]]
    assert seen == [(port, True), (other_port, False)]
    assert "403" in next(e["content"] for e in transcripts["hello_file"]["entries"] if e["kind"] == "TOOL_RESULT")
    limits = report["summary"]["provenance"]["runs"]["mock-agent"]["agent_sandbox"]
    assert limits["allow_hosts"] == [f"127.0.0.1:{port}"] and limits["network"] == "allow_hosts (filtering proxy)"
