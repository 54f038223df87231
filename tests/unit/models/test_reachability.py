"""A dead endpoint is found in one request before the run, and named in every error after.

Real sockets on the loopback: a port nothing listens on (bound, then closed), a tiny HTTP
server that answers with a chosen status, and a listening socket that never answers.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ape.schemas.config import ModelConfig
from ape.schemas.results import ErrorInfo
from ape.tasks.common.console import CONSOLE_SKIP
from ape.tasks.models.limits.policy import RETRY_LINES, RetryPolicy, endpoint_note
from ape.tasks.models.limits.reachability import (
    Target,
    auth_warnings,
    path_warnings,
    probe,
    probe_all,
    probe_target,
    unreachable_lines,
)
from tests.helpers.fake_openai import LoopbackEndpoint, error_body


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then closed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StatusServer:
    """Answers every GET with ``status``; ``paths`` lists what was asked and with which auth."""

    def __init__(self, status: int) -> None:
        self.paths: list[tuple[str, str | None]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                owner.paths.append((self.path, self.headers.get("authorization")))
                self.send_response(status)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def status_server(request: pytest.FixtureRequest) -> Iterator[StatusServer]:
    server = StatusServer(request.param)
    yield server
    server.close()


def openai(base_url: str | None, **values: Any) -> ModelConfig:
    return ModelConfig(provider="openai", model="m", base_url=base_url, **values)


def test_a_closed_port_is_unreachable_with_its_url_and_cause() -> None:
    port = closed_port()
    target = probe_target(openai(f"http://127.0.0.1:{port}/v1", name="dead"))
    assert target is not None
    found = probe(target)
    assert not found.reachable and found.seconds < 2.0
    (line,) = unreachable_lines([found])
    assert line.startswith(f"[model] 'dead': http://127.0.0.1:{port}/v1 is unreachable: connection refused")
    assert f"GET http://127.0.0.1:{port}/v1/models" in line


def test_an_unknown_host_and_a_url_without_scheme_are_unreachable() -> None:
    dns, bad = probe_all(
        [Target("dns", "http://no-such-host.invalid/v1", "openai"), Target("bad", "127.0.0.1:5/v1", "openai")]
    )
    assert dns.cause is not None and dns.cause.startswith("host name not found")
    assert bad.cause is not None and bad.cause.startswith("not a URL a client can call")


@pytest.mark.parametrize("status_server", [404, 200, 501], indirect=True)
def test_any_http_answer_is_reachable_even_without_models(status_server: StatusServer) -> None:
    """A server without /models (404), or one that only takes POST (501), is there."""
    target = probe_target(openai(status_server.base_url))
    assert target is not None
    (found,) = probe_all([target])
    assert found.reachable and unreachable_lines([found]) == [] and auth_warnings([found]) == []
    assert status_server.paths[0][0] == "/v1/models"


@pytest.mark.parametrize("status_server", [401], indirect=True)
def test_a_refused_key_is_a_warning_naming_its_variable(
    status_server: StatusServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_ENDPOINT_KEY", "sk-test-value")
    target = probe_target(openai(status_server.base_url, api_key_env="MY_ENDPOINT_KEY", name="keyed"))
    assert target is not None
    (found,) = probe_all([target])
    assert found.reachable  # not a reason to stop: the key may only lack the scope to list models
    (line,) = auth_warnings([found])
    assert "'keyed'" in line and "answered 401" in line and "MY_ENDPOINT_KEY" in line
    assert "sk-test-value" not in line
    assert status_server.paths == [("/v1/models", "Bearer sk-test-value")]  # as the model's calls send it


def test_probes_run_at_once_and_a_busy_server_counts_as_there() -> None:
    """Three endpoints that take the connection but never answer: reachable (a busy local
    server), and the three probes together cost one time-out, not three."""
    listeners = []
    for _ in range(3):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)  # connections wait in the backlog; nothing ever answers
        listeners.append(sock)
    try:
        targets = [
            Target(f"m{i}", f"http://127.0.0.1:{s.getsockname()[1]}/v1", "openai") for i, s in enumerate(listeners)
        ]
        started = time.perf_counter()
        found = probe_all(targets, timeout_s=0.6)
        elapsed = time.perf_counter() - started
    finally:
        for sock in listeners:
            sock.close()
    assert all(p.reachable for p in found)
    assert elapsed < 1.5, f"probes ran one after another: {elapsed:.2f} s"


@pytest.mark.parametrize(
    ("section", "probed"),
    [
        ({"provider": "mock", "model": "echo"}, None),
        ({"provider": "llama-cpp", "model_path": "m.gguf"}, None),
        ({"class": "pkg.mod:Model"}, None),
        ({"provider": "openai", "model": "gpt"}, "https://api.openai.com/v1"),
        ({"provider": "anthropic", "model": "claude"}, "https://api.anthropic.com/v1"),
        ({"provider": "mistralai", "model": "x"}, None),  # a host we do not know: its own errors say
        ({"provider": "mistralai", "model": "x", "base_url": "http://10.0.0.2:8000/v1"}, "http://10.0.0.2:8000/v1"),
        ({"provider": "openai", "model": "m", "args": {"base_url": "http://h:1/v1"}}, "http://h:1/v1"),
    ],
)
def test_which_models_are_probed(section: dict[str, Any], probed: str | None) -> None:
    target = probe_target(ModelConfig.model_validate(section))
    assert (target.base_url if target else None) == probed


def _dead_call(port: int) -> Any:
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0, timeout=5)
    return lambda: model.invoke("hi")


def test_a_connection_error_names_its_endpoint_in_the_session_error(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("langchain_openai")
    port = closed_port()
    RETRY_LINES.reset()
    policy = RetryPolicy(max_retries=3, initial_s=0.001, max_s=0.002, label="dead")
    with caplog.at_level(logging.WARNING, logger="ape.models"), pytest.raises(Exception) as raised:
        policy.call(_dead_call(port))
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    info = ErrorInfo.from_exception(raised.value)
    assert info.message.startswith("Connection error.")  # the provider's own message first
    assert f"endpoint POST {url}: connection refused" in info.message
    assert endpoint_note(raised.value) == f"endpoint POST {url}: connection refused (nothing listens on that port)"
    # the three retry lines: one on the terminal, all three in run.log, counted for the model's end
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 3 and url in retries[0].getMessage()
    assert [bool(getattr(r, CONSOLE_SKIP, False)) for r in retries] == [False, True, True]
    assert [count for count, _ in RETRY_LINES.take("dead")] == [3]


def test_an_http_error_gets_no_endpoint_note() -> None:
    import httpx

    request = httpx.Request("POST", "http://h/v1/chat/completions")
    error = httpx.HTTPStatusError("500", request=request, response=httpx.Response(500, request=request))
    assert endpoint_note(error) is None  # its status says what happened
    assert endpoint_note(ValueError("bad")) is None


def test_a_connection_the_server_drops_is_named_with_its_endpoint() -> None:
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI

    from tests.helpers.fake_openai import DROP, LoopbackEndpoint

    endpoint = LoopbackEndpoint(lambda request: DROP)
    try:
        model = ChatOpenAI(model="m", base_url=endpoint.base_url, api_key="k", max_retries=0, timeout=5)
        with pytest.raises(Exception) as raised:
            RetryPolicy(max_retries=0, label="x").call(lambda: model.invoke("hi"))
    finally:
        endpoint.close()
    message = ErrorInfo.from_exception(raised.value).message
    assert f"endpoint POST {endpoint.base_url}/chat/completions: the server closed the connection" in message


@pytest.mark.parametrize("status_server", [404], indirect=True)
def test_a_404_from_a_base_url_without_v1_is_one_line_naming_the_url_and_v1(status_server: StatusServer) -> None:
    """A server answers 404 to /models when base_url lacks /v1; the probe names the URL and
    suggests the /v1 form, and says nothing when base_url has it (a server without /models)."""
    bare = status_server.base_url.removesuffix("/v1")
    found, with_v1 = probe_all(
        [t for t in (probe_target(openai(bare, name="local")), probe_target(openai(status_server.base_url))) if t]
    )
    assert found.reachable and path_warnings([with_v1]) == []
    (line,) = path_warnings([found])
    assert line.startswith(f"[model] 'local': GET {bare}/models answered 404; is /v1 missing from base_url?")
    assert line.endswith(f'try base_url = "{bare}/v1"')


def test_a_404_session_error_names_the_url_and_the_missing_v1() -> None:
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI

    server = LoopbackEndpoint(lambda request: (404, error_body("Not Found")))
    try:
        bare = server.base_url.removesuffix("/v1")
        model = ChatOpenAI(model="m", base_url=bare, api_key="k", max_retries=0, timeout=5)
        with pytest.raises(Exception) as raised:
            RetryPolicy(max_retries=2, initial_s=0.001, max_s=0.002, label="bare").call(lambda: model.invoke("hi"))
    finally:
        server.close()
    assert len(server.requests) == 1  # a 404 is not retried
    message = ErrorInfo.from_exception(raised.value).message
    assert f"endpoint POST {bare}/chat/completions answered 404" in message
    assert "is /v1 missing from base_url?" in message
