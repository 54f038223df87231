"""A served benchmark's flow run checks the endpoints too: a dead ``base_url`` ends the
run Failed with the one line naming the model and the URL, before any session."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest

from ape.flows.served import CONFIG_ENV, served_benchmark
from tests.helpers.runner import make_benchmark


def test_a_served_run_with_a_dead_endpoint_fails_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    base_url = f"http://127.0.0.1:{port}/v1"
    model = f'[[model]]\nname = "dead"\nprovider = "openai"\nmodel = "m"\nbase_url = "{base_url}"\n'
    config = make_benchmark(tmp_path, n=2, models=model)
    monkeypatch.setenv(CONFIG_ENV, str(config))
    handler = signal.getsignal(signal.SIGINT)
    try:
        state = served_benchmark.fn()
    finally:
        signal.signal(signal.SIGINT, handler)  # the flow leaves Ctrl-C to its runner
    assert state.is_failed()
    assert "[model] 'dead' base_url" in str(state.message)
    assert f"{base_url} is unreachable: connection refused" in str(state.message)
    assert not (tmp_path / "out" / "dead" / "results.jsonl").exists()
