"""Tests that start Prefect or model servers, the command line, or whole runs in subprocesses: all slow.

``python -m pytest -m "not slow"`` (the quick loop) skips this folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.slow)
