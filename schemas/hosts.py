"""Host entries of ``[sandbox] allow_hosts`` and request targets, parsed and compared exactly.

An entry names one host, and optionally one port: ``api.example.org`` (ports 443 and 80),
``pypi.org:443``, ``127.0.0.1:8080``, ``[::1]:8080``. No scheme, path, user, wildcard or
pattern: a host is reached only when the request names it letter for letter (after
lower-casing and dropping a trailing dot), so ``evil.example.org.attacker.net`` never
matches ``example.org`` and ``2130706433`` never matches ``127.0.0.1``. The same parser
reads the agent's request targets (:mod:`ape.tasks.agent.network`), so an entry and a
target are compared in one canonical form.
"""

from __future__ import annotations

import ipaddress
import re
from typing import NamedTuple

DEFAULT_PORTS = (443, 80)  # an entry without a port allows HTTPS and plain HTTP
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")


class HostPort(NamedTuple):
    """A host in canonical form (lower-case name, or an IP address as ``ipaddress`` writes
    it, IPv6 without brackets) and a port (None in an entry: :data:`DEFAULT_PORTS`)."""

    host: str
    port: int | None

    def allows(self, host: str, port: int) -> bool:
        """Whether this entry names ``host`` (canonical) at ``port``."""
        return host == self.host and (port in DEFAULT_PORTS if self.port is None else port == self.port)

    @property
    def address(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        """The IP address the entry names literally, or None for a name."""
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


def canonical_host(text: str) -> str:
    """``text`` as a canonical host: an IP address as ``ipaddress`` writes it, or a DNS name
    in lower case without a trailing dot. ValueError says what is wrong with it."""
    host = text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            return str(ipaddress.IPv6Address(host))
        except ValueError:
            raise ValueError(f"'{text}' is not an IPv6 address in brackets") from None
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    name = host.lower().removesuffix(".")
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"'{text}' is not a host name (letters, digits, '-' and '.'; no scheme, path or wildcard)")
    if labels[-1].isdigit():  # 127.1 or 2130706433: the C library reads these as addresses
        raise ValueError(f"'{text}' is neither a host name nor a whole IP address")
    return name


def split_host_port(text: str, *, port_required: bool = False) -> HostPort:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` as a :class:`HostPort`; a bare IPv6
    address is read whole. ValueError says what is wrong."""
    text = text.strip()
    host, port = text, None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"'{text}': an IPv6 address in brackets lacks its ']'")
        host, rest = text[: end + 1], text[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"'{text}': only ':port' may follow ']'")
            port = rest[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    if port is not None:
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"'{text}': the port must be a number from 1 to 65535")
    elif port_required:
        raise ValueError(f"'{text}' names no port")
    return HostPort(canonical_host(host), int(port) if port is not None else None)


def parse_entry(text: str) -> HostPort:
    """One ``allow_hosts`` entry; ValueError names what to write instead."""
    if not isinstance(text, str):
        raise ValueError(f'{text!r} is not a string; write a host as "name" or "name:port"')
    if "://" in text or "/" in text or "@" in text or "*" in text or any(c.isspace() for c in text.strip()):
        raise ValueError(
            f"'{text}' is not a host: write only the host and, if needed, the port "
            '("api.example.org", "pypi.org:443", "127.0.0.1:8080"); no scheme, path, user or wildcard'
        )
    return split_host_port(text)
