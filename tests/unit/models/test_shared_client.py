"""One OpenAI-compatible client per model section and process (``ape.tasks.models.shared_clients``).

Every solver worker builds its model with ``build_model``; the ``ChatOpenAI`` inside is
built once and shared, the retry and rate-limit wrapper stays per worker. Checked against
the benchmark's OpenAI-compatible stub in its own process (real sockets), which counts
the requests it answered and the TCP connections it accepted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_openai", reason="the shared-client tests need the 'openai' extra")

from langchain_core.messages import HumanMessage  # noqa: E402

from ape.schemas.config import ModelConfig  # noqa: E402
from ape.tasks.models import reasoning_chat  # noqa: E402
from ape.tasks.models.build import build_model  # noqa: E402
from ape.tasks.models.shared_clients import MAX_CLIENTS, clear_shared_clients  # noqa: E402

STUB = Path(__file__).resolve().parents[3] / "benchmarks" / "openai_stub.py"


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    clear_shared_clients()
    yield
    clear_shared_clients()


@pytest.fixture
def stub() -> Iterator[str]:
    """The stub server on a free loopback port, answering after 50 ms; its base URL."""
    proc = subprocess.Popen(
        [sys.executable, str(STUB), "--port", "0", "--latency", "0.05"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _section(base_url: str, **extra: Any) -> ModelConfig:
    return ModelConfig.model_validate(
        {"name": "stub", "provider": "openai", "model": "stub", "base_url": base_url, **extra}
    )


def _stats(root: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{root}/stats", timeout=10) as answer:
        return json.loads(answer.read())


def test_workers_share_one_client_and_keep_their_own_wrapper(tmp_path: Path) -> None:
    cfg = _section("http://127.0.0.1:9/v1")
    models = [build_model(cfg, tmp_path) for _ in range(8)]  # what 8 solver workers build
    assert len({id(m.inner) for m in models}) == 1  # one ChatOpenAI, one openai client
    assert len({id(m) for m in models}) == 8  # each worker's retry wrapper is its own
    assert len({id(m.limiter) for m in models}) == 1  # and the model's one rate limiter


def test_a_changed_key_or_setting_builds_another_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUB_KEY", "first-key")
    cfg = _section("http://127.0.0.1:9/v1", api_key_env="STUB_KEY")
    first = build_model(cfg, tmp_path).inner
    assert build_model(cfg, tmp_path).inner is first
    monkeypatch.setenv("STUB_KEY", "second-key")  # a rotated key is used at once
    rotated = build_model(cfg, tmp_path).inner
    assert rotated is not first
    assert rotated.openai_api_key.get_secret_value() == "second-key"
    warmer = build_model(_section("http://127.0.0.1:9/v1", api_key_env="STUB_KEY", temperature=0.5), tmp_path)
    assert warmer.inner is not rotated and warmer.inner.temperature == 0.5
    other = build_model(_section("http://127.0.0.1:10/v1", api_key_env="STUB_KEY"), tmp_path)
    assert other.inner is not rotated and other.inner.openai_api_base == "http://127.0.0.1:10/v1"


def test_the_cache_keeps_a_bounded_number_of_clients(tmp_path: Path) -> None:
    first = build_model(_section("http://127.0.0.1:9/v1", temperature=0.0), tmp_path).inner
    for index in range(MAX_CLIENTS):
        build_model(_section("http://127.0.0.1:9/v1", temperature=0.01 * (index + 1)), tmp_path)
    assert build_model(_section("http://127.0.0.1:9/v1", temperature=0.0), tmp_path).inner is not first


def test_concurrent_workers_build_one_client_and_get_their_own_answers(
    tmp_path: Path, stub: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 workers starting together: one ChatOpenAI built, every answer the right one, and
    no more connections than requests in flight at once."""
    built: list[int] = []

    class CountedChatOpenAI(reasoning_chat.ReasoningChatOpenAI):  # the class provider "openai" builds
        def __init__(self, **kwargs: Any) -> None:
            built.append(1)
            super().__init__(**kwargs)

    monkeypatch.setattr(reasoning_chat, "ReasoningChatOpenAI", CountedChatOpenAI)
    cfg = _section(f"{stub}/v1")
    workers, calls = 8, 5
    start = threading.Barrier(workers)
    answers: dict[tuple[int, int], str] = {}
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            start.wait()
            model = build_model(cfg, tmp_path)
            for call in range(calls):
                reply = model.invoke([HumanMessage(f"What is {index} + {call}?")])
                answers[(index, call)] = str(reply.content)
        except BaseException as exc:  # handed to the test below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert built == [1]
    assert answers == {(i, c): f"The answer is {i + c}" for i in range(workers) for c in range(calls)}
    stats = _stats(stub)
    assert stats["answered"] == workers * calls
    assert stats["connections"] - 1 <= workers  # the /stats request is a connection too
