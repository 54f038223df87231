"""The two channels that carry pause / resume / drain to a running model (:mod:`ape.schemas.control`).

Plain functions, used by the run (:mod:`ape.flows.live.control`, reading) and by ``ape ctl``
(writing). What is read is hostile until checked: ``control.json`` only as a plain file owned
by this user and not writable by others, validated; a variable's value only when it is one
of the known actions, its ``ape-ctl`` tag only when the user name in it is a plain name.
"""

from __future__ import annotations

import getpass
import json
import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from pydantic import ValidationError

from ape.schemas.control import (
    ACTIONS,
    CONTROL_FILE,
    CTL_TAG,
    USER_PATTERN,
    Action,
    ControlRequest,
    ctl_tag,
    variable_name,
)
from ape.schemas.errors import validation_lines
from ape.tasks.storage import prefect_api
from ape.tasks.storage.save import atomic_write_text

MAX_FILE_BYTES = 4096


class Refused(Exception):
    """A request that is not one: its text says which file or variable and why."""


@dataclass(frozen=True)
class Request:
    """A request as a channel carries it: the action, who asked, and what makes it this
    request and not an earlier one with the same action (``identity``)."""

    action: Action
    by: str
    identity: str


def current_user() -> str:
    """This user's name for the control log (a plain name, or the uid)."""
    try:
        name = getpass.getuser()
    except Exception:
        name = ""
    return name if USER_PATTERN.match(name) else f"uid {os.getuid()}"


# -- the file ------------------------------------------------------------------------------
def read_request_file(folder: Path, *, since: datetime | None = None) -> Request | None:
    """``folder/control.json`` as a :class:`Request`; None when there is none, or it is older
    than ``since`` (an earlier run's). Raises :class:`Refused` for a file that is not this
    user's own (owner, mode, a link) or not a valid request."""
    path = Path(folder) / CONTROL_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Refused(f"{path}: not read ({exc.strerror or exc}); it must be a plain file, not a link") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{path}: not a plain file")
        if info.st_uid != os.getuid():
            raise Refused(f"{path}: owned by uid {info.st_uid}, not by this user; write it with `ape ctl`")
        if info.st_mode & 0o022:
            mode = info.st_mode & 0o777
            raise Refused(f"{path}: writable by group or others (mode {mode:o}); write it with `ape ctl`")
        raw = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_FILE_BYTES:
        raise Refused(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        request = ControlRequest.model_validate_json(raw)
    except ValidationError as exc:  # the first problem, located as every config error is
        raise Refused(f"{path}: {validation_lines(exc, default='(the file)', quote=False)[0]}") from None
    at = request.at if request.at.tzinfo else request.at.replace(tzinfo=UTC)
    if since is not None and at < since:
        return None
    return Request(request.action, request.by, f"file:{at.isoformat()}:{request.action}")


def write_request_file(folder: Path, action: Action, by: str) -> Path:
    """Write ``folder/control.json`` (owner-only, atomically): the loop reads it within a second."""
    request = ControlRequest(action=action, by=by, at=datetime.now(UTC))
    path = Path(folder) / CONTROL_FILE
    atomic_write_text(path, request.model_dump_json() + "\n", mode=0o600)  # owner-only, whatever is shared
    return path


# -- the Prefect variable ------------------------------------------------------------------
def request_of_variable(value: Any, tags: list[str] | None, updated: Any) -> Request:
    """The request a control variable holds; :class:`Refused` for a value that is not an action."""
    if not isinstance(value, str) or value not in ACTIONS:
        shown = json.dumps(value)[:60]
        raise Refused(f"value {shown} is not one of {', '.join(ACTIONS)}: ignored")
    action: Action = value  # checked just above
    by = "Prefect variable"
    for tag in tags or []:
        parts = tag.split(":")
        if len(parts) == 3 and parts[0] == CTL_TAG and parts[2] == action and USER_PATTERN.match(parts[1]):
            by = f"ape ctl by {parts[1]}"
    return Request(action, by, f"variable:{updated}:{action}")


def read_variable(client: Any, flow_run_id: UUID | str) -> Request | None:
    """The flow run's control variable as a request; None when there is none."""
    variable = client.read_variable_by_name(variable_name(flow_run_id))
    if variable is None:
        return None
    return request_of_variable(variable.value, list(variable.tags or []), variable.updated)


def create_variable(client: Any, flow_run_id: UUID | str) -> None:
    """The run's control variable with the value ``run`` (made anew if one is left over)."""
    name = variable_name(flow_run_id)
    if client.read_variable_by_name(name) is not None:
        prefect_api.update_variable(client, name, "run", ["ape-control"])
    else:
        prefect_api.create_variable(client, name, "run", ["ape-control"])


def set_variable(client: Any, flow_run_id: UUID | str, action: Action, user: str) -> None:
    """``ape ctl``'s request through the server: the value, and a tag that says who asked."""
    prefect_api.update_variable(client, variable_name(flow_run_id), action, ["ape-control", ctl_tag(user, action)])


def delete_variable(client: Any, flow_run_id: UUID | str) -> None:
    client.delete_variable_by_name(variable_name(flow_run_id))
