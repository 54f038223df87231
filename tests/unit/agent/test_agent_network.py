"""``[sandbox] allow_hosts`` (issue 49): an agent's commands reach the named hosts, through the
session's filtering proxy outside the sandbox, and nothing else: not another port, not a host
left out, not a name that resolves to the machine's own addresses, not anything without the
proxy; the forwarder in each namespace dies with its command; every connection is recorded."""

from __future__ import annotations

import http.server
import ipaddress
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from ape.schemas.config import SandboxConfig, SolverConfig
from ape.schemas.hosts import parse_entry
from ape.schemas.transcript import EntryKind
from ape.tasks.agent import network
from ape.tasks.agent.network import SOCKET_IN_SANDBOX, Refused, parse_head, permitted
from ape.tasks.agent.sandbox import AgentSandbox
from ape.tasks.agent.tools import bash
from ape.tasks.models.mocks.chat import MockChatModel
from ape.tasks.models.session_item import session_item
from ape.tasks.report.provenance import agent_sandbox_of
from ape.tasks.session.agent import AgentSetup, agent_solve
from tests.helpers.sandbox_kinds import available

needs_bwrap = pytest.mark.skipif(not available("bwrap"), reason="needs bubblewrap")


class Task(BaseModel):
    id: str


class Server:
    """A real HTTP server on the host's loopback that answers who it is and what it was asked."""

    def __init__(self, name: str):
        self.name = name
        self.requests: list[tuple[str, str | None]] = []
        seen = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                seen.append((self.path, self.headers["Host"]))
                body = f"{name} {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    allowed, other = Server("allowed-server"), Server("other-server")
    yield allowed, other
    allowed.close()
    other.close()


def box(*hosts: str, **changes: Any) -> AgentSandbox:
    settings: dict[str, Any] = {"command_timeout_s": 20, "allow_hosts": list(hosts), **changes}
    return AgentSandbox(SandboxConfig(**settings), Task(id="t1"), "t1")


CURL = "curl -sS -f -m 10"


@needs_bwrap
def test_the_named_host_is_reached_by_curl_and_urllib_through_the_proxy(servers: tuple[Server, Server]) -> None:
    allowed, _ = servers
    url = f"http://127.0.0.1:{allowed.port}"
    with box(f"127.0.0.1:{allowed.port}") as sandbox:
        plain = sandbox.bash(f"{CURL} {url}/plain")
        tunnel = sandbox.bash(f"{CURL} --proxytunnel {url}/tunnel")  # CONNECT, as https goes
        py = sandbox.python(
            f"import urllib.request\nprint(urllib.request.urlopen('{url}/py', timeout=10).read().decode())"
        )
        logged = sandbox.network()
    assert plain.exit_code == 0 and plain.stdout == "allowed-server /plain", plain.text()
    assert tunnel.exit_code == 0 and tunnel.stdout == "allowed-server /tunnel", tunnel.text()
    assert py.exit_code == 0 and py.stdout.strip() == "allowed-server /py", py.text()
    assert [path for path, _ in allowed.requests] == ["/plain", "/tunnel", "/py"]
    assert logged is not None and logged["allowed"] == 3 and logged["refused"] == 0
    methods = [(c["method"], c["host"], c["port"], c["allowed"]) for c in logged["connections"]]
    assert methods == [("GET", "127.0.0.1", allowed.port, True), ("CONNECT", "127.0.0.1", allowed.port, True)] + [
        ("GET", "127.0.0.1", allowed.port, True)
    ]
    assert all(c["bytes_in"] > 0 and c["bytes_out"] > 0 for c in logged["connections"])
    assert logged["bytes"] == sum(c["bytes_in"] + c["bytes_out"] for c in logged["connections"])


@needs_bwrap
def test_another_port_a_host_left_out_and_a_direct_connection_are_refused(servers: tuple[Server, Server]) -> None:
    allowed, other = servers
    with box(f"127.0.0.1:{allowed.port}", "pypi.org:443") as sandbox:
        port = sandbox.bash(f"{CURL} http://127.0.0.1:{other.port}/x; echo; {CURL} -p http://127.0.0.1:{other.port}/y")
        left_out = sandbox.bash(f"{CURL} https://example.org/ ; {CURL} http://pypi.org/")  # pypi.org: 443 only
        direct = sandbox.bash(f"{CURL} --noproxy '*' http://127.0.0.1:{allowed.port}/direct")
        raw = sandbox.python(
            f"import socket\ns = socket.create_connection(('127.0.0.1', {allowed.port}), timeout=5)\nprint('IN')"
        )
        outside = sandbox.python("import socket\nsocket.create_connection(('1.1.1.1', 443), timeout=3)\nprint('IN')")
        logged = sandbox.network()
    assert port.exit_code != 0 and "403" in port.stderr, port.text()
    assert left_out.exit_code != 0 and left_out.stderr.count("403") == 2, left_out.text()
    assert direct.exit_code == 7 and "allowed-server" not in direct.stdout  # nothing listens in the namespace
    assert raw.exit_code != 0 and "IN" not in raw.stdout and "refused" in raw.stderr.lower()
    assert outside.exit_code != 0 and "IN" not in outside.stdout
    assert other.requests == [] and allowed.requests == []
    assert logged is not None and logged["allowed"] == 0 and logged["refused"] == 4
    refused = {(c["host"], c["port"]) for c in logged["connections"] if not c["allowed"]}
    assert refused == {("127.0.0.1", other.port), ("example.org", 443), ("pypi.org", 80)}
    assert all("not in [sandbox] allow_hosts" in c["reason"] for c in logged["connections"])


@needs_bwrap
def test_a_name_of_the_loopback_is_not_its_address_nor_the_address_its_name(servers: tuple[Server, Server]) -> None:
    allowed, _ = servers
    with box(f"127.0.0.1:{allowed.port}") as sandbox:
        by_name = sandbox.bash(f"{CURL} http://localhost:{allowed.port}/by-name")
        # curl rewrites 2130706433 to 127.0.0.1 itself; the proxy, asked so, refuses such forms
        by_number = sandbox.python(
            "import socket\n"
            f"for host in ('2130706433', '127.1', '0x7f.1'):\n"
            "    s = socket.create_connection(('127.0.0.1', 3128), timeout=5)\n"
            f"    s.sendall(f'GET http://{{host}}:{allowed.port}/n HTTP/1.1\\r\\n\\r\\n'.encode())\n"
            "    print(s.recv(100).split(b'\\r\\n')[0].decode())\n"
        )
    assert by_name.exit_code != 0 and "403" in by_name.stderr
    assert by_number.stdout.split("\n")[:3] == ["HTTP/1.1 400 Bad Request"] * 3, by_number.text()
    with box(f"localhost:{allowed.port}") as sandbox:
        named = sandbox.bash(f"{CURL} http://localhost:{allowed.port}/named")
        number = sandbox.bash(f"{CURL} http://127.0.0.1:{allowed.port}/number")
    assert named.exit_code == 0 and named.stdout == "allowed-server /named", named.text()
    assert number.exit_code != 0 and "403" in number.stderr
    assert [path for path, _ in allowed.requests] == ["/named"]


def _own_name_resolving_locally() -> str | None:
    """This machine's name, when it resolves to an address that is not global (most do: /etc/hosts)."""
    name = socket.gethostname().lower()
    try:
        parse_entry(name)
        addresses = {info[4][0] for info in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
    except (ValueError, OSError):
        return None
    local = [a for a in addresses if not ipaddress.ip_address(a.split("%")[0]).is_global]
    return name if local else None


@needs_bwrap
def test_a_listed_name_that_resolves_to_the_machines_own_addresses_is_refused(servers: tuple[Server, Server]) -> None:
    """DNS rebinding: a name the owner allowed must not reach the host's own services."""
    allowed, _ = servers
    name = _own_name_resolving_locally()
    if name is None:
        pytest.skip("this machine's name does not resolve to a local address here")
    with box(f"{name}:{allowed.port}") as sandbox:
        result = sandbox.bash(f"{CURL} http://{name}:{allowed.port}/rebound")
        logged = sandbox.network()
    assert result.exit_code != 0 and "403" in result.stderr and allowed.requests == []
    assert logged is not None and "resolves to" in logged["connections"][0]["reason"]


def test_only_global_addresses_of_a_listed_name_are_used() -> None:
    resolved = [
        "127.0.0.1",
        "10.1.2.3",
        "192.168.0.1",
        "169.254.169.254",
        "::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "0.0.0.0",
    ]
    assert permitted(parse_entry("api.example.org"), [*resolved, "93.184.216.34"]) == ["93.184.216.34"]
    assert permitted(parse_entry("api.example.org"), resolved) == []
    assert permitted(parse_entry("localhost:8080"), ["127.0.0.1", "::1", "10.0.0.1"]) == ["127.0.0.1", "::1"]
    assert permitted(parse_entry("10.0.0.5:80"), ["10.0.0.5"]) == ["10.0.0.5"]  # named as written


def test_the_proxy_connects_to_the_address_it_checked(tmp_path: Path) -> None:
    """A resolver that answers the loopback for a listed name: refused, nothing connected."""
    calls: list[tuple[str, int]] = []

    async def rebinding(host: str, port: int) -> list[str]:
        calls.append((host, port))
        return ["127.0.0.1"]

    proxy = network.NetworkProxy(["api.example.org"], tmp_path / "p.sock", resolver=rebinding)
    proxy.start()
    try:
        client = socket.socket(socket.AF_UNIX)
        client.connect(str(proxy.path))
        client.sendall(b"CONNECT api.example.org:443 HTTP/1.1\r\nHost: api.example.org:443\r\n\r\n")
        reply = client.recv(4096)
        client.close()
        assert oct(proxy.path.stat().st_mode & 0o777) == "0o600"
    finally:
        proxy.close()
    assert reply.startswith(b"HTTP/1.1 403") and b"resolves to 127.0.0.1" in reply
    assert calls == [("api.example.org", 443)] and proxy.log.refused == 1 and not proxy.path.exists()


@needs_bwrap
def test_the_upstream_sees_the_urls_host_not_one_the_agent_wrote(servers: tuple[Server, Server]) -> None:
    allowed, _ = servers
    with box(f"127.0.0.1:{allowed.port}") as sandbox:
        sandbox.bash(
            f"{CURL} -H 'Host: metadata.internal' -H 'Proxy-Authorization: x' http://127.0.0.1:{allowed.port}/h"
        )
    assert allowed.requests == [("/h", f"127.0.0.1:{allowed.port}")]


def test_request_heads_the_proxy_refuses() -> None:
    for head in (
        b"GET https://example.org/ HTTP/1.1\r\n\r\n",  # https goes by CONNECT
        b"GET /relative HTTP/1.1\r\nHost: example.org\r\n\r\n",  # not a proxy request
        b"GET http://user@example.org/ HTTP/1.1\r\n\r\n",
        b"CONNECT example.org HTTP/1.1\r\n\r\n",  # no port
        b"CONNECT exa*mple.org:443 HTTP/1.1\r\n\r\n",
        b"GET http://example.org/ SPDY/3\r\n\r\n",
        b"\xff\xfe\r\n\r\n",
    ):
        with pytest.raises(Refused) as refused:
            parse_head(head)
        assert refused.value.status == 400, head
    method, host, port, forward = parse_head(b"GET http://Example.ORG./a?b=1 HTTP/1.1\r\nHost: evil\r\nX: y\r\n\r\n")
    assert (method, host, port) == ("GET", "example.org", 80)
    assert forward == b"GET /a?b=1 HTTP/1.1\r\nHost: example.org\r\nX: y\r\nConnection: close\r\n\r\n"


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                continue
    return found


@needs_bwrap
def test_the_forwarder_dies_with_its_command_and_passes_its_exit_code_on(servers: tuple[Server, Server]) -> None:
    allowed, _ = servers
    with box(f"127.0.0.1:{allowed.port}", command_timeout_s=2) as sandbox:
        seen: list[list[int]] = []
        running = threading.Thread(target=lambda: sandbox.bash("(sleep 271.5 &); nohup sleep 271.5 & sleep 1.5"))
        running.start()
        deadline = time.monotonic() + 10
        while running.is_alive() and not seen and time.monotonic() < deadline:
            if forwarders := _processes_with(SOCKET_IN_SANDBOX):
                seen.append(forwarders)
            time.sleep(0.05)
        running.join()
        assert seen, "the forwarder never ran"  # so that its absence below means something
        assert _processes_with(SOCKET_IN_SANDBOX) == [] and _processes_with("271.5") == []
        assert sandbox.bash("exit 3").exit_code == 3
        killed = sandbox.bash("kill -9 $$")
        assert killed.exit_code == 137 and killed.killed == "sigkill"
        late = sandbox.bash("sleep 30")
        assert late.timed_out and late.exit_code == 124
        missing = sandbox.run(["/nonexistent-program"])
        assert missing.exit_code == 127 and "/nonexistent-program" in missing.stderr
        assert _processes_with(SOCKET_IN_SANDBOX) == []


@needs_bwrap
def test_without_allow_hosts_nothing_changes() -> None:
    with box() as sandbox:
        assert sandbox.proxy is None and sandbox.network() is None
        argv = sandbox.argv(["true"])
        assert SOCKET_IN_SANDBOX not in " ".join(argv) and "HTTP_PROXY" not in argv
        assert "proxy" not in sandbox.bash("env").stdout.lower()
    assert "no network" in bash(sandbox).description


@needs_bwrap
def test_the_session_records_its_connections_and_counts_them(servers: tuple[Server, Server]) -> None:
    allowed, other = servers
    config = SandboxConfig(command_timeout_s=20, allow_hosts=[f"127.0.0.1:{allowed.port}"])
    steps = [
        {"tool": "bash", "args": {"command": f"{CURL} http://127.0.0.1:{allowed.port}/a"}},
        {"tool": "bash", "args": {"command": f"{CURL} http://127.0.0.1:{other.port}/b"}},
        "done",
    ]
    worker = SimpleNamespace(
        model=MockChatModel(behaviour="agent", steps={"t1": steps}),
        tools_for=lambda item, sandbox: [bash(sandbox)],
        setup=SimpleNamespace(config=SimpleNamespace(solver=SolverConfig(max_steps=5))),
    )
    spec = SimpleNamespace(prompt="do it", system=None, item_id="t1", run_index=0)
    item = Task(id="t1")
    with session_item(item, "t1", 0):
        state = agent_solve(worker, AgentSetup(config, None), spec, item)
    entries = [entry for entry in state.transcript if entry.kind is EntryKind.NETWORK]
    assert len(entries) == 1
    data = entries[0].data
    assert (data["allowed"], data["refused"]) == (1, 1)
    assert [(c["port"], c["allowed"]) for c in data["connections"]] == [(allowed.port, True), (other.port, False)]
    assert state.sandbox is not None and state.sandbox["net_allowed"] == 1 and state.sandbox["net_refused"] == 1
    assert state.sandbox["net_bytes"] == data["bytes"] > 0
    results = [e.content or "" for e in state.transcript if e.kind is EntryKind.TOOL_RESULT]
    assert "allowed-server /a" in results[0] and "403" in results[1]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("https://pypi.org", "no scheme"),
        ("pypi.org/simple", "no scheme"),
        ("*.example.org", "wildcard"),
        ("pypi.org:0", "port"),
        ("pypi.org:https", "port"),
        ("127.1", "whole IP address"),
        ("exa_mple..org", "not a host name"),
        ("[::1", "']'"),
    ],
)
def test_a_bad_host_entry_is_a_config_error_naming_the_key(entry: str, says: str) -> None:
    with pytest.raises(ValidationError) as error:
        SandboxConfig(allow_hosts=[entry])
    assert "allow_hosts" in str(error.value) and says in str(error.value)


def test_entries_are_kept_in_one_canonical_form_and_need_bwrap() -> None:
    config = SandboxConfig(allow_hosts=["PyPI.org.", "pypi.org", "[0:0::1]:8080", "::1"])
    assert config.allow_hosts == ["pypi.org", "[::1]:8080", "[::1]"]
    with pytest.raises(ValidationError, match="allow_hosts needs isolation = 'bwrap'"):
        SandboxConfig(allow_hosts=["pypi.org"], isolation="none")


def test_allow_hosts_is_in_the_runs_provenance() -> None:
    config = SimpleNamespace(sandbox=SandboxConfig(allow_hosts=["pypi.org:443"]))
    recorded = agent_sandbox_of(config)  # type: ignore[arg-type]
    assert recorded is not None
    assert recorded["allow_hosts"] == ["pypi.org:443"] and recorded["network"] == "allow_hosts (filtering proxy)"
    plain = agent_sandbox_of(SimpleNamespace(sandbox=SandboxConfig()))  # type: ignore[arg-type]
    assert plain is not None and plain["allow_hosts"] == [] and plain["network"] == "none"
