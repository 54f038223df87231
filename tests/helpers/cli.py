"""Runs ``python -m ape`` as a user would, in a child process that imports this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import REPO_ROOT


def run_ape(*args: str, cwd: Path, unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``python -m ape ARGS`` in ``cwd`` with this environment less the variables in ``unset``
    (a test's Prefect API or storage path that the run must choose for itself)."""
    env = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "-m", "ape", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
