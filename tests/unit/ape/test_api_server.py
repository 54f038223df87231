"""ape.run without a configured API and without APE's server: one line says it runs on
Prefect's temporary server, and that server sends no telemetry (an ERROR line offline)."""

from __future__ import annotations

import logging
import os

import pytest

from ape.launch import connect


def test_without_a_server_it_says_so_and_turns_telemetry_off(tmp_path, monkeypatch: pytest.MonkeyPatch, ape_log):
    monkeypatch.setenv("APE_HOME", str(tmp_path / "ape"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_SERVER_ANALYTICS_ENABLED", raising=False)
    monkeypatch.setattr("ape.server.configured_api_url", lambda: None)  # no profile URL either
    ape_log.set_level(logging.INFO, logger="ape")
    connect("reuse")
    assert os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert "PREFECT_API_URL" not in os.environ  # nothing was started
    assert [r.getMessage() for r in ape_log.records] == [
        "No Prefect server running for this APE home: using Prefect's temporary server "
        "(no UI, keeps no history); 'ape server start' first to watch runs in the UI"
    ]


def test_a_configured_api_is_left_alone(monkeypatch: pytest.MonkeyPatch, ape_log):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4999/api")
    ape_log.set_level(logging.INFO, logger="ape")
    connect("reuse")
    assert os.environ["PREFECT_API_URL"] == "http://127.0.0.1:4999/api" and not ape_log.records
