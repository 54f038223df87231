"""Owner-only outputs, end to end: `ape run` as users start it (the usual umask 022), then
every folder and file the run left is checked, and, where the tests run as root, another
local user tries to read the results."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.runner import make_benchmark

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")]

OTHER_USER = "ape-outputs-probe"

# what the run below writes, wherever in the output folder (each must be found and checked)
EXPECTED = {
    "results.jsonl",
    "metadata.json",
    "sessions.jsonl",
    "sessions.log",
    "run.log",
    "report.json",
    "leaderboard.md",
    "leaderboard.parquet",
    "sessions.parquet",
    "summary.png",
    "stage_chains.json",
    ".ape.lock",
}


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder every local user can enter (pytest's own tmp_path is 0700, which would make
    another user's failed read prove nothing)."""
    folder = Path(tempfile.mkdtemp(prefix="ape-modes-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def ape(*args: str, api: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PREFECT_API_URL=api, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "ape", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: os.umask(0o022),  # the usual umask: APE alone must make it private
    )


def walk(top: Path) -> tuple[dict[Path, int], dict[Path, int]]:
    """(folders, files) under ``top`` with their modes; links are not followed."""
    folders = {top: stat.S_IMODE(top.lstat().st_mode)}
    files: dict[Path, int] = {}
    for root, dirs, names in os.walk(top):
        for name in dirs:
            path = Path(root) / name
            if not path.is_symlink():
                folders[path] = stat.S_IMODE(path.lstat().st_mode)
        for name in names:
            path = Path(root) / name
            if not path.is_symlink():
                files[path] = stat.S_IMODE(path.lstat().st_mode)
    return folders, files


def other_user() -> str | None:
    """A second local user (made once), or None where the tests cannot make one."""
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return None
    if subprocess.run(["id", OTHER_USER], capture_output=True).returncode != 0:
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0 and "already exists" not in made.stderr:
            return None
    return OTHER_USER


def read_as(user: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", "cat", str(path)], capture_output=True, text=True, timeout=60)


def test_a_run_leaves_nothing_another_user_can_read(open_tmp, prefect_server):
    config = make_benchmark(open_tmp, n=4)
    out = open_tmp / "out"
    done = ape("run", str(config), "--no-server", "--new-run", api=prefect_server)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    shown = ape("history", str(out), api=prefect_server)  # writes OUTPUT/trend.png
    assert shown.returncode == 0, shown.stderr[-2000:]
    rebuilt = ape("report", str(out / "latest"), api=prefect_server)  # rewrites the run's report
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]

    folders, files = walk(out)
    names = {path.name for path in files}
    assert EXPECTED <= names, EXPECTED - names
    assert "trend.png" in names and "runs.parquet" in names  # the history and its chart
    assert any(".cache" in path.parts for path in files), "no cache written: nothing to check there"
    assert any("items" in path.parts and "history" in path.parts for path in files)
    wide = {str(p.relative_to(out)): oct(m) for p, m in folders.items() if m != 0o700}
    assert not wide, f"folders not 0700: {wide}"
    wide = {str(p.relative_to(out)): oct(m) for p, m in files.items() if m & 0o077}
    assert not wide, f"files others or the group can read: {wide}"
    assert "narrowed" not in done.stderr  # a new folder: nothing to warn about

    user = other_user()
    if user is None:
        pytest.skip("not root: the read as another local user is left out (the modes above were checked)")
    control = open_tmp / "control.txt"
    control.write_text("readable\n")
    control.chmod(0o644)
    assert read_as(user, control).stdout == "readable\n", "the other user cannot read even an open file here"
    for target in (out / "latest" / "results.jsonl", out / "history" / "runs.parquet"):
        attempt = read_as(user, target)
        assert attempt.returncode != 0 and "Permission denied" in attempt.stderr, (target, attempt)


def test_share_with_group_and_an_open_folder_from_an_earlier_run(open_tmp, prefect_server):
    config = make_benchmark(open_tmp, n=3, run="share_with_group = true")
    out = open_tmp / "out"
    out.mkdir()
    out.chmod(0o755)  # as APE left it before owner-only outputs, under the usual umask
    earlier = out / "notes.txt"
    earlier.write_text("an earlier run's file\n")
    earlier.chmod(0o644)
    user = other_user()
    if user is not None:  # what main left: readable by every local user
        assert read_as(user, earlier).returncode == 0

    done = ape("run", str(config), "--no-server", api=prefect_server)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if "output folder" in line and "narrowed" in line]
    assert len(lines) == 1, done.stderr[-3000:]
    assert str(out.resolve()) in lines[0] and "0755" in lines[0] and "0750" in lines[0]

    folders, files = walk(out)
    assert {path.name for path in files} >= {"results.jsonl", "sessions.jsonl", "report.json", "summary.png"}
    assert all(mode == 0o750 for mode in folders.values()), {str(p): oct(m) for p, m in folders.items()}
    new = {path: mode for path, mode in files.items() if path != earlier}
    assert all(mode == 0o640 for mode in new.values()), {str(p): oct(m) for p, m in new.items()}
    assert stat.S_IMODE(earlier.stat().st_mode) == 0o644  # left as it was, but out of reach now

    again = ape("run", str(config), "--no-server", api=prefect_server)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "narrowed" not in again.stderr  # one warning, the first time only

    if user is None:
        pytest.skip("not root: the read as another local user is left out (the modes above were checked)")
    for target in (earlier, out / "results.jsonl"):
        attempt = read_as(user, target)
        assert attempt.returncode != 0 and "Permission denied" in attempt.stderr, (target, attempt)
