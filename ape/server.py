"""Start, reuse, inspect and stop a local Prefect server that outlives one ``ape run``.

Why: without ``PREFECT_API_URL`` Prefect falls back to an ephemeral in-process
server that takes seconds to start and loses most task-run records when the
process exits. A ``prefect server start`` running in the background keeps every
run, serves the UI, and is shared by later runs, Dask workers and deployments.

State (pid, host and port of the server this module started, its log file, its
SQLite database and its credentials) lives in ``$APE_HOME/server`` (default
``~/.ape/server``), created readable by its owner only: the database holds every
run's prompts and answers.

The server APE starts requires credentials: Prefect's ``server.api.auth_string``,
generated once per APE home and kept in ``server/auth`` (mode 0600, in folders of
mode 0700). Every APE client (``ape run``, ``ape serve`` and its flow-run processes,
``ape.run``, Dask workers) reaches it with ``PREFECT_API_AUTH_STRING`` set from that
file; ``ape server env`` prints both lines for a new shell, and the UI asks for the
same string once per browser. Its API answers CORS requests only from its own UI's
origin, and Prefect's CSRF protection is on. A server the user configured
(``PREFECT_API_URL``, Prefect Cloud) keeps its own auth: APE adds nothing to it.
Before anything is sent to the server APE starts or reuses (even its health check), the
socket listening on its port is proven to be held by the process recorded in
``server.json`` or one of its children (:mod:`ape.tasks.common.ownership`): another user
who binds the port first, while Prefect imports, gets nothing, and the start fails with
one line naming what holds the port.

Library functions never print; they report through an optional ``on_status``
callback and their return values, so the command line decides what to show.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from ape import crash_marking, server_db
from ape.schemas.errors import ApeError
from ape.tasks.common import ownership
from ape.tasks.common.env_number import env_number
from ape.tasks.common.home import AUTH_FILE, CLIENT_AUTH_KEY, ape_home, password_hint, server_home, ui_password_file
from ape.tasks.storage import prefect_api

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4200
STATE_FILE = "server.json"
# Prefect's names for the API URL its UI calls (a user's own setting is kept).
UI_API_URL_KEYS = ("PREFECT_SERVER_UI_API_URL", "PREFECT_UI_API_URL")
LOG_FILE = "server.log"
LOCK_FILE = "server.lock"
AUTH_USER = "ape"
# Prefect's names for the server's credentials and the client's (environment variables)
SERVER_AUTH_KEY = "PREFECT_SERVER_API_AUTH_STRING"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600

StatusCallback = Callable[[str], None]

# Prefect settings for a server ape starts (a value the user set in the environment wins).
# The task-run recorder writes one task run per transaction by default (batch size 1),
# about 150-200 a second on two cores; its in-memory broker drops events past 10,000
# queued, so a fast run lost most of its task runs. Batched writes keep up several times
# faster. Services for work pools and workers (foreman) and for paused flow runs are not
# used by ape (runs come from `ape run` and `ape serve`) and are switched off so an idle
# server sleeps. Schedules, late runs, automations (triggers), events, cancellation and
# the UI stay on. Measured in benchmarks/README.md.
SERVER_SETTINGS: dict[str, str] = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "500",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE": "500",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL": "1",
    "PREFECT_SERVER_SERVICES_FOREMAN_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_PAUSE_EXPIRATIONS_ENABLED": "false",
    # The front page opens the new (V2) UI, as APE's flow-run links do (ape.flows.ui_links): V2's
    # flow-run page takes a browser that has not logged in to the login form and back.
    "PREFECT_SERVER_UI_V2_ENABLED": "true",
}

# Retention: a server APE starts deletes flow runs (with their task runs, states, logs and
# artifacts) that ended more than this many days ago, through Prefect's db_vacuum service.
# Without it a nightly team's server keeps every task run forever, 2.2-2.7 KB each in SQLite
# (docs/server.md, "How long the server keeps runs"). The runs' own results, history, diffs
# and retries live in the output folder and outlive the server's record.
RETENTION_ENV = "APE_SERVER_RETENTION_DAYS"
DEFAULT_RETENTION_DAYS = 30.0
MIN_RETENTION_DAYS = 1 / 24  # Prefect's minimum: more than one hour
VACUUM_ENABLED_KEY = "PREFECT_SERVER_SERVICES_DB_VACUUM_ENABLED"
VACUUM_RETENTION_KEY = "PREFECT_SERVER_SERVICES_DB_VACUUM_RETENTION_PERIOD"
PREFECT_DEFAULT_RETENTION_DAYS = 90.0  # what Prefect keeps when flow-run vacuum is on without a period

# Popen handles of servers started by this process: kept so the objects are not
# collected while the server runs, and so a server we stop can be reaped.
_SPAWNED: dict[int, subprocess.Popen[bytes]] = {}


class ServerInfo(BaseModel):
    """A Prefect server that answers on ``api_url``; ``pid`` is set when ape started it."""

    model_config = ConfigDict(extra="forbid")

    api_url: str
    ui_url: str
    pid: int | None = None
    home: Path
    log_file: Path
    retention_days: float | None = None  # flow runs kept (0: forever); None: not known (not APE's)


class OwnServer(BaseModel):
    """The server process this APE home started, as a run watches it (:mod:`ape.watchdog`):
    its pid, and the address and port a client connects to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pid: int
    host: str
    port: int


class _State(BaseModel):
    """What ``server.json`` records about the server ape started."""

    model_config = ConfigDict(extra="forbid")

    pid: int
    host: str
    port: int
    started_at: float
    retention_days: float | None = None  # None: started by an APE that did not record it


# --------------------------------------------------------------------------- paths


def private_dir(path: Path) -> Path:
    """``path`` and the missing folders above it, created with mode 0700; an existing
    ``path`` that others may read is narrowed to 0700 (it holds prompts, answers and
    credentials)."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    _owner_only(path, PRIVATE_DIR_MODE)
    return path


def _owner_only(path: Path, mode: int) -> None:
    """Narrow ``path`` to ``mode`` when its group or others may read it (POSIX only)."""
    if os.name == "posix" and path.stat().st_mode & 0o077:
        path.chmod(mode)


def _private_home() -> Path:
    home = server_home()
    private_dir(home.parent)
    return private_dir(home)


def auth_string(home: Path | None = None) -> str:
    """The credentials of the server APE starts for this APE home: read from
    ``server/auth``, or generated once (``ape:<random>``) and written there with mode 0600.

    One value per APE home, so every client and a restarted server agree on it without
    the user doing anything; deleting the file (server stopped) makes a new one.
    """
    home = home or _private_home()
    path = home / AUTH_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        text = ""
    except OSError as exc:
        raise ApeError(f"cannot read the server's credentials: {exc}", where=str(path)) from None
    if text:
        _owner_only(path, PRIVATE_FILE_MODE)
        return text
    value = f"{AUTH_USER}:{secrets.token_urlsafe(24)}"
    tmp = path.with_name(f".{AUTH_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(value + "\n")
    try:
        os.link(tmp, path)  # never replaces a value another process wrote meanwhile
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return path.read_text(encoding="utf-8").strip()


def use_credentials(home: Path | None = None) -> None:
    """Give this process (and the processes it starts) the credentials of APE's server."""
    os.environ[CLIENT_AUTH_KEY] = auth_string(home)
    _refresh_prefect_settings()


def client_env(info: ServerInfo) -> dict[str, str]:
    """The environment a child process (a benchmark's run, a worker) needs to reach APE's
    server ``info``: its API URL and its credentials."""
    return {"PREFECT_API_URL": info.api_url, CLIENT_AUTH_KEY: auth_string(info.home)}


@contextlib.contextmanager
def api_session(api_url: str, timeout: float = 30.0, auth: str | None = None) -> Iterator[httpx.Client]:
    """An HTTP client for hand-made calls to a Prefect API (benchmarks, tests): the credentials
    ``auth`` (default: this process's) and, where the server checks CSRF tokens, a fresh
    token, as Prefect's own client sends them. Closed when the ``with`` block ends."""

    with httpx.Client(base_url=api_url, headers=auth_headers(auth), timeout=timeout, trust_env=False) as client:
        client_id = str(uuid.uuid4())
        response = client.get("/csrf-token", params={"client": client_id})
        if response.status_code == 200:
            client.headers.update({"Prefect-Csrf-Token": response.json()["token"], "Prefect-Csrf-Client": client_id})
        yield client


def auth_headers(auth: str | None = None) -> dict[str, str]:
    """The ``Authorization`` header for a hand-made request to APE's server (benchmarks,
    tests) with the credentials ``auth`` (default: this process's); empty without any."""

    value = auth or os.environ.get(CLIENT_AUTH_KEY)
    if not value:
        return {}
    return {"Authorization": "Basic " + base64.b64encode(value.encode()).decode()}


def default_port() -> int:
    """Port of the local server: ``$APE_SERVER_PORT`` or Prefect's usual 4200."""
    value = os.environ.get("APE_SERVER_PORT")
    if not value:
        return DEFAULT_PORT
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise ApeError(
            f"APE_SERVER_PORT={value!r} is not a port number",
            where="environment",
            hint="set it to an integer between 1 and 65535, or unset it to use 4200",
        )
    return port


def api_url_for(host: str, port: int) -> str:
    """The API URL a client uses to reach a server bound to ``host:port``."""
    return f"{_base_url(host, port)}/api"


def ui_api_url_for(host: str, port: int) -> str:
    """The API URL the browser UI of a server bound to ``host:port`` calls.

    A server bound to one address is reached there; one bound to every interface may be
    opened by any of its names, so its UI calls the API relative to the page it loaded.
    """
    if host in ("0.0.0.0", "", "::", "[::]"):
        return "/api"
    return api_url_for(host, port)


def env_line(api_url: str, auth: str | None = None) -> str:
    """The shell line(s) that point a new shell's Prefect commands at ``api_url`` (with
    the credentials of APE's server, when ``auth`` is given)."""
    line = f"export PREFECT_API_URL={shlex.quote(api_url)}"
    return line if auth is None else f"{line}\nexport {CLIENT_AUTH_KEY}={shlex.quote(auth)}"


def _connect_host(host: str) -> str:
    """A server bound to every interface is reached through loopback."""
    return {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host).strip("[]")


def _base_url(host: str, port: int) -> str:
    connect = _connect_host(host)
    return f"http://[{connect}]:{port}" if ":" in connect else f"http://{connect}:{port}"


# --------------------------------------------------------------------------- retention


def retention_days() -> float:
    """The days a new server keeps flow runs: ``$APE_SERVER_RETENTION_DAYS``, else
    :data:`DEFAULT_RETENTION_DAYS`; 0 keeps them forever."""
    return env_number(
        RETENTION_ENV,
        DEFAULT_RETENTION_DAYS,
        lambda days: days == 0 or MIN_RETENTION_DAYS < days < 100_000,
        expected="a retention in days",
        hint=f"give days (more than {MIN_RETENTION_DAYS:.4f}, Prefect's one hour), 0 to keep every run, "
        f"or unset it for {DEFAULT_RETENTION_DAYS:g}",
    )


def retention_settings(days: float) -> dict[str, str]:
    """The Prefect settings that make a server keep flow runs ``days`` days (0: forever)."""
    if days == 0:
        return {VACUUM_ENABLED_KEY: "events"}
    return {VACUUM_ENABLED_KEY: "events,flow_runs", VACUUM_RETENTION_KEY: str(round(days * 86400))}


def retention_in(env: dict[str, str]) -> float:
    """The retention (days; 0: forever) a server started with environment ``env`` keeps, read
    back from Prefect's own settings there, so a value the user set for Prefect is told as it is."""
    enabled = env.get(VACUUM_ENABLED_KEY, "events").strip().lower()
    if enabled not in ("true", "1") and "flow_runs" not in {part.strip() for part in enabled.split(",")}:
        return 0.0
    period = env.get(VACUUM_RETENTION_KEY, "").strip()
    try:
        return float(period) / 86400 if period else PREFECT_DEFAULT_RETENTION_DAYS
    except ValueError:
        return PREFECT_DEFAULT_RETENTION_DAYS  # the server itself refuses it and says so in its log


def describe_retention(days: float | None) -> str:
    """``keeps flow runs 30 days`` as the status lines say it."""
    if days is None:
        return "not known (a server started by an older APE: 'ape server stop' and start it again)"
    if days == 0:
        return "keeps every flow run (no retention)"
    return f"keeps flow runs {days:g} day{'' if days == 1 else 's'} after they end"


def _retention_note(state: _State) -> str:
    """What a reused server keeps, and whether the retention asked for differs (it applies only
    to a server started anew)."""
    note = describe_retention(state.retention_days)
    wanted = retention_days()
    if state.retention_days is not None and abs(wanted - state.retention_days) > 1e-9:
        note += f"; {RETENTION_ENV}={wanted:g} applies after 'ape server stop'"
    return note


# --------------------------------------------------------------------------- probes


def healthy(api_url: str, timeout: float = 5.0) -> bool:
    """True when ``api_url`` is a Prefect API whose health check answers ``true``. Sends no
    credentials (Prefect's ``/health`` needs none): callers prove the port first.

    The timeout is generous because a freshly started server on a busy machine
    can take seconds to answer while its background services boot.
    """
    try:
        # trust_env=False: a proxy from the environment must not intercept loopback calls.
        response = httpx.get(f"{api_url}/health", timeout=timeout, trust_env=False)
    except (httpx.HTTPError, httpx.InvalidURL):
        return False
    if response.status_code != 200:
        return False
    try:
        return response.json() is True
    except ValueError:
        return False


def _port_open(host: str, port: int) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((_connect_host(host), port), timeout=1.0):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """True while process ``pid`` runs (reaping it first if it is our exited child).

    A zombie does not run: a server killed after the run that started it ended is no one's
    child to reap until the system's init gets to it, and while it waited ``ape server start``
    took it for the server still running, waited for it to answer and failed."""
    proc = _SPAWNED.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return not Path("/proc/self").is_dir()  # gone meanwhile; or no /proc, and existing is all we know
    return state not in ("Z", "X")


def _is_prefect_process(pid: int) -> bool:
    """Guard against a reused pid: where /proc exists, the command line must name prefect.

    A process that has just been exec'd shows an empty command line for a moment;
    that counts as a match, or a booting server would look like a stranger.
    """
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.exists():
        return True
    try:
        text = cmdline.read_bytes()
    except OSError:
        return False
    return not text or b"prefect" in text


# --------------------------------------------------------------------------- state


def _live_state(home: Path) -> _State | None:
    """The recorded server if its process still runs, else None."""
    state = _read_state(home)
    if state is None or not _alive(state.pid) or not _is_prefect_process(state.pid):
        return None
    return state


def _holds_port(state: _State, host: str | None = None) -> bool:
    """True when the recorded server (or a child of it) holds the socket listening on its
    port, False while nothing listens there yet (still booting). Raises ApeError when
    another process holds it: a server reused from this APE home must be the one it
    started, and nothing (credentials, flow runs, not even a health check) goes to another.

    Without /proc (not Linux) the socket's holder cannot be seen: True, and the process
    recorded in ``server.json`` being alive (checked before) is all that is verified.
    """
    if not ownership.supported():
        return True
    host = host or state.host
    check = ownership.check_port(state.pid, _connect_host(host), state.port)
    if check.stranger is not None:
        raise ApeError(
            f"port {state.port} is held by {check.stranger}, not by the Prefect server this APE home "
            f"started (pid {state.pid}); nothing was sent to it",
            where="ape server",
            hint="stop that program, then 'ape server stop' and start again",
        )
    return check.owned


def _read_state(home: Path) -> _State | None:
    path = home / STATE_FILE
    try:
        return _State.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError, ValueError):
        return None


def _write_state(home: Path, state: _State) -> None:
    path = home / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state.model_dump_json(), encoding="utf-8")
    tmp.replace(path)


def _clear_state(home: Path) -> None:
    (home / STATE_FILE).unlink(missing_ok=True)


@contextlib.contextmanager
def _start_lock(home: Path) -> Iterator[None]:
    """Serialise concurrent starts (two ``ape run`` at once) so only one server is spawned."""
    try:
        import fcntl  # deferred on purpose: POSIX only
    except ImportError:  # not POSIX: starts are not serialised
        yield
        return
    with open(home / LOCK_FILE, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _info(home: Path, host: str, port: int, pid: int | None) -> ServerInfo:
    state = _read_state(home) if pid is not None else None
    return ServerInfo(
        api_url=api_url_for(host, port),
        ui_url=_base_url(host, port),
        pid=pid,
        home=home,
        log_file=home / LOG_FILE,
        retention_days=state.retention_days if state is not None and state.pid == pid else None,
    )


# --------------------------------------------------------------------------- public API


def status(port: int | None = None) -> ServerInfo | None:
    """The healthy Prefect server on ``port`` (default: :func:`preferred_port`), or None.

    Any Prefect server answers, including one the user started; ``pid`` is only
    set for the server ape itself started and still runs.
    """
    home = server_home()
    ours = _live_state(home)
    port = port or preferred_port()
    mine = ours if ours is not None and ours.port == port and _holds_port(ours) else None
    host = mine.host if mine is not None else DEFAULT_HOST
    if not healthy(api_url_for(host, port)):
        return None
    return _info(home, host, port, mine.pid if mine is not None else None)


def own_server(api_url: str) -> OwnServer | None:
    """The server this APE home started and still runs, when ``api_url`` is its API; None for
    any other API (a user's ``PREFECT_API_URL``, Prefect Cloud): there is no process to watch."""
    ours = _live_state(server_home())
    if ours is None or api_url.rstrip("/") != api_url_for(ours.host, ours.port):
        return None
    return OwnServer(pid=ours.pid, host=_connect_host(ours.host), port=ours.port)


def prove_api(api_url: str) -> OwnServer | None:
    """Before anything is sent to ``api_url``: when it is the address of the server this APE
    home started (``server.json``), that process must still run and hold the port; the server
    to watch, or None for any other API.

    Why: a process APE starts later (the background catch-up, a shell after ``ape server
    env``) gets the address and credentials in ``PREFECT_API_URL`` and
    ``PREFECT_API_AUTH_STRING``, not from ``server.json``. Had the server died and another
    user bound its port, the first request, the health check included, would carry the
    credentials to them. Raises :class:`ApeError` naming what was found, with nothing sent."""
    state = _read_state(server_home())
    if state is None or api_url.rstrip("/") != api_url_for(state.host, state.port):
        return None
    if not _alive(state.pid) or not _is_prefect_process(state.pid):
        raise ApeError(
            f"APE's Prefect server at {api_url} (pid {state.pid}) is not running; nothing was sent to its port",
            where="ape server",
            hint="start it with `ape server start` and run the same command again; if another server of "
            "yours took that address, `ape server stop` forgets the dead one",
        )
    if not _holds_port(state):  # a stranger on the port raises here
        raise ApeError(
            f"APE's Prefect server (pid {state.pid}) does not listen on port {state.port}; nothing was sent to it",
            where="ape server",
            hint="`ape server stop`, then `ape server start`",
        )
    return OwnServer(pid=state.pid, host=_connect_host(state.host), port=state.port)


def process_alive(pid: int) -> bool:
    """True while process ``pid`` runs (a server this process started and that exited is
    reaped, so it does not count as alive while a zombie)."""
    return _alive(pid)


def preferred_port() -> int:
    """``$APE_SERVER_PORT`` if set, else the port of the server ape runs, else 4200."""
    if os.environ.get("APE_SERVER_PORT"):
        return default_port()
    ours = _live_state(server_home())
    return ours.port if ours is not None else DEFAULT_PORT


def start(
    port: int | None = None,
    host: str = DEFAULT_HOST,
    wait_s: float | None = None,
    on_status: StatusCallback | None = None,
) -> ServerInfo:
    """Reuse the healthy Prefect server on ``host:port`` or start one in the background.

    ``port`` defaults to :func:`preferred_port`. The new server is detached from
    this process (its own session), logs to ``server.log`` in :func:`server_home`,
    keeps its database there too, and runs with analytics off. ape manages one
    server at a time. Raises :class:`ApeError` when the port belongs to something
    else, when ape's server already runs on another port, or when the server does
    not come up: its process ended, or its log showed no progress for ``wait_s`` seconds
    (default :func:`start_wait_s`, ``APE_SERVER_START_TIMEOUT``).
    """
    wait_s = start_wait_s() if wait_s is None else wait_s
    notify = on_status or (lambda _message: None)
    home = _private_home()
    port = port or preferred_port()
    api_url = api_url_for(host, port)
    with _start_lock(home):
        ours = _live_state(home)
        mine = ours if ours is not None and ours.port == port else None
        if mine is not None and _holds_port(mine, host) and healthy(api_url):
            note = f"({password_hint(home)}); retention: {_retention_note(mine)}"
            notify(f"Reusing the Prefect server at {_base_url(host, port)} {note}")
            return _info(home, host, port, mine.pid)
        if mine is None and healthy(api_url):
            # Someone else's server (another user's, on a shared machine): a run must not
            # send its prompts, answers and artifacts there. PREFECT_API_URL names one on purpose.
            if ours is not None and _holds_port(ours) and healthy(api_url_for(ours.host, ours.port)):
                notify(
                    f"Port {port} has a Prefect server that {home} did not start; using APE's own at "
                    f"{_base_url(ours.host, ours.port)} ({password_hint(home)})"
                )
                return _info(home, ours.host, ours.port, ours.pid)
            free = _free_port(host, port)
            notify(
                f"Port {port} has a Prefect server that {home} did not start; starting APE's own on port {free} "
                f"(set PREFECT_API_URL={api_url} to use that one)"
            )
            port, api_url, mine = free, api_url_for(host, free), None
        if mine is not None:
            # Our server is still booting (or hung): wait for it instead of starting another.
            notify(f"Waiting for the Prefect server (pid {mine.pid}) to answer")
            info = _wait_healthy(home, host, port, mine.pid, None, wait_s)
            _index_database(home, notify)
            return info
        if ours is not None:
            raise ApeError(
                f"ape already runs a Prefect server on port {ours.port} (pid {ours.pid}); it manages one at a time",
                where="ape server",
                hint=f"use that one (drop --port, or set APE_SERVER_PORT={ours.port}), "
                "or stop it first with 'ape server stop'",
            )
        if _port_open(host, port):
            raise ApeError(
                f"port {port} on {host} is in use by something that is not a Prefect server",
                where="ape server",
                hint="stop that program, or choose another port with --port / APE_SERVER_PORT",
            )
        proc = _spawn(home, host, port)
        started = _read_state(home)
        kept = describe_retention(started.retention_days if started is not None else None)
        note = f"log: {home / LOG_FILE}; {password_hint(home)}"
        notify(f"Starting a Prefect server at {_base_url(host, port)} ({note}); retention: {kept}")
        info = _wait_healthy(home, host, port, proc.pid, proc, wait_s)
        _index_database(home, notify)
        return info


def _index_database(home: Path, notify: StatusCallback) -> None:
    """APE's index for the task-run recorder on the SQLite database of the server it started
    (:func:`ape.server_db.ensure_recorder_index`), made after Prefect's migrations have run (the
    server answers its health check only then). A database that cannot take it is said in one line
    and the server serves on: the index saves time, it changes no result."""
    database = server_db.database_path(home)
    if database is None or not database.exists():
        return
    try:
        server_db.index_database(database)
    except sqlite3.Error as exc:
        notify(f"could not add APE's task-run index to {database} ({exc}); runs work, recording may be slower")


def _free_port(host: str, after: int) -> int:
    """The first port above ``after`` that nothing listens on."""
    for candidate in range(after + 1, min(after + 200, 65536)):
        if not _port_open(host, candidate):
            return candidate
    raise ApeError(f"no free port above {after} on {host}", where="ape server", hint="choose one with APE_SERVER_PORT")


def running_api_url() -> str | None:
    """The API URL of the server this APE home started, when it runs and answers; None else.
    Used by ``ape.run``, which reuses that server but never starts one."""
    ours = _live_state(server_home())
    if ours is None or not _holds_port(ours) or not healthy(api_url_for(ours.host, ours.port)):
        return None
    return api_url_for(ours.host, ours.port)


def stop(timeout_s: float = 20.0) -> bool:
    """Stop the server ape started; True if one was running.

    Servers ape did not start (no state file, or a pid that is not a Prefect
    process) are left alone.
    """
    home = server_home()
    state = _live_state(home)
    if state is None:
        _clear_state(home)
        return False
    _terminate(state.pid, timeout_s)
    _clear_state(home)
    return True


@contextlib.contextmanager
def held_stopped() -> Iterator[Path]:
    """While the ``with`` block runs, this APE home's server is stopped and stays so: the start
    lock is held, so an ``ape run`` that would start it waits. Raises :class:`ApeError` when it
    runs. Yields the server's folder (``ape server compact`` rewrites its database)."""
    home = _private_home()
    with _start_lock(home):
        state = _live_state(home)
        if state is not None:
            raise ApeError(
                f"APE's Prefect server runs (pid {state.pid}, port {state.port}): its database is in use",
                where="ape server",
                hint="wait for the runs that use it to end, 'ape server stop', then try again",
            )
        yield home


def running_retention() -> float | None:
    """The retention (days; 0: forever) of this APE home's running server; None when none runs
    or it did not record one."""
    state = _live_state(server_home())
    return state.retention_days if state is not None else None


def ensure_api_url(
    port: int | None = None,
    host: str = DEFAULT_HOST,
    wait_s: float | None = None,
    on_status: StatusCallback | None = None,
) -> str:
    """The Prefect API URL to use: the user's own setting, else a local server's.

    A ``PREFECT_API_URL`` from the environment or the active Prefect profile
    (an existing server, Prefect Cloud) always wins. Otherwise the local server
    is started or reused and its URL is exported to ``os.environ`` and to
    Prefect's settings, so flows in this process and subprocesses (Dask workers,
    flow-run processes) report to it instead of an ephemeral server.
    """
    notify = on_status or (lambda _message: None)
    configured = configured_api_url()
    if configured:
        prove_api(configured)  # APE's own server's address (`ape server env`): alive, on its port
        notify(f"Using the Prefect API at {configured}")
        return configured
    info = start(port, host, wait_s, on_status)
    os.environ["PREFECT_API_URL"] = info.api_url
    crash_marking.enable_heartbeats()  # before the refresh below, which reads it
    use_credentials(info.home)  # refreshes Prefect's settings too
    crash_marking.ensure_crash_automation()  # a killed run becomes Crashed in the UI
    return info.api_url


def configured_api_url() -> str | None:
    """``PREFECT_API_URL`` as the user set it (environment or Prefect profile), or None."""
    value = os.environ.get("PREFECT_API_URL")
    if value:
        return value
    return prefect_api.api_url()


def existing_api_url(on_status: StatusCallback | None = None) -> str | None:
    """The Prefect API of a server that already runs: the configured one, else this APE home's
    running local server (its URL and credentials go to Prefect's settings); None when there is
    neither. Never starts one: ``ape run --no-server`` and ``ape record`` share this, the latter
    because a new server would not know the run it records. A configured address of this
    home's server is proven first (:func:`prove_api`), as :func:`ensure_api_url` does."""
    configured = configured_api_url()
    if configured:
        prove_api(configured)
        return configured
    if running_api_url() is not None:
        return ensure_api_url(on_status=on_status)  # reuses it
    return None


# --------------------------------------------------------------------------- helpers


START_TIMEOUT_ENV = "APE_SERVER_START_TIMEOUT"
DEFAULT_START_WAIT_S = 90.0
SLOW_START_HINT = (
    f"a busy machine may need longer: {START_TIMEOUT_ENV}=300 gives it 300 s without progress (default "
    f"{DEFAULT_START_WAIT_S:g}); or start one yourself with 'prefect server start' and set PREFECT_API_URL"
)


def start_wait_s() -> float:
    """How long a starting server may go without progress: ``APE_SERVER_START_TIMEOUT``
    (seconds), else :data:`DEFAULT_START_WAIT_S`."""
    return env_number(
        START_TIMEOUT_ENV,
        DEFAULT_START_WAIT_S,
        lambda seconds: seconds > 0,
        expected="a number of seconds above 0",
        hint=f"e.g. export {START_TIMEOUT_ENV}=300, or unset it for {DEFAULT_START_WAIT_S:g} s",
    )


class LogProgress:
    """A starting server's progress, read from its log: the wait of ``wait_s`` starts afresh
    each time the log grows (a slow start on a busy machine is still getting on), up to
    ``MAX_FACTOR`` times ``wait_s`` in all (a server that logs the same error over and over
    is not starting)."""

    MAX_FACTOR = 10

    def __init__(self, log_file: Path, wait_s: float) -> None:
        self.log_file, self.wait_s = log_file, wait_s
        now = time.monotonic()
        self._size = self._read_size()
        self._last = now
        self._cap = now + self.MAX_FACTOR * wait_s

    def _read_size(self) -> int:
        try:
            return self.log_file.stat().st_size
        except OSError:
            return 0

    def grew(self) -> bool:
        """True (and the wait starts afresh) when the log grew since the last look, within the cap."""
        if time.monotonic() > self._cap:
            return False
        size = self._read_size()
        if size == self._size:
            return False
        self._size, self._last = size, time.monotonic()
        return True

    def stalled(self) -> bool:
        """True once the log has not grown for ``wait_s`` seconds, or the whole cap has passed."""
        self.grew()
        now = time.monotonic()
        return now - self._last > self.wait_s or now > self._cap


def server_env(home: Path, host: str, port: int) -> dict[str, str]:
    """The environment a server APE starts runs with: the caller's, less another API or
    profile, plus APE's settings (:data:`SERVER_SETTINGS`, the retention of
    :func:`retention_days`; a Prefect setting the user exported wins) and its credentials."""
    env = dict(os.environ)
    # The server must not talk to another API or read the user's profile; its
    # database lives beside its log, unless the user configured a database URL.
    for key in ("PREFECT_API_URL", "PREFECT_API_KEY", "PREFECT_PROFILE"):
        env.pop(key, None)
    env["PREFECT_HOME"] = str(home / "prefect")
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    for key, value in {**SERVER_SETTINGS, **retention_settings(retention_days())}.items():
        env.setdefault(key, value)
    # credentials, CORS for its own UI only, CSRF tokens: never loosened by the environment
    env[SERVER_AUTH_KEY] = auth_string(home)
    env["PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS"] = _base_url(host, port)
    env["PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED"] = "true"
    # Without this the UI it serves calls the API on Prefect's default port 4200 (its
    # /ui-settings answer), whatever --port says: another server's data, or nothing.
    if not any(env.get(key) for key in UI_API_URL_KEYS):
        env["PREFECT_SERVER_UI_API_URL"] = ui_api_url_for(host, port)
    return env


def _spawn(home: Path, host: str, port: int) -> subprocess.Popen[bytes]:
    env = server_env(home, host, port)
    command = [sys.executable, "-m", "ape.prefect_sqlite", "server", "start"]  # Prefect on the newest SQLite
    command += ["--host", host, "--port", str(port)]
    # a process group of its own, so a Ctrl-C in the caller's terminal does not stop it
    creationflags = 0
    if sys.platform == "win32":
        creationflags = subprocess.CREATE_NEW_PROCESS_GROUP
    with open(home / LOG_FILE, "wb") as log:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=home,
            creationflags=creationflags,
            start_new_session=sys.platform != "win32",
        )
    _SPAWNED[proc.pid] = proc
    state = _State(pid=proc.pid, host=host, port=port, started_at=time.time(), retention_days=retention_in(env))
    _write_state(home, state)
    database = server_db.database_path(home, env)
    if database is not None:  # a size for `ape server status`'s growth rate
        server_db.record_sample(home, server_db.database_size(database))
    return proc


def _wait_healthy(
    home: Path,
    host: str,
    port: int,
    pid: int,
    proc: subprocess.Popen[bytes] | None,
    wait_s: float,
) -> ServerInfo:
    api_url = api_url_for(host, port)
    log_file = home / LOG_FILE
    progress = LogProgress(log_file, wait_s)
    _wait_owned(home, host, port, pid, proc, wait_s, progress)
    while not progress.stalled():
        if healthy(api_url):
            return _info(home, host, port, pid if _alive(pid) else None)
        if not _alive(pid):
            _clear_state(home)
            code = f" (exit code {proc.returncode})" if proc is not None else ""
            raise ApeError(
                f"the Prefect server failed to start{code}:\n{_log_tail(log_file)}",
                where=str(log_file),
                hint="read the log for the cause; 'ape server start' retries",
            )
        time.sleep(0.3)
    _terminate(pid, 10.0)
    _clear_state(home)
    raise ApeError(
        f"the Prefect server did not answer at {api_url}, its log still for {wait_s:g} s, "
        f"and was stopped:\n{_log_tail(log_file)}",
        where=str(log_file),
        hint=SLOW_START_HINT,
    )


def _wait_owned(
    home: Path,
    host: str,
    port: int,
    pid: int,
    proc: subprocess.Popen[bytes] | None,
    wait_s: float,
    progress: LogProgress | None = None,
) -> None:
    """Wait until server ``pid`` (or its child) listens on the port, before any request goes
    there; on a stranger holding the port, or the server ending first, stop it, forget it and
    raise the one line :func:`ownership.wait_owned` makes."""
    if not ownership.supported():
        return  # no socket table to read: the health check below is all (see _holds_port)

    def exited() -> str | None:
        if _alive(pid):
            return None
        return f"failed to start (exit code {proc.returncode})" if proc is not None else "failed to start"

    try:
        ownership.wait_owned(
            pid,
            _connect_host(host),
            port,
            exited=exited,
            timeout_s=wait_s,
            what=f"APE's Prefect server (pid {pid})",
            where=str(home / LOG_FILE),
            log_line=lambda: _log_tail(home / LOG_FILE, 1).strip(),
            hint="another program took the port first: stop it, or choose another port with --port / APE_SERVER_PORT",
            progress=progress.grew if progress is not None else None,
            slow_hint=SLOW_START_HINT,
        )
    except ApeError:
        _terminate(pid, 10.0)
        _clear_state(home)
        raise


def _terminate(pid: int, timeout_s: float) -> None:
    """SIGTERM the server's process group, then SIGKILL it if it lingers."""
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            break
        time.sleep(0.2)
    else:
        _signal(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
        kill_deadline = time.monotonic() + 5.0
        while _alive(pid) and time.monotonic() < kill_deadline:
            time.sleep(0.1)
    _SPAWNED.pop(pid, None)


def _signal(pid: int, sig: int) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(pid, sig)  # the server leads its own session, so its group id is its pid
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log written)"
    tail = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(f"    {line}" for line in tail) or "(log is empty)"


def _refresh_prefect_settings() -> None:
    """Make Prefect re-read the environment: its settings are captured at import time."""
    prefect_api.refresh_settings()


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_RETENTION_DAYS",
    "RETENTION_ENV",
    "SERVER_SETTINGS",
    "OwnServer",
    "ServerInfo",
    "ape_home",
    "api_url_for",
    "configured_api_url",
    "api_session",
    "auth_headers",
    "auth_string",
    "client_env",
    "default_port",
    "describe_retention",
    "ensure_api_url",
    "held_stopped",
    "env_line",
    "healthy",
    "password_hint",
    "own_server",
    "preferred_port",
    "process_alive",
    "retention_days",
    "retention_in",
    "retention_settings",
    "running_retention",
    "running_api_url",
    "server_env",
    "server_home",
    "start",
    "status",
    "stop",
    "ui_api_url_for",
    "ui_password_file",
    "use_credentials",
]
