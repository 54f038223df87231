"""The flow-run link is a real UI address or nothing (never "None/flow-runs/..."), in the UI
the server opens by default (its ``/ui-settings``), and Prefect's own link where the server
does not say or is Prefect Cloud."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL, temporary_settings

from ape.flows.benchmark import flow_run_link
from ape.flows.ui_links import v2_base_url

RUN = "0b6c6d2e-6f43-4c1e-9d8e-1a2b3c4d5e6f"


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    v2_base_url.cache_clear()
    yield
    v2_base_url.cache_clear()


def ui_settings_server(answer: dict[str, object]) -> ThreadingHTTPServer:
    """A loopback server answering ``/ui-settings`` as a Prefect server does."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = json.dumps(answer).encode() if self.path == "/ui-settings" else b"{}"
            self.send_response(200 if self.path == "/ui-settings" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def link_from(answer: dict[str, object]) -> tuple[str | None, int]:
    server = ui_settings_server(answer)
    port = server.server_address[1]
    try:
        with temporary_settings({PREFECT_API_URL: f"http://127.0.0.1:{port}/api"}, restore_defaults={PREFECT_UI_URL}):
            return flow_run_link(RUN), port
    finally:
        server.shutdown()
        server.server_close()


def test_no_link_without_a_ui() -> None:
    with temporary_settings(restore_defaults={PREFECT_API_URL, PREFECT_UI_URL}):
        assert flow_run_link(RUN) is None  # Prefect's temporary server: nothing to open
    assert flow_run_link(None) is None


def test_a_server_that_opens_v2_gets_a_v2_link() -> None:
    link, port = link_from(
        {"default_ui": "v2", "available_uis": ["v1", "v2"], "v1_base_url": "/", "v2_base_url": "/v2"}
    )
    assert link == f"http://127.0.0.1:{port}/v2/runs/flow-run/{RUN}"


def test_a_server_that_opens_the_classic_ui_keeps_prefects_link() -> None:
    link, port = link_from({"default_ui": "v1", "available_uis": ["v1", "v2"], "v2_base_url": "/v2"})
    assert link == f"http://127.0.0.1:{port}/runs/flow-run/{RUN}"
    link, port = link_from({"default_ui": "v2", "available_uis": ["v1"], "v2_base_url": None})  # no V2 bundle
    assert link == f"http://127.0.0.1:{port}/runs/flow-run/{RUN}"


def test_a_server_that_does_not_answer_keeps_prefects_link() -> None:
    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:9/api"}, restore_defaults={PREFECT_UI_URL}):
        assert flow_run_link(RUN) == f"http://127.0.0.1:9/runs/flow-run/{RUN}"


def test_prefect_cloud_keeps_prefects_link() -> None:
    cloud = "https://api.prefect.cloud/api/accounts/a1/workspaces/w1"
    with temporary_settings({PREFECT_API_URL: cloud}, restore_defaults={PREFECT_UI_URL}):
        assert flow_run_link(RUN) == f"https://app.prefect.cloud/account/a1/workspace/w1/runs/flow-run/{RUN}"
