"""A Prefect local file system that resolves its base folder once, not on every access.

Why: Prefect's ``LocalFileSystem`` resolves its base folder and the requested path with
``Path.resolve`` (one ``lstat`` per path component) on every read, write and existence
check. A session's cache lookup and write make about five such calls, and on an
instant-model run they were a tenth of the run process's CPU (``py-spy`` on 2,000
sessions). A cache file is named by its key, a plain file name, so its path is the
resolved folder joined with that name. Prefect's result store writes a record by the
absolute path it made of that (the resolved folder and the name) and first asks for the
folder itself (``""``): both are answered from the resolved folder too, without an
``lstat`` per component (a further 3% of an instant-model run's samples, issue 46).
Anything else (another absolute path, a name with a folder in it) still goes through
Prefect's own checks.

A write (two files per cached session: the record and its result) opens the file without
first making its folder or asking whether it exists and is a file (four system calls instead
of nine; the folder is made only when the open finds it missing): each such call lets
another of the run's solver threads take the interpreter, and at 256 workers the session
then waits to get it back.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from pathlib import Path
from typing import Any

from prefect._internal.compatibility.async_dispatch import async_dispatch
from prefect.filesystems import LocalFileSystem


@functools.lru_cache(maxsize=256)
def _resolved(basepath: str) -> Path:
    return Path(basepath).expanduser().resolve()


def plain_name(path: Any) -> bool:
    """A file name inside the folder itself: no folder part, not ``.``, ``..`` or ``~``."""
    return isinstance(path, str) and bool(path) and "/" not in path and path not in (".", "..") and path[0] != "~"


class ResolvedLocalFileSystem(LocalFileSystem):
    """``LocalFileSystem`` with the base folder resolved once per process (see the module doc)."""

    _block_type_name = "APE local results"  # its own block type: never saved, never mistaken

    def _resolve_path(self, path: str) -> Path:
        if self.basepath:
            if plain_name(path):
                return _resolved(self.basepath) / path
            if path == "":
                return _resolved(self.basepath)
            if isinstance(path, str) and path.startswith("/"):
                folder, _, name = path.rpartition("/")
                if plain_name(name) and folder == str(_resolved(self.basepath)):
                    return _resolved(self.basepath) / name
        return super()._resolve_path(path)

    # typed as Prefect types its own (a sync method dispatching to its async twin)
    @async_dispatch(LocalFileSystem.awrite_path)  # type: ignore[arg-type]
    def write_path(self, path: str, content: bytes) -> str:  # type: ignore[override]
        """Prefect's ``write_path`` (the same file, the same refusal of a path that is not a
        regular file) in fewer system calls: see the module doc."""
        target = self._resolve_path(path)
        try:
            _write_file(target, content)
        except FileNotFoundError:  # the folder is not made yet, or was removed meanwhile
            target.parent.mkdir(parents=True, exist_ok=True)
            _write_file(target, content)
        return str(target)


def _write_file(target: Path, content: bytes) -> None:
    """Write ``content`` over ``target``; a path that is not a regular file (a folder, a pipe,
    a link) is refused, as Prefect refuses one, without blocking on a pipe nobody reads or
    writing where a link points. A missing folder raises FileNotFoundError (the caller makes it)."""
    refused = ValueError(f"Path {target} already exists and is not a file.")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(target, flags, 0o666)
    except OSError as exc:
        if exc.errno in (errno.EISDIR, errno.ENXIO, errno.ELOOP):  # a folder; a pipe without reader; a link
            raise refused from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise refused
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def resolved_once(storage: Any) -> Any:
    """``storage`` as a :class:`ResolvedLocalFileSystem` when it is Prefect's plain local
    file system (the default result storage); any other storage as it is."""
    if type(storage) is LocalFileSystem and storage.basepath:
        return ResolvedLocalFileSystem(basepath=storage.basepath)
    return storage
