"""Owner-only outputs: the umask a run sets and puts back, the output folder it creates or
narrows (one warning), and APE's writers that choose a mode themselves."""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

import pytest

from ape.tasks.storage.file_modes import (
    OutputModes,
    current_umask,
    following,
    modes_of,
    private_outputs,
)
from ape.tasks.storage.history import BASELINE_FILE
from ape.tasks.storage.save import atomic_copy, atomic_write_text

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


@pytest.fixture(autouse=True)
def usual_umask():
    """Every test starts from the usual umask and must leave it as it found it."""
    before = os.umask(0o022)
    yield
    assert current_umask() == 0o022, "a run left its umask behind"
    os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_two_settings():
    assert (OutputModes().folder_mode, OutputModes().file_mode) == (0o700, 0o600)
    shared = OutputModes(share_with_group=True)
    assert (shared.folder_mode, shared.file_mode) == (0o750, 0o640)


def test_everything_a_run_writes_is_owner_only_and_the_umask_is_put_back(tmp_path):
    out = tmp_path / "a" / "out"
    with private_outputs(out, OutputModes()):
        assert current_umask() == 0o077
        (out / "sub").mkdir()
        (out / "sub" / "plain.txt").write_text("x")
        atomic_write_text(out / "atomic.json", "{}")
        fd = os.open(out / "lock", os.O_RDWR | os.O_CREAT, 0o644)  # as OutputLock opens its file
        os.close(fd)
    assert mode(out) == 0o700 and mode(out.parent) == 0o700
    assert mode(out / "sub") == 0o700
    for name in ("sub/plain.txt", "atomic.json", "lock"):
        assert mode(out / name) == 0o600, name


def test_share_with_group_lets_the_group_read_and_others_nothing(tmp_path):
    out = tmp_path / "out"
    with private_outputs(out, OutputModes(share_with_group=True)):
        (out / "f").write_text("x")
        atomic_write_text(out / "g", "x")
    assert (mode(out), mode(out / "f"), mode(out / "g")) == (0o750, 0o640, 0o640)


def test_an_open_output_folder_is_narrowed_with_one_warning(tmp_path, caplog):
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o755)
    (out / "results.jsonl").write_text("{}\n")  # an earlier run's file: left as it is
    with caplog.at_level(logging.WARNING, logger="ape"):
        with private_outputs(out, OutputModes()):
            with private_outputs(out, OutputModes()):  # the flow inside `ape run`: prepared once
                pass
        with private_outputs(out, OutputModes()):  # the next run: nothing to say
            pass
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1, lines
    assert "0755" in lines[0] and "narrowed it to 0700" in lines[0] and str(out) in lines[0]
    assert mode(out) == 0o700
    assert mode(out / "results.jsonl") == 0o644


def test_owner_only_narrows_a_group_folder_and_shared_narrows_only_others(tmp_path, caplog):
    group = tmp_path / "group"
    group.mkdir(mode=0o750)
    group.chmod(0o750)
    world = tmp_path / "world"
    world.mkdir()
    world.chmod(0o775)
    with caplog.at_level(logging.WARNING, logger="ape"):
        with private_outputs(group, OutputModes()):
            pass
        with private_outputs(world, OutputModes(share_with_group=True)):
            pass
    assert mode(group) == 0o700 and mode(world) == 0o750  # group write is beyond 0750 too
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 2 and "the group could read it" in lines[0] and "others could read it" in lines[1]


def test_share_with_group_opens_a_private_folder_to_the_group(tmp_path):
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    with private_outputs(out, OutputModes(share_with_group=True)):
        pass
    assert mode(out) == 0o750


def test_a_folder_that_cannot_be_narrowed_is_named_in_one_warning(tmp_path, caplog, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o755)

    def refuse(self, *args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(Path, "chmod", refuse)
    with caplog.at_level(logging.WARNING, logger="ape"):
        with private_outputs(out, OutputModes()):
            (out / "new").write_text("x")
    monkeypatch.undo()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1 and "could not be narrowed" in lines[0] and "Operation not permitted" in lines[0]
    assert mode(out / "new") == 0o600  # what this run writes is private all the same


def test_a_copy_takes_the_runs_mode_not_its_sources(tmp_path):
    old = tmp_path / "results.jsonl"
    old.write_text("{}\n")
    old.chmod(0o644)
    with private_outputs(tmp_path / "out", OutputModes()):
        atomic_copy(old, tmp_path / "out" / "results.jsonl.bak")
    assert mode(tmp_path / "out" / "results.jsonl.bak") == 0o600
    assert BASELINE_FILE  # the history's baseline copy goes the same way (history.rebuild)


def test_commands_without_a_config_follow_the_folder(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o750)
    opened = tmp_path / "opened"
    opened.mkdir()
    opened.chmod(0o755)
    assert modes_of(shared).share_with_group
    assert not modes_of(opened).share_with_group  # others may enter: not what the setting makes
    assert not modes_of(tmp_path / "missing").share_with_group
    with following(shared):
        assert current_umask() == 0o027
    with following(tmp_path / "missing"):
        assert current_umask() == 0o077
    assert not (tmp_path / "missing").exists()  # a mistyped folder is not created
    assert mode(opened) == 0o755  # nor is a folder narrowed by a command that only reads a config-less folder


def test_two_runs_at_once_get_the_narrower_setting_and_the_umask_comes_back(tmp_path):
    entered = threading.Event()
    leave = threading.Event()

    def shared_run():
        with private_outputs(tmp_path / "b", OutputModes(share_with_group=True)):
            entered.set()
            leave.wait(10)

    with private_outputs(tmp_path / "a", OutputModes()):
        worker = threading.Thread(target=shared_run)
        worker.start()
        assert entered.wait(10)
        assert current_umask() == 0o077  # the owner-only run is still going
    assert current_umask() == 0o027  # only the shared run is left
    leave.set()
    worker.join()


def test_a_folder_is_in_use_only_while_a_live_process_holds_its_lock(tmp_path: Path) -> None:
    """Another process takes the output lock and waits: the folder is in use; killed, it is not
    (the kernel drops a dead holder's lock), and asking takes nothing a run then needs."""
    import signal
    import subprocess
    import sys

    from ape.tasks.storage.outdir import OutputLock, in_use

    assert not in_use(tmp_path)  # no lock file
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom ape.tasks.storage.outdir import OutputLock\n"
            "OutputLock(sys.argv[1]).acquire()\nprint('held', flush=True)\nsys.stdin.read()\n",
            str(tmp_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert in_use(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert not in_use(tmp_path)
    with OutputLock(tmp_path):  # asking left nothing behind: a run takes the lock
        pass
