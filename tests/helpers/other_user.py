"""Runs a command as a second local user, as another person on a shared machine would.

Only for a test running as root: it creates the user (no home, no password) and drops to it
with ``setpriv``. When this interpreter lives where that user cannot enter (a Python under
root's 0700 home), the command runs in a private mount namespace in which the blocking
directory is covered by an empty tmpfs holding only the path to this interpreter's prefix,
so the second user runs the same Python and libraries and sees nothing else of that home.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

USER = "ape-other"


def can_run_as_other_user() -> str | None:
    """Why a second user cannot be used here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root to create and become a second local user"
    for tool in ("useradd", "setpriv", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


def ensure_user() -> tuple[int, int]:
    """The uid and gid of the second user, created on first use."""
    if subprocess.run(["id", "-u", USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
    uid = int(subprocess.run(["id", "-u", USER], capture_output=True, text=True, check=True).stdout)
    gid = int(subprocess.run(["id", "-g", USER], capture_output=True, text=True, check=True).stdout)
    return uid, gid


def _blocking_dir(path: Path) -> Path | None:
    """The outermost directory on the way to ``path`` that others may not enter."""
    for parent in reversed(path.parents):
        if parent != Path("/") and not os.stat(parent).st_mode & 0o001:
            return parent
    return None


def python_as_other_user(code: str, *args: str) -> list[str]:
    """The command line that runs ``python -c code args...`` as the second user, with an
    empty environment but PATH."""
    uid, gid = ensure_user()
    prefix = Path(sys.prefix).resolve()
    python = [sys.executable, "-c", code, *args]
    drop = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", "env", "-i", "PATH=/usr/bin:/bin"]
    blocking = _blocking_dir(prefix)
    if blocking is None:
        return [*drop, *python]
    # hold the prefix open, cover the blocking directory, bind the prefix back at its path
    script = " && ".join(
        [
            f"exec 3< {shlex.quote(str(prefix))}",
            f"mount -t tmpfs -o mode=0755,size=1m ape-other-view {shlex.quote(str(blocking))}",
            f"mkdir -p {shlex.quote(str(prefix))}",
            f"mount --no-canonicalize --bind /proc/self/fd/3 {shlex.quote(str(prefix))}",
            "exec 3<&-",
            "exec " + shlex.join([*drop, *python]),
        ]
    )
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script]
