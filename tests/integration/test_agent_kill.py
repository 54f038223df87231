"""kill -9 of a real ``ape run`` of the agent example mid-session loses only the sessions
that were running: the rerun saves every item exactly once, and the working folders the
killed sessions left are removed by the rerun (``ape.tasks.agent.sandbox.sweep_stale``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.sandbox_kinds import available

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not available("bwrap"), reason="needs bubblewrap")]

ITEMS = 10


def ape_run(config: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "ape", "run", str(config), "--no-server", "--no-progress"],
        cwd=config.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def saved(results: Path) -> list[str]:
    """Item ids of the complete lines of results.jsonl (a line cut by the kill is not saved)."""
    if not results.exists():
        return []
    return [json.loads(line)["item_id"] for line in results.read_text().split("\n")[:-1] if line.strip()]


def test_kill_9_mid_session_loses_only_that_session(prefect_server: str, tmp_path: Path, kill_at_end) -> None:  # type: ignore[no-untyped-def]
    example = tmp_path / "agent"
    shutil.copytree(REPO_ROOT / "examples" / "agent", example, ignore=shutil.ignore_patterns("output"))
    config = example / "config.toml"
    root = tmp_path / "sandboxes"
    text = config.read_text().replace("[sandbox]\n", f'[sandbox]\nroot = "{root}"\n')
    config.write_text(text.replace('behaviour = "agent"\n', 'behaviour = "agent"\nlatency_s = 0.4\n'))
    env = dict(os.environ, PREFECT_API_URL=prefect_server, PYTHONPATH=str(REPO_ROOT))
    results = example / "output" / "results.jsonl"

    proc = kill_at_end(ape_run(config, env))
    deadline = time.monotonic() + 180
    # kill once some items are saved and a session is running in its working folder
    while not (len(saved(results)) >= 2 and root.is_dir() and any(root.iterdir())):
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the run saved too little in time"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = saved(results)
    assert 2 <= len(before) < ITEMS
    left = sorted(path.name for path in root.iterdir())
    assert left, "the killed session's working folder should be there before the rerun"

    again = kill_at_end(ape_run(config, env))
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out.decode()[-3000:]
    counts = Counter(saved(results))
    assert len(counts) == ITEMS and set(counts.values()) == {1}, counts  # every item exactly once
    assert saved(results)[: len(before)] == before  # what was saved stays, not redone
    assert not list(root.iterdir()), "a killed session's working folder was left behind"
    report = json.loads((example / "output" / "report.json").read_text())
    assert report["leaderboard"][0]["pass_rate"] == pytest.approx(0.8)
