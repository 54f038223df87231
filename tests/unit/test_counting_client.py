"""count_task_runs keeps one Prefect client per API address (ape.tasks.recording.server)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import prefect
from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_CSRF_SUPPORT_ENABLED, temporary_settings

from ape.tasks.recording.server import count_task_runs

NO_CSRF = PREFECT_CLIENT_CSRF_SUPPORT_ENABLED  # this stand-in server hands out no CSRF token


def _server():
    seen: list[tuple[str, int]] = []  # (path, client port) of each request

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            seen.append((self.path, self.client_address[1]))
            if self.path.endswith("/task_runs/count"):
                answer = json.dumps(len(body["flow_runs"]["id"]["any_"])).encode()
            else:  # the client's version check, if it makes one
                answer = json.dumps(prefect.__version__).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def do_GET(self) -> None:  # noqa: N802
            self.do_POST()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_polls_reuse_one_connection_and_follow_a_changed_address() -> None:
    """Ten polls reach the server over one kept-alive connection (a client, its TLS context
    and pool built per poll were a fifth of the end-of-run wait's CPU); a different
    PREFECT_API_URL gets its own client."""
    first, seen_first = _server()
    second, seen_second = _server()
    try:
        with temporary_settings({PREFECT_API_URL: f"http://127.0.0.1:{first.server_port}/api", NO_CSRF: False}):
            counts = [count_task_runs(["a", "b"], ["COMPLETED"]) for _ in range(10)]
        with temporary_settings({PREFECT_API_URL: f"http://127.0.0.1:{second.server_port}/api", NO_CSRF: False}):
            other = count_task_runs(["a"], ["COMPLETED"], ["t1"])
    finally:
        first.shutdown()
        second.shutdown()
    assert counts == [2] * 10 and other == 1
    counted = [port for path, port in seen_first if path == "/api/task_runs/count"]
    assert len(counted) == 10 and len(set(counted)) == 1
    assert [path for path, _ in seen_second if path.endswith("/count")] == ["/api/task_runs/count"]
