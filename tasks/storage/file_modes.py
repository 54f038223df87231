"""Who may read what a run writes: its owner only, unless the config shares it with the group.

A run's outputs hold a benchmark's items, the prompts built from them and the models'
answers: what a team must not leak (a leaked private benchmark is a contaminated one).
Under the usual umask (022) every file would be readable by every local user.

Why the process umask and not a mode at each writer: a run's files are written by many
hands, APE's own writers, pandas and pyarrow (Parquet), matplotlib (charts), Python's
logging (``run.log``), Prefect's result storage (the cache), and child processes (the
llama.cpp server's log, Dask workers). A mode passed at each of them would miss the next
writer added, and third-party writers take none. The umask is the one setting every one of
them obeys, child processes included (they inherit it). So for the length of a run,
:func:`private_outputs` sets it to 077 (027 with ``[run] share_with_group = true``):
folders 0700 and files 0600 (0750 and 0640), wherever the run writes, a cache or
result storage outside the output folder included. APE's writers that pick a mode
themselves (``os.open``, ``mkstemp``, copies) take it from the umask
(:func:`created_file_mode`), so they agree.

The umask belongs to the process, not to the run: while a run is going, every file the
process creates, also in other threads of a program that calls ``ape.run``, gets the run's
modes. Those are narrower than the usual ones, never wider, and the caller's umask is put
back when the run ends. Two runs at once in one process (``ape.run`` from two threads) get
the narrower of their two settings.

An existing output folder that others (or, owner-only, the group) may enter is narrowed at
the start of the run, with one warning line: its files from earlier runs keep their modes,
and a run appends to some of them (``results.jsonl``, ``sessions.jsonl``), so leaving the
folder open would keep leaking. Only the folder itself is changed, not what it holds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ape.schemas.config import ApeConfig

log = logging.getLogger("ape")

OWNER_ONLY_UMASK = 0o077
GROUP_UMASK = 0o027


@dataclass(frozen=True)
class OutputModes:
    """The modes of a run's outputs: owner-only, or readable by the owner's group too."""

    share_with_group: bool = False

    @property
    def umask(self) -> int:
        return GROUP_UMASK if self.share_with_group else OWNER_ONLY_UMASK

    @property
    def folder_mode(self) -> int:
        """0700, or 0750 shared with the group."""
        return 0o777 & ~self.umask

    @property
    def file_mode(self) -> int:
        """0600, or 0640 shared with the group."""
        return 0o666 & ~self.umask


def modes_for(config: ApeConfig) -> OutputModes:
    """The modes a config asks for (``[run] share_with_group``)."""
    return OutputModes(share_with_group=config.run.share_with_group)


def modes_of(folder: Path) -> OutputModes:
    """For commands that write into an output folder and read no config (``ape report``,
    ``ape history``, ``ape baseline``, ``ape diff``, ``ape record``, ``ape demo``): the
    folder's own choice. Shared with the group when the group may enter it and others may
    not (what ``share_with_group`` makes); owner-only otherwise, a missing folder included."""
    try:
        mode = Path(folder).stat().st_mode
    except OSError:
        return OutputModes()
    return OutputModes(share_with_group=mode & 0o050 == 0o050 and not mode & 0o007)


def current_umask() -> int:
    """The process umask, read without changing it where Linux reports it (else set back)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _guard:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def created_file_mode() -> int:
    """The mode of a file created now with ``open``: 0666 less the umask. For writers that
    choose a mode themselves (``mkstemp`` is always 0600, a copy keeps its source's)."""
    return 0o666 & ~current_umask()


_guard = threading.Lock()
_held: list[tuple[int, Path]] = []  # the runs in progress in this process: (umask, output folder)
_before: list[int] = []  # the umask before the first of them


def _combined() -> int:
    return reduce(lambda a, b: a | b, (mask for mask, _ in _held), 0)


@contextlib.contextmanager
def private_outputs(folder: Path, modes: OutputModes, *, prepare: bool = True) -> Iterator[None]:
    """For the length of a run writing ``folder``: the process umask of ``modes``, and
    (``prepare``) the folder created, or narrowed with one warning line, to its mode.
    Re-entrant: a run that holds the folder already (``ape run``, then its flow) prepares
    it once."""
    folder = Path(folder).resolve()
    with _guard:
        first_for_folder = all(held != folder for _, held in _held)
        if not _held:
            _before.append(os.umask(0o077))
        _held.append((modes.umask, folder))
        os.umask(_combined())
    try:
        if prepare and first_for_folder:
            prepare_folder(folder, modes)
        yield
    finally:
        with _guard:
            _held.remove((modes.umask, folder))
            os.umask(_combined() if _held else _before.pop())


@contextlib.contextmanager
def following(folder: Path) -> Iterator[None]:
    """The umask of :func:`private_outputs` for a command that writes into ``folder`` without
    a config: the modes the folder itself shows (:func:`modes_of`). It neither creates nor
    narrows the folder (a run does that): a mistyped folder stays a one-line error."""
    with private_outputs(folder, modes_of(folder), prepare=False):
        yield


def prepare_folder(folder: Path, modes: OutputModes) -> None:
    """Create ``folder`` with the run's folder mode; an existing one that lets in more than
    ``modes`` allows is narrowed to it with one warning line (one that cannot be narrowed,
    not being the user's, gets the warning and stays as it is). With ``share_with_group``
    a folder the group cannot enter is opened to it (one info line)."""
    if not folder.exists():
        folder.mkdir(mode=modes.folder_mode, parents=True, exist_ok=True)
        return
    if not folder.is_dir() or os.name != "posix":
        return  # not a folder: the run's own checks say so
    mode = stat.S_IMODE(folder.stat().st_mode)
    extra = mode & modes.umask
    if extra:
        narrowed = mode & ~modes.umask
        who = "others" if extra & 0o007 else "the group"
        try:
            folder.chmod(narrowed)
        except OSError as exc:
            log.warning(
                "the output folder %s is %04o (%s can read it) and could not be narrowed (%s): this run's files are "
                "%04o, earlier runs' stay readable; its owner can run `chmod go-rwx %s`",
                folder,
                mode,
                who,
                exc.strerror or exc,
                modes.file_mode,
                folder,
            )
            return
        log.warning(
            "the output folder %s was %04o (%s could read it): narrowed it to %04o, so earlier runs' files are out of "
            "their reach too%s",
            folder,
            mode,
            who,
            narrowed,
            "" if modes.share_with_group else "; [run] share_with_group = true shares outputs with the group",
        )
        return
    if modes.share_with_group and mode & 0o050 != 0o050:
        with contextlib.suppress(OSError):
            folder.chmod(mode | 0o050)
            log.info(
                "the output folder %s opened to the group ([run] share_with_group); files earlier runs left keep "
                "their modes (`chmod -R g+rX %s` shares them too)",
                folder,
                folder,
            )


def not_own_file(path: Path) -> str | None:
    """Why ``path`` cannot be taken as written by this user's runs (None when it can, or is
    absent): a link, not a plain file, owned by another user, or writable by group or
    others. A run's own files are none of these (its umask makes them 0600 or 0640), so a
    file that is was put there by someone else, or opened up since."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(info.st_mode):
        return "it is a link"
    if not stat.S_ISREG(info.st_mode):
        return "it is not a plain file"
    if info.st_uid != os.getuid():
        return f"it is owned by uid {info.st_uid}, not by this user"
    if info.st_mode & 0o022:
        return f"group or others may write it (mode {info.st_mode & 0o777:o})"
    return None
