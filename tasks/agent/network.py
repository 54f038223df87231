"""Network for an agent's sandbox: only the hosts ``[sandbox] allow_hosts`` names, through a proxy.

Each command keeps its own network namespace (bubblewrap's ``--unshare-net``: a loopback
and nothing else). With ``allow_hosts`` set, the session runs a :class:`NetworkProxy`
outside the sandbox: an HTTP proxy (``CONNECT`` tunnels and plain ``http://`` requests)
listening on a Unix socket in the session's private folder. That socket is bound into
each command's namespace at :data:`SOCKET_IN_SANDBOX`, and :data:`FORWARDER`, run by
this interpreter as the namespace's first process, listens on ``127.0.0.1:3128`` in the
namespace, relays every connection to the socket, and runs the command as its child; it
exits with the command, so its PID namespace (and every process in it) ends as before.
``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` (and their lower-case forms) point at it,
``NO_PROXY`` is empty.

The forwarder has no reach of its own: a command may talk to the socket directly, or kill
the forwarder, and gains nothing. What is reached is decided outside, by the proxy:

- the request's host and port must equal an entry's (:mod:`ape.schemas.hosts`: exact,
  canonical, no patterns; an entry without a port allows 443 and 80);
- a name is resolved by the proxy, outside the sandbox, and only to addresses that are
  global; a name resolving to a loopback, private, link-local or other special address is
  refused (DNS rebinding to the host's own services), except ``localhost`` when that name
  is the entry (then only loopback addresses) and an IP address entry, used as written;
- the proxy connects to the address it checked, never to a name resolved again.

Everything else is answered ``403 Forbidden`` with the reason, and every connection,
allowed or refused, is recorded (host, port, method, allowed, reason, bytes each way):
the session's ``NETWORK`` transcript entry and its ``sandbox`` counts
(:mod:`ape.tasks.session.agent`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ape.schemas.hosts import HostPort, parse_entry, split_host_port

log = logging.getLogger("ape.agent")

PORT_IN_SANDBOX = 3128  # the forwarder's port on the namespace's own loopback
SOCKET_IN_SANDBOX = "/run/ape-proxy.sock"
PROXY_URL = f"http://127.0.0.1:{PORT_IN_SANDBOX}"
HEAD_BYTES = 64 * 1024  # a request head longer than this is refused
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64  # open at once per session; more are answered 503
MAX_RECORDS = 500  # connections recorded one by one per session; all are counted
CHUNK = 64 * 1024
# request headers that concern the proxy hop only, dropped before a plain request goes on
HOP_HEADERS = {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive", b"te", b"upgrade"}

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]


def proxy_env() -> dict[str, str]:
    """The variables that send a command's HTTP clients through the forwarder."""
    env = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = PROXY_URL
    env["NO_PROXY"] = env["no_proxy"] = ""
    return env


def forwarder_argv(python: str) -> list[str]:
    """The words before a command that start the forwarder in its namespace (module doc)."""
    return [python, "-I", "-S", "-c", FORWARDER, str(PORT_IN_SANDBOX), SOCKET_IN_SANDBOX]


def global_address(address: Address) -> bool:
    """Whether ``address`` is an ordinary Internet address: not loopback, private, link-local,
    multicast, reserved or unspecified (an IPv4 address inside IPv6 is judged as IPv4)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def permitted(entry: HostPort, addresses: Sequence[str]) -> list[str]:
    """Of the addresses ``entry``'s host resolved to, those the proxy may connect to
    (module doc): an IP entry's own address; for ``localhost`` loopback ones; else global ones."""
    literal = entry.address
    if literal is not None:
        return [str(literal)]
    kept = []
    for text in addresses:
        try:
            address = ipaddress.ip_address(text.split("%")[0])
        except ValueError:
            continue
        if address.is_loopback if entry.host == "localhost" else global_address(address):
            kept.append(str(address))
    return kept


async def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses as this machine resolves them (outside the sandbox)."""
    loop = asyncio.get_running_loop()
    found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


class Refused(Exception):
    """A request the proxy answers with an error status instead of a connection."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass
class Connection:
    """One connection a command asked for: what, whether allowed, and the bytes it moved."""

    method: str
    host: str
    port: int
    allowed: bool = False
    reason: str | None = None
    address: str | None = None
    bytes_out: int = 0  # from the sandbox to the host
    bytes_in: int = 0  # from the host to the sandbox
    t: float = 0.0

    def record(self) -> dict[str, Any]:
        return {
            "t": round(self.t, 3),
            "method": self.method,
            "host": self.host,
            "port": self.port,
            "allowed": self.allowed,
            **({"address": self.address} if self.address else {}),
            **({"reason": self.reason} if self.reason else {}),
            "bytes_out": self.bytes_out,
            "bytes_in": self.bytes_in,
        }


@dataclass
class NetworkLog:
    """The session's connections: the first :data:`MAX_RECORDS` one by one, all counted."""

    connections: list[Connection] = field(default_factory=list)
    allowed: int = 0
    refused: int = 0
    bytes: int = 0
    dropped: int = 0

    def add(self, connection: Connection) -> None:
        if len(self.connections) < MAX_RECORDS:
            self.connections.append(connection)
        else:
            self.dropped += 1

    def summary(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "refused": self.refused,
            "bytes": self.bytes,
            "connections": [c.record() for c in self.connections],
            **({"not_listed": self.dropped} if self.dropped else {}),
        }


class NetworkProxy:
    """The session's filtering proxy on a Unix socket (module doc), in a thread of its own."""

    def __init__(self, allow_hosts: Sequence[str], path: Path, resolver: Resolver | None = None):
        self.entries = [parse_entry(entry) for entry in allow_hosts]
        self.path = path
        self.resolver = resolver or system_resolver
        self.log = NetworkLog()
        self.started = time.perf_counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="ape-net-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._open: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Listen on :attr:`path` (owner-only); OSError when that cannot be done."""
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        try:
            future.result(timeout=10)
        except BaseException:
            self.close()
            raise

    async def _listen(self) -> None:
        self.path.unlink(missing_ok=True)
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=HEAD_BYTES)
        self.path.chmod(0o600)

    def close(self) -> None:
        """Stop listening, cut open connections, end the thread (the log stays readable)."""
        if self._loop.is_closed():
            return
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()
        self.path.unlink(missing_ok=True)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._open):
            task.cancel()
        if self._open:
            await asyncio.wait(self._open, timeout=5)

    # -- one connection ------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._open.add(task)
        try:
            await self._request(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._open.discard(task)
            writer.close()

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(method="?", host="?", port=0, t=time.perf_counter() - self.started)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError) as exc:
            if isinstance(exc, asyncio.IncompleteReadError) and not exc.partial:
                return  # opened and closed without a word: nothing asked
            conn.reason = "no complete request head"
            self._refuse(conn, writer, Refused(400, conn.reason))
            return
        try:
            method, host, port, forward = parse_head(head)
            conn.method, conn.host, conn.port = method, host, port
            if len(self._open) > MAX_CONNECTIONS:
                raise Refused(503, f"more than {MAX_CONNECTIONS} connections open at once")
            entry = next((e for e in self.entries if e.allows(host, port)), None)
            if entry is None:
                raise Refused(403, f"{HostPort(host, port)} is not in [sandbox] allow_hosts")
            upstream_reader, upstream = await self._connect(entry, conn)
        except Refused as refused:
            self._refuse(conn, writer, refused)
            return
        conn.allowed = True
        self.log.allowed += 1
        self.log.add(conn)
        try:
            if forward is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream.write(forward)
                self._count(conn, "bytes_out", len(forward))
            await asyncio.gather(
                self._pipe(reader, upstream, conn, "bytes_out"),
                self._pipe(upstream_reader, writer, conn, "bytes_in"),
            )
        finally:
            upstream.close()

    async def _connect(self, entry: HostPort, conn: Connection) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the first permitted address of the entry's host (module doc)."""
        try:
            resolved = await asyncio.wait_for(self.resolver(conn.host, conn.port), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise Refused(502, f"cannot resolve {conn.host}: {exc}") from None
        addresses = permitted(entry, resolved)
        if not addresses:
            shown = ", ".join(resolved) or "nothing"
            raise Refused(
                403,
                f"{conn.host} resolves to {shown}: a loopback, private or link-local address is not reached "
                "unless allow_hosts names that address",
            )
        failure: Exception | None = None
        for address in addresses:
            try:
                opened = await asyncio.wait_for(asyncio.open_connection(address, conn.port), CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                failure = exc
                continue
            conn.address = address
            return opened
        raise Refused(502, f"cannot connect to {conn.host}:{conn.port}: {failure}")

    def _refuse(self, conn: Connection, writer: asyncio.StreamWriter, refused: Refused) -> None:
        conn.reason = refused.reason
        self.log.refused += 1
        self.log.add(conn)
        body = f"APE sandbox: {refused.reason}\n".encode()
        phrase = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable"}
        writer.write(
            f"HTTP/1.1 {refused.status} {phrase.get(refused.status, 'Error')}\r\n"
            f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )

    def _count(self, conn: Connection, direction: str, size: int) -> None:
        setattr(conn, direction, getattr(conn, direction) + size)
        self.log.bytes += size

    async def _pipe(
        self, source: asyncio.StreamReader, target: asyncio.StreamWriter, conn: Connection, count: str
    ) -> None:
        """Copy ``source`` to ``target`` until its end, counting bytes; then half-close ``target``."""
        try:
            while data := await source.read(CHUNK):
                target.write(data)
                self._count(conn, count, len(data))
                await target.drain()
            if target.can_write_eof():
                target.write_eof()
        except OSError:
            target.close()


def parse_head(head: bytes) -> tuple[str, str, int, bytes | None]:
    """(method, canonical host, port, the head to send on) of a request head; the head is
    None for ``CONNECT`` (a tunnel). A plain request must be ``http://`` in absolute form;
    its head goes on in origin form, with the URL's host as ``Host``, the proxy's headers
    dropped and ``Connection: close`` (one request per connection). :class:`Refused` 400 otherwise."""
    lines = head.split(b"\r\n")
    try:
        method, target, version = lines[0].decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise Refused(400, "the request line is not 'METHOD target HTTP/1.x'") from None
    if not version.startswith("HTTP/1."):
        raise Refused(400, f"{version!r} is not HTTP/1.x")
    if method == "CONNECT":
        try:
            where = split_host_port(target, port_required=True)
        except ValueError as exc:
            raise Refused(400, f"CONNECT target: {exc}") from None
        assert where.port is not None
        return method, where.host, where.port, None
    url = urlsplit(target)
    if url.scheme != "http" or not url.netloc or "@" in url.netloc:
        said = f"got {target[:100]!r}"
        raise Refused(400, f"a plain request must name an http:// URL without user ({said}); use CONNECT for https")
    try:
        where = split_host_port(url.netloc)
    except ValueError as exc:
        raise Refused(400, f"request URL: {exc}") from None
    port = where.port or 80
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    headers = [
        line for line in lines[1:] if line and line.split(b":", 1)[0].strip().lower() not in HOP_HEADERS | {b"host"}
    ]
    host = str(HostPort(where.host, None if port == 80 else port))
    forward = b"\r\n".join(
        [f"{method} {path} {version}".encode(), f"Host: {host}".encode(), *headers, b"Connection: close", b"", b""]
    )
    return method, where.host, port, forward


# The forwarder, run in each command's namespace before the command (module doc): python -I -S
# -c FORWARDER PORT SOCKET COMMAND... It listens first, so the command never finds the port
# closed, then runs the command as its child and relays until the command ends; it exits with
# the command's exit code (128 + N for a signal N, as a shell reports it). One thread, and only
# built-in modules (_socket and select, not socket and selectors, whose imports of enum and
# collections doubled its start), so it adds little to each command (docs/agents.md).
FORWARDER = r"""
import _socket as S, os, select, sys
port, path, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
listener = S.socket(S.AF_INET, S.SOCK_STREAM)
listener.setsockopt(S.SOL_SOCKET, S.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(128)
listener.setblocking(False)
child = os.fork()
if child == 0:
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"ape sandbox: cannot run {argv[0]}: {exc.strerror}\n")
    os._exit(127)
R, W, CAP = select.POLLIN, select.POLLOUT, 262144
poll = select.poll()
poll.register(listener.fileno(), R)
try:
    done = os.pidfd_open(child)
    poll.register(done, R)
except (AttributeError, OSError):
    done = -1
socks, peer, out, ended, shut = {}, {}, {}, set(), set()
def drop(f):
    for x in (f, peer.get(f)):
        if x in socks:
            try:
                poll.unregister(x)
            except KeyError:
                pass
            socks.pop(x).close()
            del peer[x], out[x]
            ended.discard(x)
            shut.discard(x)
def update(f):
    want = (R if f not in ended and len(out[peer[f]]) < CAP else 0) | (W if out[f] else 0)
    if want:
        poll.register(f, want)
    else:
        try:
            poll.unregister(f)
        except KeyError:
            pass
def settle(f):
    o = peer[f]
    for x in (f, o):
        if peer[x] in ended and not out[x] and x not in shut:
            shut.add(x)
            try:
                socks[x].shutdown(S.SHUT_WR)
            except OSError:
                pass
    if f in ended and o in ended and not out[f] and not out[o]:
        drop(f)
    else:
        update(f)
        update(o)
while True:
    for f, mask in poll.poll(None if done >= 0 else 200):
        if f == listener.fileno():
            try:
                inner = S.socket(fileno=listener._accept()[0])
            except OSError:
                continue
            outer = S.socket(S.AF_UNIX, S.SOCK_STREAM)
            try:
                outer.connect(path)
            except OSError:
                inner.close()
                outer.close()
                continue
            a, b = inner.fileno(), outer.fileno()
            for x, y, s in ((a, b, inner), (b, a, outer)):
                s.setblocking(False)
                socks[x], peer[x], out[x] = s, y, bytearray()
                poll.register(x, R)
            continue
        if f not in socks:
            continue
        s = socks[f]
        try:
            if mask & (R | select.POLLHUP | select.POLLERR):
                data = s.recv(65536)
                if data:
                    out[peer[f]] += data
                else:
                    ended.add(f)
            if mask & W and out[f]:
                del out[f][: s.send(out[f])]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            drop(f)
            continue
        if f in socks:
            settle(f)
    pid, status = os.waitpid(child, os.WNOHANG)
    if pid == 0:
        continue
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)
"""
