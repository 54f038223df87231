"""Prefect's scale path on this machine, for one end-to-end test: PostgreSQL, the Redis
broker, and the API and the services as separate processes (what ``docs/server.md``
tells a team to run on a machine of its own).

Debian's ``postgresql`` and ``redis-server`` provide the databases (``.ci/run`` installs
them), the ``scale`` extra provides ``prefect-redis``. PostgreSQL refuses to run as root:
as root its data folder belongs to the ``postgres`` user and it runs as that user.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ape import server
from tests.helpers.processes import free_port, start_logged, stop_group, wait_server


def _postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    return Path(on_path).parent if on_path else None


def missing() -> str | None:
    """Why the scale path cannot start here, or None."""
    if importlib.util.find_spec("prefect_redis") is None:
        return "needs prefect-redis (pip install -e '.[scale]')"
    if _postgres_bin() is None:
        return "needs PostgreSQL (apt-get install postgresql)"
    if shutil.which("redis-server") is None:
        return "needs redis-server (apt-get install redis-server)"
    return None


def scale_settings(pg_port: int, redis_port: int) -> dict[str, str]:
    """The settings of a Prefect server on PostgreSQL with the Redis broker, as docs/server.md
    lists them, plus APE's own batching of the task-run recorder (``server.SERVER_SETTINGS``)."""
    redis = f"redis://127.0.0.1:{redis_port}/0"
    return {
        **server.SERVER_SETTINGS,
        "PREFECT_API_DATABASE_CONNECTION_URL": f"postgresql+asyncpg://prefect@127.0.0.1:{pg_port}/postgres",
        "PREFECT_MESSAGING_BROKER": "prefect_redis.messaging",
        "PREFECT_MESSAGING_CACHE": "prefect_redis.messaging",
        "PREFECT_SERVER_EVENTS_CAUSAL_ORDERING": "prefect_redis.ordering",
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": "prefect_redis.lease_storage",
        "PREFECT_REDIS_MESSAGING_URL": redis,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited ({proc.returncode}): {log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    raise RuntimeError(f"port {port} did not open in {timeout} s: {log.read_text(errors='replace')[-2000:]}")


@contextlib.contextmanager
def scale_server(folder: Path) -> Iterator[str]:
    """PostgreSQL, Redis, the Prefect API (``--no-services``) and ``prefect server services
    start``, each its own process; yields the API URL. Everything is stopped on exit."""
    pg_bin = _postgres_bin()
    assert pg_bin is not None, missing()
    folder.mkdir(parents=True, exist_ok=True)
    # a folder of its own under /tmp: pytest's are private to this user, and as root
    # PostgreSQL runs as its own user, who must reach its data
    pg_home = Path(tempfile.mkdtemp(prefix="ape-test-postgres-"))
    data = pg_home / "data"
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(pg_home, "postgres")
        shutil.chown(data, "postgres")
    subprocess.run(
        _as_postgres([str(pg_bin / "initdb"), "-D", str(data), "-U", "prefect", "--auth=trust", "-E", "UTF8"]),
        check=True,
        capture_output=True,
    )
    pg_port, redis_port, api_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_PROFILE")}
    env["PREFECT_HOME"] = str(folder / "prefect-home")
    settings = scale_settings(pg_port, redis_port)
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, pg_home, ignore_errors=True)
        postgres = start_logged(
            _as_postgres(
                [str(pg_bin / "postgres"), "-D", str(data), "-p", str(pg_port), "-k", str(pg_home)]
                + ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]
            ),
            folder / "postgres.log",
            cwd=folder,
            env=env,
        )
        stack.callback(stop_group, postgres, 20)
        redis = start_logged(
            ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            folder / "redis.log",
            cwd=folder,
            env=env,
        )
        stack.callback(stop_group, redis, 10)
        _wait_port(pg_port, postgres, folder / "postgres.log")
        _wait_port(redis_port, redis, folder / "redis.log")
        prefect_env = {**env, **settings}
        api = start_logged(
            [sys.executable, "-m", "prefect", "server", "start", "--no-services"]
            + ["--host", "127.0.0.1", "--port", str(api_port)],
            folder / "api.log",
            cwd=folder,
            env=prefect_env,
        )
        stack.callback(stop_group, api, 20)
        url = f"http://127.0.0.1:{api_port}/api"
        wait_server(api, api_port, f"{url}/health", log=folder / "api.log", timeout=120)
        services = start_logged(
            [sys.executable, "-m", "prefect", "server", "services", "start"],
            folder / "services.log",
            cwd=folder,
            env={**prefect_env, "PREFECT_API_URL": url},
        )
        stack.callback(stop_group, services, 20)
        yield url
