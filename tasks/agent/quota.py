"""A disk quota on a session's whole working folder (``[sandbox] disk_bytes``).

``RLIMIT_FSIZE`` caps one file; nothing in a process's limits caps the sum of many. Two ways,
the first where it can be had:

- **enforced** (as root): the working folder is a tmpfs of ``disk_bytes``, mounted on the
  host for the session's life (bubblewrap's own ``--size``/``--tmpfs`` makes a fresh tmpfs per
  command, which would not persist between the agent's calls). A write past it fails inside
  the command with ``ENOSPC`` ("No space left on device"), as on a full disk; the tool's reply
  says the folder is full. The tmpfs is memory, so the quota also bounds what the folder
  takes of the machine's memory. It is unmounted when the session ends (a run killed
  mid-session leaves it mounted: the sweep of stale folders unmounts it).
- **measured** (otherwise): after each command the folder's size is summed; past
  ``disk_bytes`` the session ends with ``end_reason`` ``disk_limit``. The write itself was
  not stopped, so this bounds a session, not a command (``file_bytes`` still bounds each file).
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

log = logging.getLogger("ape.agent")

FULL_SHARE = 0.999  # a tmpfs this full has no room for another page


def mount(folder: Path, size: int) -> bool:
    """Make ``folder`` a tmpfs of ``size`` bytes (owner-only); False where that cannot be done."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    options = f"size={size},mode=0700,nosuid,nodev"
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "ape-task", str(folder)],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("no tmpfs quota: %s", exc)
        return False
    if done.returncode != 0:
        log.debug("no tmpfs quota: %s", done.stderr.decode("utf-8", "replace").strip())
        return False
    return True


def unmount(folder: Path) -> None:
    """Unmount the tmpfs at ``folder`` (lazily, so a process still in it cannot keep it)."""
    if not os.path.ismount(folder):
        return
    done = subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30, check=False)
    if done.returncode != 0:
        log.warning("could not unmount %s: %s", folder, done.stderr.decode("utf-8", "replace").strip())


def used(folder: Path) -> int:
    """Bytes the folder holds: the tmpfs's own count where mounted, else the sum of its files'
    allocated blocks (links not followed)."""
    if os.path.ismount(folder):
        info = os.statvfs(folder)
        return (info.f_blocks - info.f_bfree) * info.f_frsize
    total = 0
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def full(folder: Path) -> bool:
    """Whether a mounted quota has (almost) no room left."""
    if not os.path.ismount(folder):
        return False
    info = os.statvfs(folder)
    return info.f_bavail <= max(1, int(info.f_blocks * (1 - FULL_SHARE)))
