"""code_exec: run model-written code against an item's tests in a sandbox, score the share passed.

:func:`run_code` hands one candidate and its tests to a pre-started interpreter
(``python -I`` running :mod:`ape.tasks.checking.code.harness` inside the sandbox chosen by
:mod:`ape.tasks.checking.code.sandbox`), waits for it, kills it with everything it started, and
scores what came back.

Trust: the parent parses the tests itself, so it knows how many there are. Inside the
sandbox the harness runs the tests in a process of its own and the candidate's code in a
forked one, and only plain data crosses between them (see the harness and
:mod:`ape.tasks.checking.code.wire`). The tests' process writes one record per test to an
anonymous pipe whose descriptor is not named in argv or the environment and that the
candidate's process never holds; every record must begin with a random key sent only
inside the job. The parent counts at most one passing record per test, in order, so
``0 <= score <= 1`` always; a missing record (the candidate's process ended, a time limit)
is a test not passed, and files the candidate writes are never read.

Speed: interpreters are started ahead of need by a :class:`WarmPool` (one per
sandbox kind and process), so a check pays only for sending the job and running it.

Infrastructure failures are errors, never scores: the harness announces with a keyed
start record that it holds the job, before any candidate code runs. A sandbox that
ends or hangs before that record (a launcher that cannot create its namespaces, an
interpreter that cannot start, no processes left) has not run the candidate at all, so
it is started again, and after :data:`START_ATTEMPTS` tries :func:`run_code` raises
:class:`SandboxError`, which the check stage records as a check error (counted, shown,
redone by a rerun) instead of a score of 0 charged to the model. The candidate's
``timeout_s`` is counted from the start record, so a slow sandbox start on a busy
machine cannot eat the candidate's time either.
"""

from __future__ import annotations

import ast
import atexit
import json
import math
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ape.tasks.checking.code import sandbox as sandboxes
from ape.tasks.checking.code.sandbox import SandboxKind, SandboxSetting

# the wire format's functions first (its `from __future__` import leads the text), then the harness
HARNESS_SOURCE = "\n".join(
    Path(__file__).with_name(name).read_text(encoding="utf-8") for name in ("wire.py", "harness.py")
)

FILE_LIMIT_BYTES = 16 * 1024 * 1024
OPEN_FILES = 256
PROCESSES = 64
_TAIL = 2000
_MAX_FAILURES = 5
_MAX_CHANNEL_BYTES = 4 * 1024 * 1024
_POOL_SIZE = 3
START_LIMIT_S = 15.0  # a sandbox that has not started its harness by then is broken, not slow
DONE_EXIT_S = 2.0  # a harness that reported its tests done exits within this (its interpreter shutting down)
START_ATTEMPTS = 2  # tries at starting a sandbox for one check before it is a SandboxError
_RESTART_PAUSE_S = 0.5


class NoTestsError(ValueError):
    """The item's tests are missing, empty or only comments: nothing could be checked."""


class SandboxError(RuntimeError):
    """No sandbox could be started for a check: the candidate's code never ran.

    An infrastructure failure (the message says what the sandbox reported), so the
    check is an error to fix and redo, not a score.
    """


class CodeExecResult(BaseModel):
    """What one run of candidate code against its tests did."""

    model_config = ConfigDict(extra="forbid")

    score: float = Field(ge=0.0, le=1.0, description="passed / total; 0 when nothing ran.")
    passed: int = Field(default=0, description="Tests that passed, as the harness reported them under its key.")
    total: int = Field(default=0, description="Tests counted by APE: top-level asserts, or 1 for a script without any.")
    timed_out: bool = Field(default=False, description="The time limit ended the run.")
    error: str | None = Field(default=None, description="Why tests did not run, if they did not.")
    failures: list[str] = Field(default_factory=list, description="First failing tests' errors.")
    exit_code: int | None = Field(default=None, description="The sandboxed interpreter's exit code.")
    duration_s: float = Field(default=0.0, description="From the harness's start to its end.")
    start_s: float = Field(default=0.0, description="Waiting for a started sandbox, before the time limit ran.")
    stdout_tail: str = Field(default="", description="The end of what the code printed.")
    stderr_tail: str = Field(default="", description="The end of its error output.")
    sandbox: SandboxKind = Field(default="none", description="The isolation used: bwrap, unshare or none.")
    rejected_records: int = Field(default=0, description="Lines on the channel without the key.")


def count_tests(tests: str) -> int:
    """How many tests ``tests`` holds: its top-level asserts, or 1 for a script without any.

    0 for an empty or comment-only text (the caller reports that as an error); a
    SyntaxError propagates.
    """
    tree = ast.parse(tests, "tests.py")
    asserts = sum(isinstance(node, ast.Assert) for node in tree.body)
    return asserts or (1 if tree.body else 0)


@dataclass(frozen=True)
class _PoolKey:
    kind: SandboxKind
    python: str


def peek_exit(process: subprocess.Popen[bytes], timeout: float = 0.0) -> int | None:
    """The exit code of ``process`` (negative: killed by that signal), or None while it runs,
    without reaping it.

    A reaped process's id can be given to a new process at once, and every sandbox leads a
    process group named by its id; :meth:`_Sandbox.kill` signals that group. Reaping only in
    ``kill`` (after the group is signalled) keeps the id reserved until then, so a recycled
    id can never make it kill another check's sandbox.
    """
    if process.returncode is not None or not hasattr(os, "waitid"):
        return process.poll() if process.returncode is None else process.returncode
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # already reaped elsewhere
            return process.poll()
        if info is not None and info.si_pid:
            killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
            return -info.si_status if killed else info.si_status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def _above_prelude_fds(fd: int) -> int:
    """``fd`` moved to a number that a sandbox's start-up script leaves alone (it may use 3-9)."""
    import fcntl  # POSIX only, like the namespaces that need it

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, sandboxes.FIRST_FREE_FD)
    os.close(fd)
    return moved


class _Sandbox:
    """One started interpreter waiting for its job, with its pipes and temporary folder."""

    def __init__(self, key: _PoolKey):
        self.kind = key.kind
        self.root = Path(tempfile.mkdtemp(prefix="ape-code-"))
        self.cgroup: sandboxes.PidsCgroup | None = None
        read_end, write_end = os.pipe()
        if key.kind != "none":
            write_end = _above_prelude_fds(write_end)
        self.channel = read_end
        self.channel_fd = write_end
        stdout = (self.root / "stdout.txt").open("wb")
        stderr = (self.root / "stderr.txt").open("wb")
        if key.kind == "none":
            work = self.root / "work"
            work.mkdir()
            self.workdir = str(work)
            argv = [key.python, "-I", "-c", HARNESS_SOURCE]
            env = sandboxes.base_env(str(work))
            cwd: str | None = str(work)
        else:
            self.workdir = sandboxes.SANDBOX_HOME
            argv = [*sandboxes.prefix(key.kind), key.python, "-I", "-c", HARNESS_SOURCE]
            env = {"PATH": os.environ.get("PATH", sandboxes.SANDBOX_PATH)}
            cwd = None
            root = sandboxes.pids_cgroup_root()
            if root is not None:
                self.cgroup = sandboxes.PidsCgroup(root, PROCESSES + 8)
                argv = self.cgroup.wrap(argv)
        try:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=stdout,
                stderr=stderr,
                env=env,
                cwd=cwd,
                pass_fds=(write_end,),
                start_new_session=True,
            )
        except BaseException:
            os.close(read_end)
            if self.cgroup is not None:
                self.cgroup.close()
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        finally:
            stdout.close()
            stderr.close()
            os.close(write_end)

        self.stdout_tail = self.stderr_tail = ""

    def alive(self) -> bool:
        return peek_exit(self.process) is None

    def kill(self) -> None:
        """Kill the sandbox and everything in it; remove its folder and cgroup."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.kill()
        except OSError:
            pass
        self.process.wait()
        self.stdout_tail = _tail(self.root / "stdout.txt")
        self.stderr_tail = _tail(self.root / "stderr.txt")
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        try:
            os.close(self.channel)
        except OSError:
            pass
        if self.cgroup is not None:
            self.cgroup.close()
        shutil.rmtree(self.root, ignore_errors=True)


class WarmPool:
    """Interpreters started ahead of need, each used for one check and then killed.

    A daemon thread keeps ``size`` of them started; a check takes a ready one (or
    starts its own when none is), so the start-up of the next interpreter overlaps the
    current check. The thread lives as long as the process, which matters because a
    sandbox is killed when the thread that started it ends (``--die-with-parent``).
    """

    def __init__(self, key: _PoolKey, size: int = _POOL_SIZE):
        self.key = key
        self.size = size
        self._ready: deque[_Sandbox] = deque()
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._closed = False
        self._wanted.set()
        self._thread = threading.Thread(target=self._keep_filled, name="ape-code-exec-pool", daemon=True)
        self._thread.start()

    def take(self) -> _Sandbox:
        taken: _Sandbox | None = None
        with self._lock:
            while self._ready and taken is None:
                candidate = self._ready.popleft()
                if candidate.alive():
                    taken = candidate
                else:  # the machine killed it while it waited
                    candidate.kill()
        self._wanted.set()
        return taken if taken is not None else _Sandbox(self.key)

    def _keep_filled(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            while True:
                with self._lock:
                    if self._closed or len(self._ready) >= self.size:
                        break
                try:
                    fresh = _Sandbox(self.key)
                except OSError:  # out of processes or files: checks start their own
                    break
                with self._lock:
                    if self._closed:
                        fresh.kill()
                        return
                    self._ready.append(fresh)
            if self._closed:
                return

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ready, self._ready = list(self._ready), deque()
        self._wanted.set()
        for box in ready:
            box.kill()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)  # it kills what it was starting when it sees the close


_POOLS: dict[_PoolKey, WarmPool] = {}
_POOLS_LOCK = threading.Lock()


def pool_for(kind: SandboxKind) -> WarmPool:
    """The process-wide warm pool of one sandbox kind."""
    key = _PoolKey(kind, sys.executable)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = WarmPool(key)
        return pool


def _forget_pools_in_child() -> None:
    """A forked child must not use (or kill) the parent's waiting interpreters."""
    global _POOLS_LOCK
    _POOLS_LOCK = threading.Lock()
    _POOLS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_in_child)


@atexit.register
def close_pools() -> None:
    """Kill every interpreter still waiting (also called by tests)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - _TAIL))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


@dataclass
class _Collected:
    """What came back from one sandbox: the channel's bytes and when its phases ended."""

    data: bytes
    started_at: float | None  # monotonic time of the harness's start record; None if none came
    timed_out: bool  # the candidate's time limit ran out (only after the start record)


def _collect(box: _Sandbox, job: bytes, key: bytes, timeout_s: float, start_limit_s: float) -> _Collected:
    """Send the job, read the channel until the harness ends or time runs out.

    The job is written as the pipe takes it, inside the same wait, so a sandbox that
    never reads it cannot block the parent. The sandbox has ``start_limit_s`` to send
    its start record; the candidate's ``timeout_s`` runs from that record.
    """
    assert box.process.stdin is not None
    stdin = box.process.stdin.fileno()
    os.set_blocking(stdin, False)
    pending = memoryview(job)
    received = bytearray()
    started_at: float | None = None
    deadline = time.monotonic() + start_limit_s
    start = b"\n" + key + b" S\n"
    ends = (b"\n" + key + b" D\n", b"\n" + key + b" E ")
    with selectors.DefaultSelector() as selector:
        selector.register(box.channel, selectors.EVENT_READ)
        selector.register(stdin, selectors.EVENT_WRITE)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return _Collected(bytes(received), started_at, started_at is not None)
            for ready, _ in selector.select(left):
                if ready.fd == stdin:
                    try:
                        pending = pending[os.write(stdin, pending[:65536]) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # it died: nothing more to send
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(stdin)
                        box.process.stdin.close()
                    continue
                chunk = os.read(box.channel, 65536)
                if not chunk:  # every writer is gone: the harness (and the candidate) ended
                    return _Collected(bytes(received), started_at, False)
                if len(received) < _MAX_CHANNEL_BYTES:
                    received += chunk
                    window = b"\n" + received
                    if started_at is None and start in window:
                        started_at = time.monotonic()
                        deadline = started_at + timeout_s
                    if any(end in window for end in ends):
                        return _Collected(bytes(received), started_at, False)  # the harness is done (or gave up)


def _score(data: bytes, key: bytes, total: int) -> tuple[int, list[str], str | None, int]:
    """(passed, failures, error, rejected lines) from the channel's bytes.

    A record counts only with the key, only for the next test expected, and only once.
    """
    passed, expected, rejected = 0, 0, 0
    failures: list[str] = []
    error: str | None = None
    for line in data.split(b"\n"):
        if not line:
            continue
        if not line.startswith(key + b" "):
            rejected += 1
            continue
        parts = line[len(key) + 1 :].split(b" ", 3)
        if parts[0] in (b"D", b"S"):
            continue
        if parts[0] == b"E" and error is None:
            error = b" ".join(parts[1:]).decode("utf-8", "replace")
            continue
        if parts[0] != b"T" or len(parts) < 3 or parts[1] != str(expected).encode() or expected >= total:
            rejected += 1
            continue
        expected += 1
        if parts[2] == b"1" and len(parts) == 3:
            passed += 1
        else:
            failures.append(parts[3].decode("utf-8", "replace") if len(parts) > 3 else "failed")
    return passed, failures, error, rejected


def _run_in_sandbox(
    kind: SandboxKind, fields: Mapping[str, object], key: bytes, timeout_s: float
) -> tuple[_Sandbox, _Collected, int | None]:
    """One sandbox from the pool, given the job and waited for; killed before returning."""
    box = pool_for(kind).take()
    try:
        job = json.dumps({**fields, "fd": box.channel_fd, "workdir": box.workdir}).encode("utf-8")
        collected = _collect(box, job, key, timeout_s, START_LIMIT_S)
        exit_code = peek_exit(box.process)
        if not collected.timed_out and exit_code is None:
            # it ended early: its exit status; or it said it was done and is exiting: waited for,
            # so the saved exit code does not depend on how fast the interpreter shut down
            finished = (b"\n" + key + b" D\n") in b"\n" + collected.data
            exit_code = peek_exit(box.process, timeout=DONE_EXIT_S if finished else 0.5)
    finally:
        box.kill()  # also when the harness ended: its children die with the namespace
    return box, collected, exit_code


def _start_failure(box: _Sandbox, exit_code: int | None) -> str:
    """Why a sandbox never started its harness, in the launcher's own words where it gave any."""
    what = f"no start within {START_LIMIT_S:g} s" if exit_code is None else f"exit code {exit_code}"
    said = [line.strip() for line in box.stderr_tail.splitlines() if line.strip()]
    return f"{what}: {said[-1][:160]}" if said else what


def _job_fields(code: str, tests: str, key: bytes, timeout_s: float, memory_mb: int) -> dict[str, object]:
    """The job the harness reads: the code, the tests, the run's key and its limits."""
    return {
        "key": key.decode("ascii"),
        "code": code,
        "tests": tests,
        "limits": {
            "memory_bytes": memory_mb * 1024 * 1024,
            "cpu_seconds": math.ceil(timeout_s) + 1,
            "file_bytes": FILE_LIMIT_BYTES,
            "open_files": OPEN_FILES,
            "processes": PROCESSES,
        },
    }


def _started_run(
    kind: SandboxKind, fields: Mapping[str, object], key: bytes, timeout_s: float
) -> tuple[_Sandbox, _Collected, int | None]:
    """The job run in a sandbox that started, tried up to :data:`START_ATTEMPTS` times;
    :class:`SandboxError` when none did (the code never ran)."""
    problems: list[str] = []
    for attempt in range(START_ATTEMPTS):
        if attempt:
            time.sleep(_RESTART_PAUSE_S)
        try:
            box, collected, exit_code = _run_in_sandbox(kind, fields, key, timeout_s)
        except OSError as exc:  # no process or file left to start one
            problems.append(f"could not launch it: {exc}")
            continue
        if collected.started_at is not None:
            break
        problems.append(_start_failure(box, exit_code))
    else:
        raise SandboxError(
            f"the {kind} sandbox failed to start ({START_ATTEMPTS} tries), the code was not run: "
            f"{problems[-1]}; fix the sandbox, then rerun to check again"
        )
    return box, collected, exit_code


def run_code(
    code: str,
    tests: str,
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    sandbox: SandboxSetting = "auto",
) -> CodeExecResult:
    """Run ``code`` and then ``tests`` in a sandboxed Python process; count the tests passed.

    Each top-level ``assert`` statement in ``tests`` is one test; the other top-level
    statements are setup and run in order between them (a failing setup statement
    ends the run and the remaining tests count as failed). Tests without any top-level
    ``assert`` (for example a ``check(candidate)`` function followed by a call to it)
    are one test that passes when the whole script runs without an exception.
    The score is the share of tests passed; code that fails before the tests scores 0.

    Limits: ``timeout_s`` of wall time (then the sandbox is killed, and the tests that
    finished still count), CPU time, ``memory_mb`` of address space, 16 MiB per file,
    256 open files, 64 processes; the time limit starts when the sandbox has started
    and holds the job. Raises :class:`NoTestsError` when ``tests`` holds no statement,
    ValueError for bad limits, :class:`ape.tasks.checking.code.sandbox.SandboxUnavailable` when an
    explicit sandbox cannot run, and :class:`SandboxError` when no sandbox started in
    :data:`START_ATTEMPTS` tries (the code never ran, so there is no score to give).
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if memory_mb <= 0:
        raise ValueError(f"memory_mb must be positive, got {memory_mb}")
    try:
        total = count_tests(tests)
    except SyntaxError as exc:
        return CodeExecResult(
            score=0.0, error=f"the tests do not parse: SyntaxError: {exc.msg} (tests.py line {exc.lineno})"
        )
    if total == 0:
        raise NoTestsError("the tests are empty (no statement to run, only blank lines or comments)")
    kind = sandboxes.resolve(sandbox)
    key = secrets.token_hex(16).encode("ascii")
    fields = _job_fields(code, tests, key, timeout_s, memory_mb)
    asked = time.monotonic()
    box, collected, exit_code = _started_run(kind, fields, key, timeout_s)
    ended, started_at = time.monotonic(), collected.started_at
    assert started_at is not None  # the loop ends early only for a sandbox that started
    data, timed_out = collected.data, collected.timed_out
    passed, failures, error, rejected = _score(data, key, total)
    ran = passed + len(failures)
    if not timed_out and error is None and ran < total:
        # the harness ends only after its last record (the candidate's own exit ends the solution
        # process, which the harness reports), and it is the namespace's init, which nothing inside
        # can kill: the sandbox was ended from outside (an operator, the host's out-of-memory
        # killer), whatever the launcher's exit code; what the code would have scored is unknown
        raise SandboxError(
            f"the {kind} sandbox was killed from outside during the check (exit code {exit_code}) after "
            f"{ran} of {total} tests, so the code's result is unknown; rerun to check again"
        )
    if timed_out:
        error = f"time limit of {timeout_s:g} s reached after {ran} of {total} tests"
    return CodeExecResult(
        score=min(1.0, max(0.0, passed / total)),
        passed=passed,
        total=total,
        timed_out=timed_out,
        error=error,
        failures=failures[:_MAX_FAILURES],
        exit_code=exit_code,
        duration_s=ended - started_at,
        start_s=started_at - asked,
        stdout_tail=box.stdout_tail,
        stderr_tail=box.stderr_tail,
        sandbox=kind,
        rejected_records=rejected,
    )
