"""An agent run whose sandbox fails to start for some items: those sessions are counted
apart from the score in report.json, and ``ape retry`` redoes exactly them.

The failure is real: the item's ``seed_dir`` folder holds a folder where the item's own files
put a file, so the working folder cannot be seeded (an OSError, a SandboxError)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.cli import run_ape
from tests.helpers.paths import REPO_ROOT
from tests.helpers.sandbox_kinds import available

pytestmark = pytest.mark.skipif(not available("bwrap"), reason="needs bubblewrap")

BROKEN = {"fix_add": "calc.py", "count_lines": "data.txt"}  # item -> a file its seed collides with


def sessions_of(output: Path) -> list[dict]:
    return [
        session
        for line in (output / "results.jsonl").read_text().splitlines()
        for session in json.loads(line)["sessions"]
    ]


def test_sandbox_failures_are_counted_apart_and_ape_retry_redoes_exactly_them(
    prefect_server: str, tmp_path: Path
) -> None:
    example = tmp_path / "agent"
    shutil.copytree(REPO_ROOT / "examples" / "agent", example, ignore=shutil.ignore_patterns("output"))
    config = example / "config.toml"
    root = tmp_path / "sandboxes"
    config.write_text(config.read_text().replace("[sandbox]\n", f'[sandbox]\nroot = "{root}"\nseed_dir = "seeds"\n'))
    for item, name in BROKEN.items():
        (example / "seeds" / item / name / "inside").mkdir(parents=True)

    first = run_ape("run", str(config), "--no-progress", cwd=tmp_path)
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]  # errored items fail the run
    output = example / "output"
    errored = {s["item_id"]: s for s in sessions_of(output) if s["outcome"] == "ERROR"}
    assert set(errored) == set(BROKEN)
    assert {s["error"]["type"] for s in errored.values()} == {"SandboxError"}
    report = json.loads((output / "report.json").read_text())
    row = report["leaderboard"][0]
    assert row["infrastructure_errors"] == 2 and report["summary"]["infrastructure_errors"] == 2
    # apart from the score: 8 sessions scored, 6 of them passed (fix_palindrome and spelling fail)
    assert row["n_sessions"] == 8 and row["outcomes"]["ERROR"] == 0
    assert row["pass_rate"] == pytest.approx(6 / 8)
    board = (output / "leaderboard.md").read_text()
    assert "**Infrastructure errors:** 2 sessions of model" in board and "ape retry" in board
    others = {s["item_id"]: s for s in sessions_of(output) if s["item_id"] not in BROKEN}

    shutil.rmtree(example / "seeds")  # the infrastructure is mended
    second = run_ape("retry", str(output), "--no-progress", cwd=tmp_path)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    final = {s["item_id"]: s for s in sessions_of(output)}  # the last record of each item
    # no other item was run again: their records (timings included) are as they were
    assert {item: final[item] for item in others} == others
    assert all(final[item]["check"]["status"] == "PASSED" for item in BROKEN)
    report = json.loads((output / "report.json").read_text())
    row = report["leaderboard"][0]
    assert row["infrastructure_errors"] == 0 and row["n_sessions"] == 10
    assert row["pass_rate"] == pytest.approx(0.8)
    assert not list(root.iterdir())
