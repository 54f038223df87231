"""Prove that a listening TCP port belongs to a process APE started, before APE talks to it.

Why: APE starts servers (``prefect server start``, llama-cpp-python's server) on a port it
picks, and the port is in a command line every local user can read. A server takes
seconds to import, so another user can bind that port first and answer the health check:
APE would then send it its credentials, prompts and flow runs, and take its answers. An
answer on the port proves nothing; the kernel's socket table does. On Linux,
``/proc/net/tcp`` and ``/proc/net/tcp6`` list every listening socket with its owner's uid
and its inode, and ``/proc/<pid>/fd`` links name the sockets (``socket:[inode]``) a
process holds. A port is APE's when every socket listening where APE connects is held by
the child APE spawned (or one of its descendants: a server may listen in a worker
process) and belongs to this user. Once that holds, nobody else can bind the port while
the child lives (the kernel refuses a second listener on a taken address, except for
``SO_REUSEPORT`` sockets of the same user).

Elsewhere (macOS, Windows: no ``/proc``) the socket table is not readable without extra
tools or privileges: :func:`supported` is False, and callers fall back to checking only
that their child is alive, with one warning line that says the port could not be proven.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ape.schemas.errors import ApeError

try:
    import pwd
except ImportError:  # not POSIX: users are named by uid alone
    pwd = None  # type: ignore[assignment]

__all__ = [
    "Listener",
    "PortCheck",
    "check_port",
    "describe",
    "listeners",
    "process_tree",
    "supported",
    "wait_owned",
]

PROC = Path("/proc")
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's "st" column
_WILDCARDS = ("0.0.0.0", "::")


@dataclass(frozen=True)
class Listener:
    """One listening TCP socket from the kernel's table."""

    address: str
    port: int
    uid: int
    inode: int


@dataclass(frozen=True)
class PortCheck:
    """What holds ``port``: ``owned`` when at least one socket listens there and every one is
    the child's; ``stranger`` names what holds the first one that is not (None when none)."""

    owned: bool
    listening: bool
    stranger: str | None = None


def supported() -> bool:
    """Whether this system shows its socket table and process fds (Linux's /proc)."""
    return (PROC / "net" / "tcp").is_file() and (PROC / "self" / "fd").is_dir()


def _address(hex_address: str) -> str:
    """``0100007F`` -> ``127.0.0.1``; IPv6 in the kernel's four little-endian words."""
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def listeners(port: int) -> list[Listener]:
    """Every TCP socket listening on ``port`` (any address, IPv4 and IPv6) in this network
    namespace, as the kernel lists them."""
    found = []
    for name in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            hex_address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) != port:
                continue
            found.append(Listener(_address(hex_address), port, int(fields[7]), int(fields[9])))
    return found


def _reaches(listener: Listener, host: str) -> bool:
    """Whether a connection to ``host`` could land on ``listener``: the same address, a
    wildcard (an IPv6 wildcard may take IPv4 too) or the IPv4-mapped form of ``host``."""
    return listener.address in (host, *_WILDCARDS, f"::ffff:{host}")


def process_tree(pid: int) -> set[int]:
    """``pid`` and every process descended from it (read from /proc/*/stat)."""
    parents: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name in parentheses may hold spaces: the parent pid follows its ")"
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = {pid}, [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree


def _sockets(pid: int) -> set[int]:
    """The inodes of the sockets process ``pid`` holds (empty when it is gone or not ours)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in (PROC / str(pid) / "fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def _holders(inode: int) -> list[int]:
    """The pids whose fds hold socket ``inode``, among the processes this user may inspect."""
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and inode in _sockets(int(entry.name)):
            found.append(int(entry.name))
    return found


def _user(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})" if pwd is not None else f"uid {uid}"
    except KeyError:
        return f"uid {uid}"


def describe(listener: Listener) -> str:
    """``pid 123 (python3) of uid 1001 (bob)``: what holds a socket, as far as this user can see."""
    parts = []
    for pid in _holders(listener.inode)[:3]:
        try:
            name = (PROC / str(pid) / "comm").read_text().strip()
        except OSError:
            name = "?"
        parts.append(f"pid {pid} ({name})")
    if not parts:
        parts.append("a process this user cannot see")
    return f"{', '.join(parts)} of {_user(listener.uid)}"


def check_port(pid: int, host: str, port: int) -> PortCheck:
    """Whether the sockets that take connections to ``host:port`` are all held by ``pid``'s
    process tree and belong to this user (see the module's docstring)."""
    candidates = [item for item in listeners(port) if _reaches(item, host)]
    if not candidates:
        return PortCheck(owned=False, listening=False)
    ours = set().union(*(_sockets(member) for member in process_tree(pid)))
    uid = os.geteuid()
    for item in candidates:
        if item.inode not in ours or item.uid != uid:
            return PortCheck(owned=False, listening=True, stranger=f"{describe(item)} on {item.address}")
    return PortCheck(owned=True, listening=True)


def wait_owned(
    pid: int,
    host: str,
    port: int,
    *,
    exited: Callable[[], str | None],
    timeout_s: float,
    what: str,
    where: str,
    log_line: Callable[[], str] = lambda: "",
    hint: str = "another program took the port first; stop it, or start again (a new port is chosen)",
    progress: Callable[[], bool] | None = None,
    slow_hint: str = "a busy machine may need longer; read the log",
) -> None:
    """Wait until ``pid``'s tree listens on ``host:port``; only then may anything be sent there.

    Raises a one-line :class:`ApeError` (``where``: the child's log) as soon as another
    process's socket takes the port (it won the race for it: the child will fail with
    "address already in use"), when the child ends first (``exited()`` says how, e.g.
    "exited with code 1"; None while it runs), or after ``timeout_s``. ``progress``: called
    while waiting; True (the child's log grew, say) starts the ``timeout_s`` afresh, so a slow
    start that is getting on is not cut off. Linux only: callers check :func:`supported` first.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        check = check_port(pid, host, port)
        if check.owned:
            return
        if check.stranger is not None:
            raise ApeError(
                f"port {port} is held by {check.stranger}, not by {what}; nothing was sent to it",
                where=where,
                hint=hint,
            )
        ended = exited()
        if ended is not None:
            line = log_line()
            raise ApeError(
                f"{what} {ended} before listening on port {port}" + (f": {line}" if line else ""),
                where=where,
                hint="read the log for the cause",
            )
        if progress is not None and progress():
            deadline = time.monotonic() + timeout_s
        if time.monotonic() > deadline:
            raise ApeError(
                f"{what} did not listen on port {port} within {timeout_s:g} s"
                + (" of no progress in its log" if progress is not None else ""),
                where=where,
                hint=slow_hint,
            )
        time.sleep(0.1)
