"""The flow-run link is a real UI address or nothing (never "None/flow-runs/...")."""

from __future__ import annotations

from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL, temporary_settings

from ape.flows.benchmark import flow_run_link

RUN = "0b6c6d2e-6f43-4c1e-9d8e-1a2b3c4d5e6f"


def test_no_link_without_a_ui() -> None:
    with temporary_settings(restore_defaults={PREFECT_API_URL, PREFECT_UI_URL}):
        assert flow_run_link(RUN) is None  # Prefect's temporary server: nothing to open
    assert flow_run_link(None) is None


def test_a_link_into_the_servers_ui() -> None:
    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:4311/api"}, restore_defaults={PREFECT_UI_URL}):
        assert flow_run_link(RUN) == f"http://127.0.0.1:4311/runs/flow-run/{RUN}"
