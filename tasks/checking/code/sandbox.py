"""Isolation for model-written code: Linux namespaces through bubblewrap or unshare.

:func:`resolve` turns the ``[checker.args] sandbox`` setting into the kind used:

``bwrap``
    bubblewrap: new user (unprivileged uid 65534), PID, network, IPC, UTS and mount
    namespaces; a root that shows only what the interpreter needs (``/usr``, the
    ``/bin``/``/lib`` links, ``/etc/ld.so.cache`` and ``/etc/localtime``, the
    interpreter's own folders: :func:`interpreter_folders`), read-only; a fresh ``/proc``
    that shows only the sandbox, a minimal read-only ``/dev``, private size-limited tmpfs
    at ``/dev/shm`` and ``/tmp`` (the working folder), no further user namespaces (bwrap 0.8
    and later), a new terminal session, killed with its parent; the interpreter is the PID
    namespace's init (``--as-pid-1``), so no process inside can kill it. The home folder, APE_HOME,
    the output and config folders and the rest of ``/etc`` are not there at all.
``unshare``
    util-linux ``unshare`` with the same namespaces; a small shell prelude builds the same
    view on a tmpfs, makes it the root (``pivot_root``), makes every mount but the
    private ones read-only and drops every capability (``setpriv``) before the
    interpreter replaces it as the PID namespace's init.
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
SHM_BYTES = 16 * 1024 * 1024  # /dev/shm: POSIX semaphores and shared memory, a private tmpfs of its own
FIRST_FREE_FD = 10  # descriptors passed to a sandbox are numbered from here; 3-9 are the prelude's
# What a sandbox sees of the machine besides the interpreter's own folders: the system's
# programs and libraries (a link, such as /bin -> usr/bin on a merged /usr, stays a link)
# and the only files of /etc that the dynamic loader and the interpreter read.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


class SandboxUnavailable(RuntimeError):
    """The requested sandbox cannot be created on this machine (the reason is the message)."""


def base_env(home: str) -> dict[str, str]:
    """The whole environment of the candidate: nothing from the run's own environment."""
    return {"HOME": home, "TMPDIR": home, "PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _system_folders() -> list[tuple[str, str | None]]:
    """The system folders here: (path, link target) for a link, (path, None) for a folder."""
    found: list[tuple[str, str | None]] = []
    for path in SYSTEM_FOLDERS:
        if os.path.islink(path):
            found.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            found.append((path, None))
    return found


def _loader_folders(executable: str) -> set[str]:
    """The folders of the shared libraries ``executable`` loads, as ``ldd`` names them.

    Most are system folders; an interpreter built with its own ``libpython`` (pyenv, conda,
    a Nix store) has them elsewhere. Empty where ``ldd`` is missing or fails.
    """
    ldd = shutil.which("ldd")
    if ldd is None:
        return set()
    try:
        done = subprocess.run([ldd, executable], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    folders = set()
    for line in done.stdout.splitlines():
        words = line.replace("=>", " ").split()
        for word in words:
            if word.startswith("/"):
                folders.add(os.path.dirname(os.path.realpath(word)))
                break
    return folders


@functools.cache
def interpreter_folders() -> tuple[str, ...]:
    """The folders of this Python that a sandbox binds in, read-only, at the same paths.

    Its prefixes (a virtual environment's and its base's: the standard library and the
    site-packages), the folders of its executable (as named and with links resolved) and
    of the shared libraries it loads, less what the system folders already show. An
    interpreter under ``/root`` or a virtual environment under ``/tmp`` (as CI makes them)
    is bound in as that one folder: nothing else of its parents is visible.
    """
    named = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(sys.executable),
        os.path.dirname(os.path.realpath(sys.executable)),
        *_loader_folders(os.path.realpath(sys.executable)),
    }
    paths = {os.path.normpath(path) for path in named if path and os.path.isabs(path)}
    paths |= {os.path.realpath(path) for path in paths}
    system = [os.path.realpath(path) for path, _ in _system_folders()] + [path for path, _ in _system_folders()]
    wanted = {
        path
        for path in paths
        if os.path.isdir(path) and path != "/" and not any(_inside(path, folder) for folder in system)
    }
    folders = tuple(sorted(path for path in wanted if not any(path != o and _inside(path, o) for o in wanted)))
    home = os.path.realpath(os.path.expanduser("~"))
    for folder in folders:
        if _inside(home, os.path.realpath(folder)):
            log.warning(
                "code_exec: this Python's folder %s holds the home folder %s, so sandboxed code can read "
                "the home folder; install Python (or its virtual environment) in a folder of its own",
                folder,
                home,
            )
    return folders


def hidden_interpreter_folders() -> tuple[str, ...]:
    """The interpreter's folders under the sandbox's private ``/tmp`` (a venv made there)."""
    return tuple(path for path in interpreter_folders() if _inside(path, SANDBOX_HOME))


def bwrap_argv(
    tmpfs_bytes: int = TMPFS_BYTES,
    *,
    disable_userns: bool = True,
    binds: tuple[tuple[str, str, bool], ...] = (),
    chdir: str = SANDBOX_HOME,
    env: dict[str, str] | None = None,
    as_pid_1: bool = False,
) -> list[str]:
    """The bubblewrap command line that precedes the interpreter.

    The root is an empty tmpfs with only the system folders, two files of ``/etc``, the
    interpreter's folders, a fresh ``/proc``, a minimal read-only ``/dev`` with a capped
    ``/dev/shm``, and the capped private ``/tmp``; it is made read-only last. ``binds``
    (``(host folder, sandbox path, writable)``, used by the agent sandbox of
    :mod:`ape.tasks.agent.sandbox`) are added before that, so their mount points can be made.
    """
    argv = [
        *("bwrap", "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534"),
        *("--die-with-parent", "--new-session"),
    ]
    if as_pid_1:
        # the interpreter is the PID namespace's init: no process inside can SIGKILL it, so
        # the candidate's process cannot end the one that runs the tests
        argv.append("--as-pid-1")
    if disable_userns:
        argv.append("--disable-userns")
    for path, link in _system_folders():
        argv += ["--symlink", link, path] if link is not None else ["--ro-bind", path, path]
    for path in ETC_FILES:
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm"]
    argv += ["--remount-ro", "/dev", "--size", str(tmpfs_bytes), "--tmpfs", SANDBOX_HOME]
    for folder in interpreter_folders():
        argv += ["--ro-bind", folder, folder]
    for source, target, writable in binds:
        argv += ["--bind" if writable else "--ro-bind", source, target]
    argv += ["--remount-ro", "/", "--chdir", chdir, "--clearenv"]
    for name, value in (env if env is not None else base_env(SANDBOX_HOME)).items():
        argv += ["--setenv", name, value]
    return argv + ["--"]


# Runs as root of the new user namespace, before the interpreter. It builds the same view
# as bwrap's on a fresh tmpfs (mounted over /tmp, which this namespace alone sees; the
# interpreter's folders under /tmp are reached through descriptors opened before that),
# makes it the root with pivot_root and detaches the old one, makes every mount but /proc,
# /tmp and /dev/shm read-only, checks that, and drops every capability for good. Each
# program it runs costs a process start, so it uses as few as it can (empty files are made
# by redirection, folders by one mkdir, binds made read-only as they are made, and the
# last loop remounts only what is still writable). The interpreter replaces the shell
# (exec) and so is the PID namespace's init: no process inside can SIGKILL it, so the
# candidate's process (code_exec's harness forks it) cannot end the one that runs the
# tests. Killed from outside, it makes unshare exit 1 (its re-raising of the signal fails
# in a user namespace); code_exec reads any end of the harness before its last record as
# a sandbox killed from outside, whatever the exit code.
_UNSHARE_PRELUDE = r"""
set -e
%(opened)s
R=/tmp
mount -t tmpfs -o size=1m,mode=0755,nosuid,nodev ape-root "$R"
mkdir -p "$R/proc" "$R/dev" "$R/tmp" "$R/etc" %(folders)s
%(links)s
%(files)s
mount --rbind /proc "$R/proc"
mount -t tmpfs -o size=1m,mode=0755,nosuid ape-dev "$R/dev"
mkdir "$R/dev/shm"
for name in %(devices)s; do
  true > "$R/dev/$name"
  mount --bind -o ro "/dev/$name" "$R/dev/$name"
done
ln -s /proc/self/fd "$R/dev/fd"
mount -t tmpfs -o size=$APE_SHM,mode=1777,nosuid,nodev ape-shm "$R/dev/shm"
mount -t tmpfs -o size=$APE_TMPFS,mode=1777,nosuid,nodev ape-tmp "$R/tmp"
%(bound)s
cd "$R"
pivot_root . .
umount -l .
cd /
while read -r _ _ _ _ point options _; do
  case "$point" in /proc|/proc/*|/tmp|/dev/shm) continue ;; esac
  case "$options" in ro|ro,*) continue ;; esac
  mount -o remount,bind,ro "$point" 2>/dev/null || true
done < /proc/self/mountinfo
for probe in /.ape-rw-probe /usr/.ape-rw-probe /dev/.ape-rw-probe /etc/.ape-rw-probe; do
  if true 2>/dev/null > "$probe"; then echo "the sandbox's $probe stayed writable" >&2; exit 97; fi
done
cd /tmp
exec setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- env -i %(env)s "$@"
"""


def _unshare_script() -> str:
    """The prelude with this machine's folders filled in (every path quoted for the shell)."""
    q = shlex.quote
    folders: list[str] = []
    links: list[str] = []
    files: list[str] = []
    for path, link in _system_folders():
        if link is not None:
            links.append(f'ln -s {q(link)} "$R"{q(path)}')
        else:
            folders.append(f'"$R"{q(path)}')
            files.append(f'mount --rbind -o ro {q(path)} "$R"{q(path)}')
    for path in ETC_FILES:
        if os.path.exists(path):
            files.append(f'true > "$R"{q(path)}; mount --bind -o ro {q(path)} "$R"{q(path)}')
    opened: list[str] = []
    bound: list[str] = []
    for fd, folder in enumerate(hidden_interpreter_folders(), start=3):
        # under /tmp, which the staging tmpfs covers: reached through a descriptor opened first
        opened.append(f"exec {fd}< {q(folder)}")
        bound.append(f'mkdir -p "$R"{q(folder)}')
        bound.append(f'mount --no-canonicalize --bind -o ro /proc/self/fd/{fd} "$R"{q(folder)}; exec {fd}<&-')
    for folder in interpreter_folders():
        if not _inside(folder, SANDBOX_HOME):
            folders.append(f'"$R"{q(folder)}')
            files.append(f'mount --rbind -o ro {q(folder)} "$R"{q(folder)}')
    env = " ".join(f"{name}={value}" for name, value in base_env(SANDBOX_HOME).items())
    return _UNSHARE_PRELUDE % {
        "opened": "\n".join(opened),
        "folders": " ".join(folders),
        "links": "\n".join(links),
        "files": "\n".join(files),
        "devices": " ".join(DEVICES),
        "bound": "\n".join(bound),
        "env": env,
    }


def unshare_argv(tmpfs_bytes: int = TMPFS_BYTES) -> list[str]:
    """The util-linux command line that precedes the interpreter."""
    return [
        *("setpriv", "--pdeathsig", "KILL", "--"),
        *("unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--net"),
        *("--mount", "--mount-proc", "--ipc", "--uts", "--"),
        *("env", "-i", f"APE_TMPFS={tmpfs_bytes}", f"APE_SHM={SHM_BYTES}", "PATH=" + SANDBOX_PATH + ":/usr/sbin:/sbin"),
        *("sh", "-c", _unshare_script(), "ape-sandbox"),
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
    candidates = (
        [bwrap_argv(as_pid_1=True), bwrap_argv(disable_userns=False, as_pid_1=True)]
        if kind == "bwrap"
        else [unshare_argv()]
    )
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
