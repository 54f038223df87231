"""An output folder copied (``cp -r``) or moved (``mv``) with its benchmark resumes and retries
from its own cached generations: no model calls for the sessions its cache holds.

Prefect's cache records name each cached result by its absolute path; before
:class:`ape.tasks.storage.prefect_internals.CacheRecords`, every cached session of a copied folder failed with
"Provided path .../A/out/.cache/results/... is outside of the base path .../copied/out/...".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ape.cli import main
from tests.helpers import mock_calls
from tests.helpers.paths import REPO_ROOT
from tests.helpers.runner import make_benchmark, read_results

pytestmark = pytest.mark.usefixtures("prefect_server")

N, RUNS = 6, 2


def ape_here(args: list[str], out: Path) -> int:
    """``ape ...`` in this process, with Prefect's local result storage where ``ape run`` puts
    it in a new process (PREFECT_LOCAL_STORAGE_PATH = the output folder's .cache/results,
    set before Prefect is imported; here Prefect is imported already, so set as a setting)."""
    from prefect.settings import temporary_settings

    with temporary_settings(updates={"results.local_storage_path": out / ".cache" / "results"}):  # type: ignore[dict-item]
        return main(args)


def drop(results: Path, item_id: str) -> None:
    """Remove one saved item from results.jsonl, as a user editing the file would."""
    lines = [line for line in results.read_text().splitlines() if json.loads(line)["item_id"] != item_id]
    results.write_text("".join(line + "\n" for line in lines))


def saved(results: Path) -> dict[str, dict]:
    return {batch["item_id"]: batch for batch in read_results(results)}


def test_a_copied_then_moved_output_folder_resumes_and_retries_from_its_cache(tmp_path: Path) -> None:
    original = tmp_path / "A"
    args = 'behaviour = "arithmetic", use_tools = false, call_log = "calls.log"'
    path = make_benchmark(original, n=N, model_args=args, run=f"runs_per_data = {RUNS}")
    before = mock_calls.chat_calls("m")
    assert ape_here(["run", str(path), "--no-server"], original / "out") == 0
    assert mock_calls.chat_calls("m") - before == N * RUNS
    assert any((original / "out" / ".cache" / "results").iterdir())  # the generations are in the folder

    # cp -r: the copy resumes from its own cache (the original's can be gone)
    copy = tmp_path / "copied"
    shutil.copytree(original, copy, symlinks=True)
    shutil.rmtree(original / "out" / ".cache")
    drop(copy / "out" / "results.jsonl", "i2")
    calls = mock_calls.chat_calls("m")
    assert ape_here(["run", str(copy / "config.toml"), "--no-server"], copy / "out") == 0
    assert mock_calls.chat_calls("m") == calls  # no model call: i2's sessions came from the copy's cache
    items = saved(copy / "out" / "results.jsonl")
    assert len(items) == N
    assert [s["outcome"] for s in items["i2"]["sessions"]] == ["SOLVED"] * RUNS
    assert all(s["cached"] for s in items["i2"]["sessions"])

    # mv, and the original benchmark gone: `ape retry` in a new process finds the moved config
    moved = tmp_path / "moved"
    os.rename(copy, moved)
    shutil.rmtree(original)
    drop(moved / "out" / "results.jsonl", "i4")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_LOCAL_STORAGE_PATH"}
    log_before = (moved / "calls.log").read_text().count("\n")
    done = subprocess.run(
        [sys.executable, "-m", "ape", "retry", str(moved / "out"), "--no-server"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (moved / "calls.log").read_text().count("\n") == log_before  # no model call in that process
    items = saved(moved / "out" / "results.jsonl")
    assert len(items) == N and all(s["cached"] for s in items["i4"]["sessions"])
    assert [s["outcome"] for s in items["i4"]["sessions"]] == ["SOLVED"] * RUNS
    meta = json.loads((moved / "out" / "metadata.json").read_text())
    assert meta["config_file"] == str((moved / "config.toml").resolve())
    assert meta["config_file_from_output"] == os.path.join("..", "config.toml")
