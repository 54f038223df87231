"""Shared fixtures: an isolated Prefect home and, for tests that need one, a real Prefect server."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.processes import free_port, stop_group, wait_server

pytest_plugins = ["tests.helpers.llm_server"]  # the fixture of the tests of the real LLM

# Keep tests away from the user's ~/.prefect and from the network.
_HOME = Path(tempfile.mkdtemp(prefix="ape-test-prefect-"))
os.environ.setdefault("PREFECT_HOME", str(_HOME))
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
# an ephemeral Prefect server on a machine at load 15 took longer than Prefect's 20 s to start
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
# ... and from the user's APE home (its server, credentials, stored configs): a home of this
# session's own, so the tests that run side by side (pytest-xdist's workers) never share a
# server they did not start; the server a test started there is stopped when the session ends
_APE_HOME = Path(tempfile.mkdtemp(prefix="ape-test-home-"))
os.environ.setdefault("APE_HOME", str(_APE_HOME))


@pytest.fixture(scope="session", autouse=True)
def _stop_the_sessions_ape_server() -> Iterator[None]:
    yield
    if os.environ.get("APE_HOME") == str(_APE_HOME):
        from ape import server

        server.stop()
    shutil.rmtree(_APE_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def prefect_server_process() -> Iterator[str]:
    """A real ``prefect server start`` on a free loopback port, started once per session;
    yields its API URL and changes nothing in this process (see :func:`prefect_server`).

    The server is stopped even when a test (or this teardown) fails. It must hold its port
    (:func:`wait_server`): one that lost the port to another process fails the fixture at
    once, naming it.
    """
    port = free_port()
    home = Path(tempfile.mkdtemp(prefix="ape-test-server-"))
    env = dict(os.environ, PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    env.pop("PREFECT_API_URL", None)
    api = f"http://127.0.0.1:{port}/api"
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, home, ignore_errors=True)
        log = stack.enter_context(open(home / "server.log", "w"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stack.callback(stop_group, proc, 20)
        wait_server(proc, port, f"{api}/health", log=home / "server.log")
        yield api


@contextlib.contextmanager
def pointing_at(api: str) -> Iterator[None]:
    """``PREFECT_API_URL`` (the variable and Prefect's setting) set to ``api`` inside the block,
    and what was there before put back after it, also when the block fails."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with pytest.MonkeyPatch.context() as patch, temporary_settings({PREFECT_API_URL: api}):
        patch.setenv("PREFECT_API_URL", api)
        yield


@pytest.fixture(scope="module")
def prefect_server(prefect_server_process: str) -> Iterator[str]:
    """The session's real Prefect server (:func:`prefect_server_process`); yields its API URL.

    Also sets PREFECT_API_URL for the test process, so flows run against it: for the tests of
    the module that asks for it (module-scoped, so a module's own module-scoped fixtures can
    use it too), and no further. The variable and Prefect's setting are put back when the
    module ends: a server test no longer leaves later tests of the session running as if a
    server were configured (the server-held limiter, flows reporting to a server).
    """
    with pointing_at(prefect_server_process):
        yield prefect_server_process


@pytest.fixture
def kill_at_end() -> Iterator[Callable[[subprocess.Popen], subprocess.Popen]]:
    """Registers a background process (started with ``start_new_session=True``); whatever is
    still running in its process group when the test ends, passed or failed, is killed."""
    started: list[subprocess.Popen] = []

    def register(proc: subprocess.Popen) -> subprocess.Popen:
        started.append(proc)
        return proc

    yield register
    for proc in started:
        stop_group(proc, 0)


@pytest.fixture(scope="session", autouse=True)
def _count_mock_calls() -> None:
    """Count the mock models' calls for the whole session (:mod:`tests.helpers.mock_calls`)."""
    from tests.helpers import mock_calls

    mock_calls.install()


@pytest.fixture(autouse=True)
def _restore_process_state() -> Iterator[None]:
    """Undo what code under test changes for the whole process, even when the test fails.

    The command line and the runner change ``os.environ`` (``PREFECT_API_URL``,
    ``PREFECT_LOCAL_STORAGE_PATH``, logging levels) and the ``ape`` logger (a terminal
    handler, its level, no propagation); models share process-wide rate limiters (whose
    ``peak_concurrency`` counts across tests). Each test starts from the state the
    session had, and leaves it so (each test gets its own, empty table of limiters). The
    handlers of SIGINT and SIGTERM too: a flow that leaves Ctrl-C to its runner sets SIGINT
    to SIG_IGN, and every process a later test starts would inherit it and ignore Ctrl-C.
    """
    import signal

    from ape.tasks.models.limits import policy as limits

    signals = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    environ = dict(os.environ)
    logger = logging.getLogger("ape")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    patch = pytest.MonkeyPatch()
    patch.setattr(limits, "_LIMITERS", {})
    try:
        yield
    finally:
        patch.undo()
        for signum, disposition in signals.items():
            if disposition is not None and signal.getsignal(signum) is not disposition:
                signal.signal(signum, disposition)
        for handler in [h for h in logger.handlers if h not in handlers]:
            logger.removeHandler(handler)
        for handler in handlers:
            if handler not in logger.handlers:
                logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        for key in set(os.environ) - set(environ):
            del os.environ[key]
        for key, value in environ.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


@pytest.fixture
def ape_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """``caplog`` for the ``ape`` logger and its children, each record captured once.

    The command line sets the ``ape`` logger not to propagate to the root logger (where
    ``caplog`` listens), other tests leave it propagating: so the handler sits on ``ape``
    itself with propagation off for the test, and both are undone afterwards, passed or
    failed.
    """
    logger = logging.getLogger("ape")
    propagate = logger.propagate
    logger.addHandler(caplog.handler)
    logger.propagate = False
    try:
        yield caplog
    finally:
        logger.propagate = propagate
        logger.removeHandler(caplog.handler)


def pytest_collection_modifyitems(config, items):
    """Tests that start a real Prefect server are slow: `pytest -m "not slow"` is the quick loop.
    Tests of the real LLM server are slow too, and marked llm."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "prefect_server" in fixtures:
            item.add_marker(pytest.mark.slow)
        if "llama_server" in fixtures:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.llm)
