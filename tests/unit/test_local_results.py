"""The local result storage that resolves its folder once (ape.tasks.storage.local_results)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect.filesystems import LocalFileSystem

from ape.tasks.storage.local_results import ResolvedLocalFileSystem, plain_name, resolved_once


@pytest.mark.parametrize("name", ["96c0ab", "a.json", "x-y_z"])
def test_a_plain_name_resolves_as_prefect_resolves_it(tmp_path: Path, name: str) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")  # the folder through a symlink
    base = str(tmp_path / "link")
    assert ResolvedLocalFileSystem(basepath=base)._resolve_path(name) == LocalFileSystem(basepath=base)._resolve_path(
        name
    )
    assert str(ResolvedLocalFileSystem(basepath=base)._resolve_path(name)).startswith(str(tmp_path / "real"))


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "..", "~/x", "sub/../../x"])
def test_other_paths_keep_prefects_checks(tmp_path: Path, path: str) -> None:
    assert not plain_name(path)
    with pytest.raises(ValueError, match="outside of the base path"):
        ResolvedLocalFileSystem(basepath=str(tmp_path))._resolve_path(path)


def test_files_written_through_it_read_back_through_prefects_own(tmp_path: Path) -> None:
    fast = ResolvedLocalFileSystem(basepath=str(tmp_path))
    fast.write_path("key1", b"payload")
    assert LocalFileSystem(basepath=str(tmp_path)).read_path("key1") == b"payload"
    assert fast.read_path("key1") == b"payload"


def test_only_prefects_plain_local_storage_is_replaced(tmp_path: Path) -> None:
    swapped = resolved_once(LocalFileSystem(basepath=str(tmp_path)))
    assert type(swapped) is ResolvedLocalFileSystem and swapped.basepath == str(tmp_path)

    class Custom(LocalFileSystem):
        _block_type_name = "custom local test"

    custom = Custom(basepath=str(tmp_path))
    assert resolved_once(custom) is custom
    assert resolved_once(None) is None
