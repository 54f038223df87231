"""What ended an agent's command: a limit of the sandbox, the agent's own doing, or the machine.

A command killed by the kernel reads, from outside, as an exit code: 137 for SIGKILL, 152
for SIGXCPU, 153 for SIGXFSZ. Which of them a limit sent is told apart here, so that the
agent reads "out of memory" rather than a bare 137 and the session's record counts the
limits its commands met:

- **memory**: as root, each command runs in a memory cgroup of ``[sandbox] memory_bytes``
  (all its processes together; :class:`MemoryCgroup`, v1 or v2). The kernel's count of
  OOM kills in that cgroup says the limit killed a process; the cgroup's count of limit
  hits tells that apart from the machine running out of memory (the global OOM killer, which
  also counts there): the machine's lack is no doing of the agent, and
  :func:`classify` answers ``"machine_oom"`` for the caller to raise an infrastructure error.
  Without a cgroup (not root) only ``RLIMIT_AS`` binds: an allocation past it fails inside
  the process (Python's ``MemoryError``), which the agent reads in its stderr.
- **cpu**: ``RLIMIT_CPU`` is set with a soft limit one second below the hard one, so the
  kernel sends SIGXCPU (exit 152) first, which names the limit; a process that ignores it
  gets SIGKILL at the hard limit.
- **file_size**: SIGXFSZ (exit 153) is sent only for a write past ``RLIMIT_FSIZE``.

A SIGKILL with no OOM kill counted is the agent's own (``kill -9``) or, without a cgroup,
possibly the machine's OOM killer: it is said as such, not guessed at.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from pathlib import Path

log = logging.getLogger("ape.agent")

V1_MEMORY = Path("/sys/fs/cgroup/memory")
PEAK_SHARE = 0.9  # a v1 cgroup whose peak came this near its limit met it (the kernel reclaims before)
SIGKILL_EXIT = 128 + signal.SIGKILL
SIGXCPU_EXIT = 128 + signal.SIGXCPU
SIGXFSZ_EXIT = 128 + signal.SIGXFSZ

# what the agent reads after "exit code: N", per limit
REASONS = {
    "memory": "a process was killed: out of memory, the command's processes together passed [sandbox] memory_bytes",
    "cpu": "a process was killed at the CPU time limit, [sandbox] cpu_seconds",
    "file_size": "a process was killed writing a file past [sandbox] file_bytes",
    "sigkill": "killed by SIGKILL",
}


class MemoryCgroup:
    """A memory cgroup for one command: at most ``limit`` bytes of its processes' memory,
    no swap; its OOM kills counted. ``path`` is a v2 folder shared with the pids cgroup
    (``own`` false: one v2 cgroup holds both), or a v1 folder of its own."""

    def __init__(self, path: Path, v2: bool, own: bool):
        self.path, self.v2, self.own = path, v2, own

    @classmethod
    def make(cls, limit: int, shared: Path | None) -> MemoryCgroup | None:
        """A memory cgroup of ``limit`` bytes, or None where none can be made (not root, no
        controller). ``shared`` is the command's v2 pids cgroup folder, if any: v2 puts a
        process in one cgroup, so the memory limit goes on that folder."""
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            return None
        try:
            if shared is not None and (shared / "memory.max").exists():
                (shared / "memory.max").write_text(str(limit))
                _try_write(shared / "memory.swap.max", "0")
                return cls(shared, v2=True, own=False)
            if not (V1_MEMORY / "memory.limit_in_bytes").exists():
                return None
            path = V1_MEMORY / f"ape-agent-{uuid.uuid4().hex}"
            path.mkdir()
            (path / "memory.limit_in_bytes").write_text(str(limit))
            _try_write(path / "memory.memsw.limit_in_bytes", str(limit))  # no swap either, where accounted
            return cls(path, v2=False, own=True)
        except OSError as exc:
            log.debug("no memory cgroup: %s", exc)
            return None

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started by a shell that first moves itself into this cgroup (v1; a shared
        v2 folder is entered through its pids cgroup's wrapper)."""
        if not self.own:
            return argv
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def events(self) -> tuple[int, int]:
        """(OOM kills in this cgroup, times its limit was met); (0, 0) when unreadable."""
        try:
            if self.v2:
                fields = _fields((self.path / "memory.events").read_text())
                return fields.get("oom_kill", 0), fields.get("oom", 0) + fields.get("max", 0)
            kills = _fields((self.path / "memory.oom_control").read_text()).get("oom_kill", 0)
            # v1 counts limit hits in failcnt, but not while a memsw limit is set (seen on Linux
            # 6.x): the peak reaching the limit says the same
            limit = _number(self.path / "memory.limit_in_bytes")
            peak = max(
                _number(self.path / "memory.max_usage_in_bytes"), _number(self.path / "memory.memsw.max_usage_in_bytes")
            )
            hits = _number(self.path / "memory.failcnt") + (1 if limit and peak >= limit * PEAK_SHARE else 0)
            return kills, hits
        except (OSError, ValueError):
            return 0, 0

    def close(self) -> None:
        """Remove a v1 folder of its own (its processes are killed first)."""
        if not self.own:
            return
        pause = 0.001
        for _ in range(60):
            try:
                for pid in (self.path / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        log.warning("could not remove the cgroup %s", self.path)


def _try_write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError:
        pass


def _number(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _fields(text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            found[parts[0]] = int(parts[1])
    return found


def classify(exit_code: int, oom: tuple[int, int] | None) -> str | None:
    """Which limit (a key of :data:`REASONS`) ended a command, ``"machine_oom"`` when the
    machine's OOM killer did (no limit of the cgroup met), None for an ordinary exit.
    ``oom`` is :meth:`MemoryCgroup.events`, None without a memory cgroup."""
    kills, hits = oom if oom is not None else (0, 0)
    if kills:
        return "memory" if hits else "machine_oom"
    if exit_code == SIGXCPU_EXIT:
        return "cpu"
    if exit_code == SIGXFSZ_EXIT:
        return "file_size"
    if exit_code == SIGKILL_EXIT:
        return "sigkill"
    return None
