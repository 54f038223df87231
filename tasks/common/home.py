"""Where APE keeps its state: the APE home, the local server's folder in it, and its password file.

Below every layer that needs them: the server APE starts (``ape.server``) writes its pid
file, log, database and credentials there, and a flow that prints a link into the UI names
the password file there, so both read the folders from here.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

AUTH_FILE = "auth"  # the server's credentials, one line ``ape:<password>``, in server_home()
# Prefect's name for the client's credentials (an environment variable)
CLIENT_AUTH_KEY = "PREFECT_API_AUTH_STRING"


def ape_home() -> Path:
    """The APE state folder: ``$APE_HOME`` or ``~/.ape``."""
    value = os.environ.get("APE_HOME")
    return Path(value).expanduser() if value else Path.home() / ".ape"


def server_home() -> Path:
    """Folder holding the local server's pid/state file, log, database and credentials."""
    return ape_home() / "server"


def password_hint(home: Path | None = None) -> str:
    """Where the UI's password is, for every line that names APE's server or links into its
    UI: a browser that has not logged in yet meets a login form, and the password is nowhere
    else (``home``: the server's folder, default :func:`server_home`)."""
    return f"the UI's password is the line in {(home or server_home()) / AUTH_FILE}"


def ui_password_file() -> Path | None:
    """The file holding the password of the server this process reports to, when that is
    APE's own (its credentials are this APE home's); None for a server the user configured,
    Prefect Cloud or Prefect's temporary server. Reads only: never creates the file."""
    value = os.environ.get(CLIENT_AUTH_KEY)
    if not value:
        return None
    path = server_home() / AUTH_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return path if text and secrets.compare_digest(text.encode(), value.encode()) else None
