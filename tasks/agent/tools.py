"""The built-in agent tools ``bash``, ``python`` and ``files``, bound to one session's sandbox.

``[tools.shell] factory = "bash"`` (likewise ``"python"``, ``"files"``) with a ``[sandbox]``
section. Like any tool factory whose signature has a ``sandbox`` parameter (a user's too),
these are called once per session with that session's :class:`AgentSandbox`
(:func:`ape.tasks.solving.tools.session_tools`); at start-up they are built once with
``sandbox=None``, for the checks and the fingerprint, and such a tool refuses to run.

Each returns text: the exit code, then stdout and stderr, each cut to ``[sandbox]
output_bytes`` (head and tail kept, the cut said). ``files`` reads, writes and lists below
the working folder only; a path that leaves it, through ``..``, an absolute path or a
symbolic link anywhere on the way, is refused. The agent's processes are all dead
between two tool calls (:mod:`ape.tasks.agent.sandbox`), so nothing can swap a checked
path for a link before it is used.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Literal

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import BaseModel, Field

from ape.tasks.agent import quota
from ape.tasks.agent.sandbox import AgentSandbox, cut

READ_LIMIT = 200_000  # bytes a files read returns at most (then cut like command output)
LIST_LIMIT = 500  # entries a files list returns at most
TEMP_SUFFIX = ".ape-write"  # a files write's temporary name ends so, until it is renamed


class BashInput(BaseModel):
    command: str = Field(description="A bash command line, run in the task's working folder.")


class PythonInput(BaseModel):
    code: str = Field(description="Python source, run as a script in the task's working folder.")


class FilesInput(BaseModel):
    action: Literal["read", "write", "list"] = Field(description="read a file, write a file, or list a folder.")
    path: str = Field(default=".", description="A path relative to the working folder.")
    content: str | None = Field(default=None, description="For write: the file's whole new text.")


def network_note(sandbox: AgentSandbox | None) -> str:
    """What the tool's description says of the network: none, or the hosts it may reach."""
    hosts = sandbox.cfg.allow_hosts if sandbox is not None and sandbox.proxy is not None else []
    if not hosts:
        return "no network"
    return "network only to " + ", ".join(hosts) + ", through the HTTP(S)_PROXY set in the environment"


def _needs(sandbox: AgentSandbox | None) -> AgentSandbox:
    if sandbox is None:
        raise ToolException("this tool acts in a session's sandbox, and none is bound: add a [sandbox] section")
    return sandbox


def bash(sandbox: AgentSandbox | None = None, name: str = "bash") -> BaseTool:
    """Tool factory: run a bash command in the session's sandbox."""

    def run(command: str) -> str:
        return _needs(sandbox).bash(command).text()

    return StructuredTool.from_function(
        func=run,
        name=name,
        description=f"Run a bash command in the task's working folder ({network_note(sandbox)}). Returns the "
        "exit code, stdout and stderr. Files persist between calls; processes do not.",
        args_schema=BashInput,
        handle_tool_error=True,
    )


def python(sandbox: AgentSandbox | None = None, name: str = "python") -> BaseTool:
    """Tool factory: run Python code in the session's sandbox."""

    def run(code: str) -> str:
        return _needs(sandbox).python(code).text()

    return StructuredTool.from_function(
        func=run,
        name=name,
        description=f"Run Python code in the task's working folder ({network_note(sandbox)}). Returns the "
        "exit code, stdout and stderr; print what you want to see.",
        args_schema=PythonInput,
        handle_tool_error=True,
    )


def files(sandbox: AgentSandbox | None = None, name: str = "files") -> BaseTool:
    """Tool factory: read, write and list files below the session's working folder."""

    def run(action: str, path: str = ".", content: str | None = None) -> str:
        box = _needs(sandbox)
        target = inside(box.folder, path)
        if action == "list":
            return list_folder(box.folder, target)
        if action == "read":
            return read_file(target, box.cfg.output_bytes)
        if content is None:
            raise ToolException("write needs 'content', the file's whole new text")
        try:
            write_file(box.folder, target, content, box.cfg.file_bytes, room=quota_room(box))
        except QuotaRefused:
            box.limits_hit["disk"] = box.limits_hit.get("disk", 0) + 1
            raise
        return f"wrote {len(content.encode('utf-8'))} bytes to {path}"

    return StructuredTool.from_function(
        func=run,
        name=name,
        description="Read, write or list files in the task's working folder (paths relative to it).",
        args_schema=FilesInput,
        handle_tool_error=True,
    )


def inside(root: Path, path: str) -> Path:
    """``path`` below ``root``, with no component a symbolic link; ToolException otherwise."""
    relative = Path(path)
    if relative.is_absolute() or ".." in relative.parts:
        raise ToolException(f"'{path}' leaves the working folder; give a path relative to it, without '..'")
    current = root
    for part in relative.parts:
        if part in ("", "."):
            continue
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            continue  # a file or folder yet to be written
        if stat.S_ISLNK(mode):
            raise ToolException(f"'{path}' goes through a symbolic link; the files tool does not follow links")
    return current


def list_folder(root: Path, target: Path) -> str:
    if not target.is_dir():
        raise ToolException(f"'{target.relative_to(root)}' is not a folder")
    names = sorted(os.listdir(target))
    shown = [name + ("/" if (target / name).is_dir() and not (target / name).is_symlink() else "") for name in names]
    text = "\n".join(shown[:LIST_LIMIT])
    if len(shown) > LIST_LIMIT:
        text += f"\n[... {len(shown) - LIST_LIMIT} more]"
    return text or "(empty)"


def read_file(target: Path, limit: int) -> str:
    try:
        # never blocks: a FIFO the agent left would wait for a writer that is gone
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ToolException(f"there is no file '{target.name}'") from None
    except OSError as exc:
        raise ToolException(f"cannot read '{target.name}': {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ToolException(f"'{target.name}' is not a regular file")
        data = handle.read(READ_LIMIT + 1)
    return cut(data, limit)


class QuotaRefused(ToolException):
    """A files write refused for the working folder's quota (``[sandbox] disk_bytes``)."""


def quota_room(box: AgentSandbox) -> int | None:
    """Bytes a files write may still add where APE measures the quota itself; None where the
    quota is a tmpfs (its ENOSPC refuses the write) or there is none."""
    if box.quota != "measured" or box.cfg.disk_bytes is None:
        return None
    return box.cfg.disk_bytes - quota.used(box.folder)


def write_file(root: Path, target: Path, content: str, limit: int, room: int | None = None) -> None:
    """Write ``target`` whole or not at all: the text goes to a temporary file in the same
    folder, is synced, then renamed over the target, so a write that hits the quota (a full
    tmpfs's ENOSPC, or ``room``, the bytes a measured quota has left) leaves neither a partial
    file nor a damaged old one, and the reply says the quota refused it."""
    data = content.encode("utf-8")
    if len(data) > limit:
        raise ToolException(f"the content is {len(data)} bytes; files are limited to {limit} ([sandbox] file_bytes)")
    target.parent.mkdir(parents=True, exist_ok=True)
    inside(root, str(target.relative_to(root)))  # the folders just made are no links either
    existing = target.stat() if target.is_file() else None
    if room is not None:
        replaced = existing.st_size if existing is not None else 0
        if len(data) - replaced > room:
            raise QuotaRefused(_refused(len(data), f"it has {max(room, 0)} bytes left"))
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name[:50]}.", suffix=TEMP_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, stat.S_IMODE(existing.st_mode) if existing is not None else 0o644)
        os.replace(temporary, target)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise QuotaRefused(_refused(len(data), "it is full")) from None
        raise ToolException(f"cannot write '{target.name}': {exc.strerror}") from None


def _refused(size: int, why: str) -> str:
    return (
        f"the write of {size} bytes was refused for the working folder's quota ([sandbox] disk_bytes): "
        f"{why}; nothing was written, remove files to make room"
    )
