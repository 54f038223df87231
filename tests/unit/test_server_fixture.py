"""The ``prefect_server`` fixture (tests/conftest.py) points the test process at the server
for the module that asks for it, and no further: later tests of the same session see no
``PREFECT_API_URL`` (it used to stay set to the end of the session, so a unit test run after
a server test built the server-held limiter and reported its flows to a server).

Run as an inner pytest session over two small test modules, with the server process
replaced by a URL nobody serves (the fixture under test is the part that sets and restores
the variable and Prefect's setting, not the server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import REPO_ROOT

CONFTEST = """
import pytest

from tests.conftest import prefect_server  # noqa: F401 - the fixture under test


@pytest.fixture(scope="session")
def prefect_server_process():
    yield "http://127.0.0.1:9/api"
"""

USES_SERVER = """
import os

from prefect.settings import PREFECT_API_URL


def test_the_module_that_asks_sees_the_server(prefect_server):
    assert os.environ["PREFECT_API_URL"] == prefect_server == PREFECT_API_URL.value()


def test_and_so_do_its_other_tests():
    assert PREFECT_API_URL.value() == "http://127.0.0.1:9/api"
"""

LATER = """
import os

from prefect.settings import PREFECT_API_URL


def test_a_later_module_sees_no_server():
    assert "PREFECT_API_URL" not in os.environ
    assert not PREFECT_API_URL.value()
"""


def test_a_server_tests_module_leaves_no_api_url_to_later_modules(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_a_server.py").write_text(USES_SERVER)
    (tmp_path / "test_b_later.py").write_text(LATER)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout, done.stdout
