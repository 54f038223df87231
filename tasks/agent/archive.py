"""Seeding a working folder from an item's archive (``[sandbox] archive_dir``).

An archive is data, and data may be hostile or broken: a member named ``../../.bashrc`` or
``/etc/passwd``, a symbolic link to ``/`` with files written through it, a device node, a
zip or tar bomb. Every member is checked before anything is written, and the whole archive
is refused (an :class:`ArchiveError` naming the archive and the member, which the sandbox
raises as its SandboxError) rather than used in part:

- tar (``.tar``, ``.tar.gz``, ``.tgz``, ``.tar.bz2``, ``.tar.xz``): the standard library's
  ``data`` extraction filter (PEP 706) judges each member: no absolute path, nothing outside
  the folder, links only to members inside it, no devices or FIFOs, no set-uid bits;
- zip: no absolute path or ``..``, no symbolic link (zip stores one as a file holding its
  target), and a member's bytes are counted as they are written, so a size the directory
  understates cannot run past the limit;
- for both: at most :data:`MAX_MEMBERS` members, each at most ``file_bytes``, all together at
  most ``archive_bytes``, counted from the headers before anything is written.
"""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")
MAX_MEMBERS = 10_000
CHUNK = 1 << 16


class ArchiveError(ValueError):
    """An archive that is refused or cannot be read; the message names it and why."""


def find_archive(folder: Path, item_id: str) -> Path | None:
    """The item's archive in ``folder`` (``<item id><suffix>``), or None when it has none."""
    found = [folder / f"{item_id}{suffix}" for suffix in SUFFIXES if (folder / f"{item_id}{suffix}").is_file()]
    if len(found) > 1:
        names = ", ".join(path.name for path in found)
        raise ArchiveError(f"[sandbox] archive_dir: item '{item_id}' has {len(found)} archives ({names}); keep one")
    return found[0] if found else None


def unpack(archive: Path, target: Path, *, file_bytes: int, total_bytes: int) -> int:
    """Unpack ``archive`` into ``target`` after checking every member (module doc); the bytes
    written. A hostile or broken archive is an ArchiveError: all members are checked before
    any is written (a zip member longer than its header says is caught while written), and the
    caller removes the folder."""
    try:
        if archive.name.endswith(".zip"):
            return _unzip(archive, target, file_bytes, total_bytes)
        return _untar(archive, target, file_bytes, total_bytes)
    except ArchiveError:
        raise
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise ArchiveError(f"[sandbox] archive_dir: cannot unpack {archive.name}: {exc}") from None


def _refuse(archive: Path, member: str, why: str) -> ArchiveError:
    return ArchiveError(f"[sandbox] archive_dir: {archive.name}: member '{member}' {why}; the archive is refused")


def _sizes(archive: Path, sizes: list[tuple[str, int]], file_bytes: int, total_bytes: int) -> int:
    if len(sizes) > MAX_MEMBERS:
        raise ArchiveError(f"[sandbox] archive_dir: {archive.name} has over {MAX_MEMBERS} members; refused")
    total = 0
    for name, size in sizes:
        if size > file_bytes:
            raise _refuse(archive, name, f"is {size} bytes, over [sandbox] file_bytes ({file_bytes})")
        total += size
        if total > total_bytes:
            raise ArchiveError(
                f"[sandbox] archive_dir: {archive.name} unpacks to over {total_bytes} bytes "
                "([sandbox] archive_bytes); refused"
            )
    return total


def _untar(archive: Path, target: Path, file_bytes: int, total_bytes: int) -> int:
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is None:  # Python 3.11.0-3.11.3
        raise ArchiveError("[sandbox] archive_dir: unpacking a tar safely needs Python 3.11.4 or newer")
    with tarfile.open(archive) as tar:
        members: list[tarfile.TarInfo] = []
        for member in tar:
            members.append(member)
            if len(members) > MAX_MEMBERS:
                break
        checked = []
        for member in members:
            if member.name.startswith("/"):  # the filter would strip the slash; such an archive is wrong
                raise _refuse(archive, member.name, "has an absolute path")
            try:
                checked.append(data_filter(member, str(target)))
            except tarfile.FilterError as exc:
                raise _refuse(archive, member.name, f"is refused ({type(exc).__name__}: {exc})") from None
        if len(members) > MAX_MEMBERS:
            raise ArchiveError(f"[sandbox] archive_dir: {archive.name} has over {MAX_MEMBERS} members; refused")
        total = _sizes(archive, [(m.name, m.size) for m in checked if m.isreg()], file_bytes, total_bytes)
        tar.extractall(target, members=checked, filter="data")
    return total


def _unzip(archive: Path, target: Path, file_bytes: int, total_bytes: int) -> int:
    with zipfile.ZipFile(archive) as handle:
        infos = handle.infolist()
        for info in infos[: MAX_MEMBERS + 1]:
            path = PurePosixPath(info.filename.replace("\\", "/"))
            if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
                raise _refuse(archive, info.filename, "leaves the folder (an absolute path or '..')")
            if stat.S_ISLNK(info.external_attr >> 16):
                raise _refuse(archive, info.filename, "is a symbolic link")
        total = _sizes(archive, [(info.filename, info.file_size) for info in infos], file_bytes, total_bytes)
        written = 0
        for info in infos:
            destination = target / PurePosixPath(info.filename.replace("\\", "/"))
            if info.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with handle.open(info) as source, os.fdopen(fd, "wb") as sink:
                left = info.file_size
                while chunk := source.read(min(CHUNK, left + 1)):
                    left -= len(chunk)
                    written += len(chunk)
                    if left < 0 or written > total_bytes:
                        raise _refuse(archive, info.filename, "holds more bytes than its header says")
                    sink.write(chunk)
            mode = (info.external_attr >> 16) & 0o777
            destination.chmod(0o755 if mode & 0o100 else 0o644)  # the execute bit only, never set-uid
    return total
