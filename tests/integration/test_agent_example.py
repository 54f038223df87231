"""examples/agent through ``ape run``: the scripted mock agent solves 8 of the 10 tasks
through the bash, python and files tools, graded on the state it leaves; with three runs
per item the report gives pass^k beside pass@k; no working folder is left behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.cli import run_ape
from tests.helpers.paths import REPO_ROOT
from tests.helpers.sandbox_kinds import available

pytestmark = pytest.mark.skipif(not available("bwrap"), reason="needs bubblewrap")


def test_the_agent_example_runs_with_the_mock_agent(prefect_server: str, tmp_path: Path) -> None:
    example = tmp_path / "agent"
    shutil.copytree(REPO_ROOT / "examples" / "agent", example, ignore=shutil.ignore_patterns("output"))
    config = example / "config.toml"
    root = tmp_path / "sandboxes"
    text = config.read_text().replace("[run]\n", "[run]\nruns_per_data = 3\n")
    config.write_text(text.replace("[sandbox]\n", f'[sandbox]\nroot = "{root}"\n'))
    done = run_ape("run", str(config), "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((example / "output" / "report.json").read_text())
    row = report["leaderboard"][0]
    assert row["pass_rate"] == pytest.approx(0.8)
    assert row["pass_hat_k"]["3"][0] == pytest.approx(0.8) and row["pass_at_k"]["3"] == pytest.approx(0.8)
    sessions = [
        session
        for line in (example / "output" / "results.jsonl").read_text().splitlines()
        for session in json.loads(line)["sessions"]
    ]
    by_item = {s["item_id"]: s for s in sessions}
    assert by_item["fix_add"]["check"]["status"] == "PASSED"
    assert by_item["fix_palindrome"]["check"]["status"] == "FAILED"
    assert by_item["spelling"]["outcome"] == "GAVE_UP"
    assert "pass^k" in (example / "output" / "leaderboard.md").read_text()
    assert not list(root.iterdir())  # every session's folder removed
    limits = report["summary"]["provenance"]["runs"]["mock-agent"]["agent_sandbox"]
    assert limits["command_timeout_s"] == 20 and limits["session_timeout_s"] == 120 and limits["network"] == "none"
