"""Prefect reads its settings once, when it is first imported: APE sets some of them for a
run (the result storage beside the output folder, the API URL and credentials), so the
modules a run passes through before that must not import Prefect."""

from __future__ import annotations

import subprocess
import sys

import pytest

BEFORE_THE_SETTINGS = ["ape.cli", "ape.launch", "ape.api", "ape.server", "ape.watchdog", "ape.flows.preflight"]


@pytest.mark.parametrize("module", BEFORE_THE_SETTINGS)
def test_importing_it_leaves_prefect_unimported(module: str) -> None:
    probe = f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'prefect')[:3])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"{module} imports {done.stdout.strip()}"


def test_the_probe_sees_prefect_when_a_flow_module_is_imported() -> None:
    probe = "import sys, ape.flows.benchmark; print('prefect' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr[-2000:]
