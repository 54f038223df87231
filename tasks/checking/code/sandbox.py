"""Isolation for model-written code: Linux namespaces through bubblewrap or unshare.

:func:`resolve` turns the ``[checker.args] sandbox`` setting into the kind used:

``bwrap``
    bubblewrap: new user (unprivileged uid 65534), PID, network, IPC, UTS and mount
    namespaces; ``/`` read-only, a fresh ``/proc`` that shows only the sandbox, a
    minimal ``/dev``, a private size-limited tmpfs at ``/tmp`` (the working folder;
    a virtual environment of this Python under ``/tmp`` is bound back in, read-only),
    no further user namespaces (bwrap 0.8 and later), a new terminal session, killed with
    its parent.
``unshare``
    util-linux ``unshare`` with the same namespaces; a small shell prelude mounts the
    tmpfs, remounts every other mount read-only and drops every capability
    (``setpriv``) before the interpreter starts.
``none``
    no namespaces (macOS, or a container that forbids them): the limits alone.
``auto``
    the first of bwrap, unshare, none that works here; falling back to ``none``
    is logged once per process as a warning.

Whatever the kind, the interpreter starts with an environment holding nothing of the
run's (no API keys, no Prefect settings), its own session, and resource limits set by
the harness (:mod:`ape.tasks.checking.code.harness`). Every sandbox is used for one check
only and then killed with everything it started; killing the namespace's first
process takes all the others with it.

Linux does not enforce ``RLIMIT_NPROC`` for processes of the global root user, so
when APE runs as root, the process count of a sandbox is also bounded with a pids
cgroup where one is writable (:func:`pids_cgroup_root`).
"""

from __future__ import annotations

import functools
import logging
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Literal

log = logging.getLogger("ape.sandbox")

SandboxSetting = Literal["auto", "bwrap", "unshare", "none"]
SandboxKind = Literal["bwrap", "unshare", "none"]
KINDS: tuple[SandboxKind, ...] = ("bwrap", "unshare", "none")

SANDBOX_HOME = "/tmp"  # the private tmpfs inside a namespace sandbox
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
TMPFS_BYTES = 64 * 1024 * 1024
FIRST_FREE_FD = 10  # descriptors passed to a sandbox are numbered from here; 3-9 are the prelude's


class SandboxUnavailable(RuntimeError):
    """The requested sandbox cannot be created on this machine (the reason is the message)."""


def base_env(home: str) -> dict[str, str]:
    """The whole environment of the candidate: nothing from the run's own environment."""
    return {"HOME": home, "TMPDIR": home, "PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def hidden_interpreter_folders() -> tuple[str, ...]:
    """The folders of this Python that the sandbox's private ``/tmp`` would hide.

    A virtual environment made under ``/tmp`` (common in CI) keeps its interpreter link,
    ``pyvenv.cfg`` and packages there; without them the sandbox cannot start Python at
    all. These folders are bound back in, read-only, at the same paths.
    """
    home = SANDBOX_HOME.rstrip("/") + "/"
    found = {
        os.path.normpath(path)
        for path in (
            sys.prefix,
            sys.base_prefix,
            os.path.dirname(sys.executable),
            os.path.dirname(os.path.realpath(sys.executable)),
        )
        if os.path.normpath(path).startswith(home)
    }
    return tuple(sorted(path for path in found if not any(path.startswith(other + "/") for other in found)))


def bwrap_argv(tmpfs_bytes: int = TMPFS_BYTES, *, disable_userns: bool = True) -> list[str]:
    """The bubblewrap command line that precedes the interpreter."""
    argv = [
        *("bwrap", "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534"),
        *("--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"),
        *("--size", str(tmpfs_bytes), "--tmpfs", SANDBOX_HOME, "--chdir", SANDBOX_HOME, "--clearenv"),
    ]
    for folder in hidden_interpreter_folders():
        argv += ["--ro-bind", folder, folder]
    if disable_userns:
        argv.insert(8, "--disable-userns")
    for name, value in base_env(SANDBOX_HOME).items():
        argv += ["--setenv", name, value]
    return argv + ["--"]


# Runs as root of the new user namespace, before the interpreter: the private tmpfs (with
# the interpreter's folders it hides bound back in, through descriptors opened before it
# covers them), every other mount read-only, then every capability dropped for good. The
# interpreter runs as this shell's child, not in its place: the shell (the namespace's
# init) then exits with 128 + N when the interpreter is killed by signal N, as bwrap does,
# so a sandbox killed from outside reads as one (unshare's own re-raising of the signal fails
# in a user namespace and would report exit code 1).
_UNSHARE_PRELUDE = r"""
set -e
%s
mount -t tmpfs -o size=$APE_TMPFS,mode=1777,nosuid,nodev tmpfs /tmp
%s
awk '{print $5}' /proc/self/mountinfo | while read -r point; do
  case "$point" in /proc|/proc/*|/tmp) ;; *) mount -o remount,bind,ro "$point" 2>/dev/null || true ;; esac
done
touch /.ape-rw-probe 2>/dev/null && { echo "the root file system stayed writable" >&2; exit 97; }
cd /tmp
setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- env -i %s "$@"
"""


def unshare_argv(tmpfs_bytes: int = TMPFS_BYTES) -> list[str]:
    """The util-linux command line that precedes the interpreter."""
    env = " ".join(f"{name}={value}" for name, value in base_env(SANDBOX_HOME).items())
    opened: list[str] = []
    bound: list[str] = []
    for fd, folder in enumerate(map(shlex.quote, hidden_interpreter_folders()), start=3):
        opened.append(f"exec {fd}< {folder}")
        bound += [f"mkdir -p {folder}", f"mount --no-canonicalize --bind /proc/self/fd/{fd} {folder}", f"exec {fd}<&-"]
    script = _UNSHARE_PRELUDE % ("\n".join(opened), "\n".join(bound), env)
    return [
        *("setpriv", "--pdeathsig", "KILL", "--"),
        *("unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--net"),
        *("--mount", "--mount-proc", "--ipc", "--uts", "--"),
        *("env", "-i", f"APE_TMPFS={tmpfs_bytes}", "PATH=" + SANDBOX_PATH),
        *("sh", "-c", script, "ape-sandbox"),
    ]


def _probe(argv: list[str]) -> str | None:
    """None when ``argv + [true]`` runs; otherwise the reason it does not."""
    try:
        done = subprocess.run(argv + ["true"], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode == 0:
        return None
    return (done.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit code {done.returncode}"])[-1]


@functools.cache
def prefix(kind: SandboxKind) -> tuple[str, ...]:
    """The command prefix of a working sandbox of ``kind``; SandboxUnavailable if none here."""
    if kind == "none":
        return ()
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(f"{kind} needs Linux namespaces (this is {sys.platform})")
    tool = "bwrap" if kind == "bwrap" else "unshare"
    if shutil.which(tool) is None or (kind == "unshare" and shutil.which("setpriv") is None):
        package = "bubblewrap" if kind == "bwrap" else "util-linux"
        raise SandboxUnavailable(f"'{tool}' is not installed (Debian package {package})")
    candidates = [bwrap_argv(), bwrap_argv(disable_userns=False)] if kind == "bwrap" else [unshare_argv()]
    reasons = []
    for argv in candidates:
        reason = _probe(argv)
        if reason is None:
            return tuple(argv)
        reasons.append(reason)
    raise SandboxUnavailable(f"{tool} cannot create namespaces here: {reasons[0]}")


_warned = threading.Lock()
_warned_once: set[str] = set()


def resolve(setting: SandboxSetting) -> SandboxKind:
    """The sandbox kind to use for ``setting``; SandboxUnavailable for an explicit one that fails.

    ``auto`` falls back to ``none`` with one loud warning per process.
    """
    if setting != "auto":
        prefix(setting)
        return setting
    reasons = []
    for kind in ("bwrap", "unshare"):
        try:
            prefix(kind)
            return kind
        except SandboxUnavailable as exc:
            reasons.append(f"{kind}: {exc}")
    with _warned:
        if "auto" not in _warned_once:
            _warned_once.add("auto")
            log.warning(
                "code_exec: NO SANDBOX. Linux namespaces are not available here (%s); model-written "
                "code runs with resource limits only and can read and write what this process can. "
                'Install bubblewrap, or set [checker.args] sandbox = "none" to accept this.',
                "; ".join(reasons),
            )
    return "none"


@functools.cache
def pids_cgroup_root() -> Path | None:
    """A writable pids cgroup folder (v2 with the pids controller, or v1), or None.

    Only needed as root, where the kernel ignores ``RLIMIT_NPROC``.
    """
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    candidates = [Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")]
    for root in candidates:
        if not (root / "cgroup.procs").exists():
            continue
        if root == Path("/sys/fs/cgroup"):
            controllers = root / "cgroup.controllers"
            if not controllers.exists() or "pids" not in controllers.read_text().split():
                continue
        probe = root / f"ape-probe-{uuid.uuid4().hex[:8]}"
        try:
            probe.mkdir()
            ok = (probe / "pids.max").exists()
            probe.rmdir()
        except OSError:
            continue
        if ok:
            return root
    return None


class PidsCgroup:
    """One pids cgroup per sandbox: at most ``limit`` processes, removed when closed."""

    def __init__(self, root: Path, limit: int):
        self.path = root / f"ape-sandbox-{uuid.uuid4().hex}"
        self.path.mkdir()
        (self.path / "pids.max").write_text(str(limit))

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started by a shell that first moves itself into this cgroup."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def close(self) -> None:
        procs = self.path / "cgroup.procs"
        pause = 0.001
        for _ in range(60):
            try:
                pids = procs.read_text().split()
            except OSError:
                return
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            try:
                self.path.rmdir()
                return
            except OSError:  # killed processes take a moment to leave
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        log.warning("could not remove the cgroup %s", self.path)
