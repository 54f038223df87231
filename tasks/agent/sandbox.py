"""One agent session's sandbox: a working folder that persists across the session's commands.

An :class:`AgentSandbox` is made when a session starts (``[sandbox]``,
:class:`ape.schemas.config.SandboxConfig`): a fresh owner-only folder, seeded from the item
(``files_field``, ``seed_dir/<item id>/``). Every command (:meth:`AgentSandbox.run`) starts
its own bubblewrap namespace, built by :func:`ape.tasks.checking.code.sandbox.bwrap_argv`
like code_exec's: no network, the system read-only, a private ``/tmp``, nothing of the
home folder, APE_HOME, the config or the output folder, and the working folder bound
read-write at ``/task`` (with ``allow_hosts``, the session's filtering proxy is reached
through a forwarder in each namespace: :mod:`ape.tasks.agent.network`). When the command's
first process ends, its PID namespace ends and
the kernel kills whatever it left behind, so no process of the agent outlives its command:
between two commands (and after the session) nothing of the agent runs, which is what lets
the ``files`` tool and the grading step read the folder without a race.

Limits per command: wall clock (``command_timeout_s``, then the namespace is killed), CPU
seconds, address space, file size and open files through ``prlimit``, processes through
``RLIMIT_NPROC`` and, as root (where the kernel ignores it), a pids cgroup; as root also a
memory cgroup, whose OOM kills are told to the agent as such (:mod:`ape.tasks.agent.kills`).
Per session: the working folder's ``disk_bytes`` (:mod:`ape.tasks.agent.quota`). The session's
commands together get ``session_timeout_s``; past it :class:`SandboxTimeLimit` ends the
session with that reason. A sandbox that cannot be made or started, or is killed from
outside the agent's reach (its outer process by a signal, a process by the machine's OOM
killer), raises :class:`SandboxError`: an infrastructure failure, recorded ERROR and redone
by ``ape retry``.
"""

from __future__ import annotations

import logging
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ape.schemas.config import SandboxConfig
from ape.tasks.agent import quota
from ape.tasks.agent.archive import ArchiveError, find_archive, unpack
from ape.tasks.agent.kills import REASONS, MemoryCgroup, classify
from ape.tasks.agent.network import SOCKET_IN_SANDBOX, NetworkProxy, forwarder_argv, proxy_env
from ape.tasks.checking.code import sandbox as namespaces
from ape.tasks.solving.stops import InfrastructureError, SessionLimit

log = logging.getLogger("ape.agent")

TASK_DIR = "/task"  # the working folder inside the sandbox
TESTS_DIR = "/tests"  # the grading step's fresh, read-only tests
OPEN_FILES = 256
PREFIX = "ape-agent-"  # every working folder's name starts so
PROXY_PREFIX = "ape-net-"  # a proxy socket's own folder, where the working folder's path is too long
OWNER_FILE = ".ape-owner"  # an earlier layout's owner mark, a file beside the working folder (still swept)
KEPT_FILE = ".ape-kept"  # beside the working folder: kept on purpose ([sandbox] keep), never swept
PROXY_FILE = "proxy.sock"  # beside the working folder: the session's network proxy ([sandbox] allow_hosts)
SOCKET_PATH_MAX = 100  # a Unix socket's path holds at most 107 bytes on Linux


class SandboxError(InfrastructureError):
    """The sandbox could not be made or started: an infrastructure error, not the agent's."""


class SandboxTimeLimit(SessionLimit):
    """The session's commands together ran past ``[sandbox] session_timeout_s``."""

    reason = "sandbox_time_limit"


class SandboxDiskLimit(SessionLimit):
    """The working folder holds more than ``[sandbox] disk_bytes`` where the quota is only
    measured (:mod:`ape.tasks.agent.quota`)."""

    reason = "disk_limit"


@dataclass
class CommandResult:
    """What one command left: its exit code (124 when killed at its time limit), its output,
    and the limit that killed one of its processes (a key of
    :data:`ape.tasks.agent.kills.REASONS`), if one did."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    killed: str | None = None
    disk_full: bool = False  # the working folder's quota (disk_bytes) has no room left

    def text(self) -> str:
        """The tool's reply to the model: exit code (and what killed it), then stdout and stderr."""
        said = " (killed at the time limit)" if self.timed_out else ""
        if self.killed is not None and not self.timed_out:
            said = f" ({REASONS[self.killed]})"
        parts = [f"exit code: {self.exit_code}{said}"]
        if self.stdout:
            parts.append(f"stdout:\n{self.stdout}")
        if self.stderr:
            parts.append(f"stderr:\n{self.stderr}")
        if self.disk_full:
            parts.append("note: the working folder is full ([sandbox] disk_bytes); writes past it fail")
        return "\n".join(parts)


def cut(data: bytes, limit: int) -> str:
    """``data`` as text, at most ``limit`` bytes of it: the head and the tail, with the cut said."""
    if len(data) <= limit:
        return data.decode("utf-8", "replace")
    half = limit // 2
    dropped = len(data) - 2 * half
    return (
        data[:half].decode("utf-8", "replace")
        + f"\n[... {dropped} bytes cut ...]\n"
        + data[-half:].decode("utf-8", "replace")
    )


def _write_tree(root: Path, files: dict[str, Any], where: str) -> None:
    """Write ``relative path -> text`` below ``root``; a path leaving it is a SandboxError."""
    for name, content in files.items():
        relative = Path(str(name))
        if relative.is_absolute() or ".." in relative.parts:
            raise SandboxError(f"{where}: the path {name!r} leaves the folder; use relative paths without '..'")
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(str(content), encoding="utf-8")


def _copy_tree(source: Path, target: Path) -> None:
    """Copy a folder's content (links copied as links, never followed out of it)."""
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)


def _field(item: Any, name: str) -> Any:
    value = getattr(item, name, None)
    if value is None and isinstance(item, dict):
        value = item.get(name)
    return value


class AgentSandbox:
    """One session's working folder and the commands run in it (module doc)."""

    def __init__(self, cfg: SandboxConfig, item: Any, item_id: str, run_index: int = 0):
        started = time.perf_counter()
        self.cfg = cfg
        self.item = item
        self.item_id = item_id
        self.used_s = 0.0
        self.limits_hit: dict[str, int] = {}  # limit -> commands of this session it killed
        self.closed = False
        self.prefix: tuple[str, ...] = ()
        self.proxy: NetworkProxy | None = None
        self._proxy_dir: str | None = None  # a short folder of its own, where the home's path is too long
        if cfg.isolation == "bwrap":
            try:
                self.prefix = namespaces.prefix("bwrap")
            except namespaces.SandboxUnavailable as exc:
                raise SandboxError(f"[sandbox] isolation = 'bwrap': {exc}") from None
        base = cfg.root if cfg.root is not None else None
        try:
            if base is not None:
                base.mkdir(parents=True, exist_ok=True)
            sweep_stale(base)
            # the owner is in the name, so the folder never exists without it (a kill -9 at any point)
            prefix = f"{PREFIX}{_safe(item_id)}-{run_index}-{_owner_tag()}-"
            self.home = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
            self.folder = self.home / "task"
            self.folder.mkdir(mode=0o700)
            self.quota = "none"  # none, enforced (a tmpfs of disk_bytes) or measured
            if cfg.disk_bytes is not None:
                self.quota = "enforced" if quota.mount(self.folder, cfg.disk_bytes) else "measured"
            self.seed()
            if cfg.allow_hosts and self.prefix:
                self.proxy = self._start_proxy()
        except (SandboxError, OSError) as exc:
            self._stop_proxy()
            if hasattr(self, "home"):
                quota.unmount(self.home / "task")
                shutil.rmtree(self.home, ignore_errors=True)
            if isinstance(exc, SandboxError):
                raise
            raise SandboxError(f"cannot make the sandbox's working folder: {exc}") from None
        self.start_s = time.perf_counter() - started
        self.teardown_s = 0.0

    # -- the network ---------------------------------------------------------------------
    def _start_proxy(self) -> NetworkProxy:
        """The session's filtering proxy, on a Unix socket beside the working folder (or in a
        short owner-only folder of its own where that path is too long for a socket)."""
        path = self.home / PROXY_FILE
        if len(str(path)) > SOCKET_PATH_MAX:
            # owned like a working folder, so the stale sweep removes it after a kill -9
            self._proxy_dir = tempfile.mkdtemp(prefix=f"{PROXY_PREFIX}{_owner_tag()}-")
            path = Path(self._proxy_dir) / PROXY_FILE
        proxy = NetworkProxy(self.cfg.allow_hosts, path)
        try:
            proxy.start()
        except OSError as exc:
            raise SandboxError(
                f"[sandbox] allow_hosts: cannot start the session's network proxy at {path}: {exc}"
            ) from None
        return proxy

    def _stop_proxy(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        if self._proxy_dir is not None:
            shutil.rmtree(self._proxy_dir, ignore_errors=True)
            self._proxy_dir = None

    def network(self) -> dict[str, Any] | None:
        """The session's connections (:meth:`ape.tasks.agent.network.NetworkLog.summary`);
        None without ``allow_hosts``."""
        return self.proxy.log.summary() if self.proxy is not None else None

    # -- the folder ----------------------------------------------------------------------
    def seed(self) -> None:
        """The item's files: the ``files_field`` table, then its archive in ``archive_dir``
        (:mod:`ape.tasks.agent.archive`), then ``seed_dir/<item id>/``."""
        if self.cfg.files_field:
            files = _field(self.item, self.cfg.files_field)
            if not isinstance(files, dict):
                raise SandboxError(
                    f"[sandbox] files_field: the item's field '{self.cfg.files_field}' is "
                    f"{type(files).__name__}, expected a table of relative path -> text"
                )
            _write_tree(self.folder, files, f"item '{self.item_id}' field '{self.cfg.files_field}'")
        if self.cfg.archive_dir is not None:
            try:
                archive = find_archive(self.cfg.archive_dir, self.item_id)
                if archive is not None:
                    unpack(archive, self.folder, file_bytes=self.cfg.file_bytes, total_bytes=self.cfg.archive_bytes)
            except ArchiveError as exc:
                raise SandboxError(str(exc)) from None
        if self.cfg.seed_dir is not None:
            source = self.cfg.seed_dir / self.item_id
            if source.is_dir():
                _copy_tree(source, self.folder)

    def fresh_tests(self) -> Path | None:
        """The item's tests, written now into a folder the agent never saw; None without tests."""
        files = _field(self.item, self.cfg.test_files_field) if self.cfg.test_files_field else None
        source = self.cfg.tests_dir / self.item_id if self.cfg.tests_dir is not None else None
        if not files and not (source is not None and source.is_dir()):
            return None
        tests = self.home / "tests"
        shutil.rmtree(tests, ignore_errors=True)
        tests.mkdir(mode=0o700)
        if isinstance(files, dict):
            _write_tree(tests, files, f"item '{self.item_id}' field '{self.cfg.test_files_field}'")
        if source is not None and source.is_dir():
            _copy_tree(source, tests)
        return tests

    # -- commands ------------------------------------------------------------------------
    def _env(self, tests: Path | None = None) -> dict[str, str]:
        """The whole environment of a command: nothing of the run's; ``TESTS_DIR`` names the
        grading step's tests (``/tests`` in a namespace)."""
        home = TASK_DIR if self.prefix else str(self.folder)
        env = {
            "HOME": home,
            "TMPDIR": "/tmp" if self.prefix else str(self.home),
            "PATH": namespaces.SANDBOX_PATH,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if tests is not None:
            env["TESTS_DIR"] = TESTS_DIR if self.prefix else str(tests)
        if self.proxy is not None:
            env.update(proxy_env())
        return env

    def _limits(self) -> list[str]:
        cfg = self.cfg
        return [
            "prlimit",
            f"--cpu={cfg.cpu_seconds}:{cfg.cpu_seconds + 1}",  # SIGXCPU first: it names the limit
            f"--as={cfg.memory_bytes}",
            f"--fsize={cfg.file_bytes}",
            f"--nofile={OPEN_FILES}",
            f"--nproc={cfg.processes}",
            "--core=0",
            "--",
        ]

    def argv(self, command: list[str], tests: Path | None = None) -> list[str]:
        """The whole command line: the namespace (when isolated), the limits, ``command``."""
        if not self.prefix:
            return [*self._limits(), *command]
        binds: list[tuple[str, str, bool]] = [(str(self.folder), TASK_DIR, True)]
        if tests is not None:
            binds.append((str(tests), TESTS_DIR, False))
        forwarder: list[str] = []
        if self.proxy is not None:  # outside the limits, which are the agent's; inside the cgroups
            binds.append((str(self.proxy.path), SOCKET_IN_SANDBOX, False))
            forwarder = forwarder_argv(sys.executable)
        disable = "--disable-userns" in self.prefix
        wrapper = namespaces.bwrap_argv(
            disable_userns=disable, binds=tuple(binds), chdir=TASK_DIR, env=self._env(tests)
        )
        return [*wrapper, *forwarder, *self._limits(), *command]

    def run(
        self,
        command: list[str],
        *,
        stdin: bytes = b"",
        tests: Path | None = None,
        timeout_s: float | None = None,
        counted: bool = True,
    ) -> CommandResult:
        """Run ``command`` in the working folder, within the limits (module doc).

        ``counted`` commands draw on the session's time (``session_timeout_s``); when that is
        spent, :class:`SandboxTimeLimit` is raised, before or after the command.
        """
        if self.closed:
            raise SandboxError("the session's sandbox is closed")
        limit = timeout_s if timeout_s is not None else self.cfg.command_timeout_s
        if counted:
            left = self.cfg.session_timeout_s - self.used_s
            if left <= 0:
                raise SandboxTimeLimit(f"the session's commands ran {self.used_s:.1f} s, its limit")
            limit = min(limit, left)
        argv = self.argv(command, tests)
        cgroup: namespaces.PidsCgroup | None = None
        root = namespaces.pids_cgroup_root() if self.prefix else None
        memory: MemoryCgroup | None = None
        oom: tuple[int, int] | None = None
        if root is not None:
            cgroup = namespaces.PidsCgroup(root, self.cfg.processes + 8)
        if self.prefix:  # as root: the memory of all the command's processes together, OOM kills counted
            memory = MemoryCgroup.make(self.cfg.memory_bytes, cgroup.path if cgroup is not None else None)
        if memory is not None:
            argv = memory.wrap(argv)
        if cgroup is not None:
            argv = cgroup.wrap(argv)
        started = time.perf_counter()
        with (
            tempfile.TemporaryFile(dir=self.home) as out,
            tempfile.TemporaryFile(dir=self.home) as err,
            tempfile.TemporaryFile(dir=self.home) as options,
        ):
            if self.prefix:
                argv = hide_options(argv, options)
            try:
                process = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=err,
                    env=self._env(tests),
                    # the namespace's pid 1 (bubblewrap) starts in "/", so its environment
                    # (the cgroup wrapper's shell sets PWD) names no folder of the host
                    cwd="/" if self.prefix else str(self.folder),
                    start_new_session=True,
                    pass_fds=(options.fileno(),) if self.prefix else (),
                )
            except OSError as exc:
                if cgroup is not None:
                    cgroup.close()
                if memory is not None:
                    memory.close()
                raise SandboxError(f"the sandbox did not start: {exc}") from None
            try:
                timed_out = _wait(process, stdin, limit)
            finally:
                _kill(process)
                oom = memory.events() if memory is not None else None
                if cgroup is not None:
                    cgroup.close()
                if memory is not None:
                    memory.close()
            seconds = time.perf_counter() - started
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        if counted:
            self.used_s += seconds
        code = 124 if timed_out else process.returncode
        if self.prefix and _did_not_start(code, stderr, argv):
            raise SandboxError(f"the sandbox did not start: {stderr.decode('utf-8', 'replace').strip()[:500]}")
        if self.prefix and code < 0 and not timed_out:
            # the namespace's outer process, out of the agent's sight (another PID namespace),
            # was killed: by the machine or an operator, not by the agent
            raise SandboxError(f"the sandbox was killed from outside (signal {-code}) while running a command")
        killed = None if timed_out else classify(code, oom)
        if killed == "machine_oom":
            raise SandboxError(
                "the machine ran out of memory and its OOM killer killed a process of the sandbox "
                "(the command's own memory limit was not reached)"
            )
        if killed is not None and killed != "sigkill":
            self.limits_hit[killed] = self.limits_hit.get(killed, 0) + 1
        result = CommandResult(
            exit_code=code,
            stdout=cut(stdout, self.cfg.output_bytes),
            stderr=cut(stderr, self.cfg.output_bytes),
            timed_out=timed_out,
            seconds=seconds,
            killed=killed,
        )
        if counted and timed_out and self.used_s >= self.cfg.session_timeout_s:
            raise SandboxTimeLimit(f"the session's commands ran {self.used_s:.1f} s, its limit")
        self._check_disk(result, counted)
        return result

    def _check_disk(self, result: CommandResult, counted: bool) -> None:
        """Say a full quota to the agent (enforced) or end the session past it (measured)."""
        if self.quota == "enforced" and quota.full(self.folder):
            result.disk_full = True
            self.limits_hit["disk"] = self.limits_hit.get("disk", 0) + 1
        elif self.quota == "measured" and counted:
            size = quota.used(self.folder)
            if self.cfg.disk_bytes is not None and size > self.cfg.disk_bytes:
                self.limits_hit["disk"] = self.limits_hit.get("disk", 0) + 1
                limit = self.cfg.disk_bytes
                raise SandboxDiskLimit(f"the working folder holds {size} bytes, over [sandbox] disk_bytes ({limit})")

    def bash(self, command: str) -> CommandResult:
        return self.run(["bash", "-c", command])

    def python(self, code: str) -> CommandResult:
        # this interpreter: the sandbox binds in its folders; code on stdin, the folder on sys.path
        return self.run([sys.executable, "-"], stdin=code.encode("utf-8"))

    # -- the end -------------------------------------------------------------------------
    def close(self) -> None:
        """Remove the working folder (kept with ``keep = true``, and said so)."""
        if self.closed:
            return
        started = time.perf_counter()
        self.closed = True
        self._stop_proxy()
        if self.cfg.keep:
            (self.home / KEPT_FILE).write_text("[sandbox] keep = true\n", encoding="utf-8")  # no sweep removes it
            if self.quota == "enforced":  # the tmpfs goes with its mount: keep a copy on disk
                kept = self.home / "task-kept"
                shutil.copytree(self.folder, kept, symlinks=True)
                quota.unmount(self.folder)
                shutil.rmtree(self.folder, ignore_errors=True)
                kept.rename(self.folder)
            log.info("sandbox of %s kept at %s ([sandbox] keep = true)", self.item_id, self.home)
        else:
            quota.unmount(self.folder)
            shutil.rmtree(self.home, ignore_errors=True)
        self.teardown_s = time.perf_counter() - started

    def __enter__(self) -> AgentSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _owner(pid: int) -> str | None:
    """``pid start-time`` of a live process (the start time tells a reused pid apart), or
    None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return f"{pid} {fields[19]}" if len(fields) > 19 else str(pid)


def _owner_tag() -> str:
    """This process's ``pid.start-time``, the part of a folder's name that says who made it
    (no ``-``, which separates the name's parts; empty where ``/proc`` cannot tell)."""
    return (_owner(os.getpid()) or "").replace(" ", ".")


def _named_owner(home: Path) -> str | None:
    """The ``pid start-time`` a folder's name carries (``<prefix>…-<pid>.<start>-<random>``), or
    that of an earlier layout's owner file; None when it names no owner."""
    parts = home.name.rsplit("-", 2)
    if len(parts) == 3 and re.fullmatch(r"\d+\.\d+", parts[1]):
        return parts[1].replace(".", " ")
    try:
        owner = (home / OWNER_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return owner if re.fullmatch(r"\d+ \d+", owner) else None


def _stale(home: Path) -> bool:
    """Whether ``home`` is a working folder of this user whose maker is gone (killed before its
    session's end). Another user's folder, a kept one and one naming no owner are never stale."""
    try:
        if home.lstat().st_uid != os.getuid() or (home / KEPT_FILE).exists():
            return False
    except OSError:
        return False
    owner = _named_owner(home)
    if owner is None:
        return False
    return _owner(int(owner.split()[0])) != owner


_swept: set[str] = set()


def _prefixed(where: Path, prefix: str) -> list[Path]:
    """The folders under ``where`` whose name starts with ``prefix`` (none where it cannot be read)."""
    try:
        return [path for path in where.iterdir() if path.name.startswith(prefix) and path.is_dir()]
    except OSError:
        return []


def sweep_stale(base: Path | None) -> list[Path]:
    """Remove the working folders under ``base`` (the system's temporary folder for None) left by
    a process that died mid-session (``kill -9``, a power cut): a session's own ``close`` never
    ran for them. Done once per process and folder, when its first sandbox is made, so a rerun
    that resumes a killed run leaves none behind. Only this user's folders whose name carries an
    owner that is gone are touched: a kept folder (``keep``) is marked so, a live run's owner
    lives, and the owner is in the name from the moment the folder exists."""
    where = Path(base) if base is not None else Path(tempfile.gettempdir())
    key = str(where)
    if key in _swept:
        return []
    _swept.add(key)
    removed = []
    candidates = _prefixed(where, PREFIX)
    if PROXY_PREFIX not in _swept:  # the proxies' short folders are always in the system's one
        _swept.add(PROXY_PREFIX)
        candidates += _prefixed(Path(tempfile.gettempdir()), PROXY_PREFIX)
    for home in candidates:
        if not home.is_symlink() and _stale(home):
            quota.unmount(home / "task")  # a tmpfs quota the killed run left mounted
            shutil.rmtree(home, ignore_errors=True)
            removed.append(home)
    if removed:
        log.info("removed %d working folder(s) left by a killed run under %s", len(removed), where)
    return removed


def _wait(process: subprocess.Popen[bytes], stdin: bytes, limit: float) -> bool:
    """Give the command ``stdin`` and wait for its end; True when ``limit`` seconds passed first.

    Waits on a pidfd, which wakes the moment the command ends: ``Popen.wait(timeout)`` polls
    with sleeps doubling up to 50 ms, which made every command end on a step of about 32 ms
    (a ``true`` took 33 or 66 ms). Falls back to it where pidfds are missing (Linux < 5.3)."""
    try:
        done = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        try:
            process.communicate(stdin, timeout=limit)
            return False
        except subprocess.TimeoutExpired:
            return True
    assert process.stdin is not None
    writer = threading.Thread(target=_feed, args=(process.stdin, stdin), daemon=True)
    writer.start()
    try:
        ready, _, _ = select.select([done], [], [], limit)
    finally:
        os.close(done)
    if not ready:
        return True
    process.wait()
    writer.join(timeout=1)  # a command that ended without reading: its pipe is broken, the write ends
    return False


def _feed(pipe: Any, data: bytes) -> None:
    """Write a command's stdin and close it (in a thread: a command that never reads it must
    not hold up the wait for its time limit)."""
    try:
        if data:
            pipe.write(data)
    except OSError:
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def hide_options(argv: list[str], options: Any) -> list[str]:
    """``argv`` with bubblewrap's options moved into the file ``options`` (``--args FD``).

    Bubblewrap is the namespace's pid 1, so its command line is the agent's to read in
    ``/proc/1/cmdline``; its options name the working folder's path on the host and more.
    Read from a descriptor, they never appear there (bubblewrap closes it before the
    command starts). The cgroups' wrappers before bubblewrap stay; a command line without
    bubblewrap is returned as it is."""
    start = next((at for at, word in enumerate(argv) if os.path.basename(word) == "bwrap"), None)
    if start is None or "--" not in argv[start:]:
        return argv
    end = argv.index("--", start)
    options.write(b"".join(word.encode() + b"\0" for word in argv[start + 1 : end]))
    options.flush()
    options.seek(0)
    return [*argv[: start + 1], "--args", str(options.fileno()), *argv[end:]]


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill a command's namespace and its process group; reap it."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            process.kill()
        except OSError:
            pass
    process.wait()


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:40]


def _did_not_start(code: int, stderr: bytes, argv: list[str]) -> bool:
    """Whether a command's namespace never started: bubblewrap's own failure (exit code 1,
    its ``bwrap:`` message) or the cgroup wrapper's shell failing to run it (126, 127)."""
    if code == 1 and stderr.startswith(b"bwrap:"):
        return True
    wrapper = next((word for word in argv if word.endswith("bwrap")), "bwrap")
    return code in (126, 127) and wrapper.encode() in stderr[:300] and b"exec" in stderr[:300]
