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
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

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


def resolved_once(storage: Any) -> Any:
    """``storage`` as a :class:`ResolvedLocalFileSystem` when it is Prefect's plain local
    file system (the default result storage); any other storage as it is."""
    if type(storage) is LocalFileSystem and storage.basepath:
        return ResolvedLocalFileSystem(basepath=storage.basepath)
    return storage
