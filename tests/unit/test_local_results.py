"""The local result storage that resolves its folder once (ape.tasks.storage.local_results)."""

from __future__ import annotations

import os
import shutil
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


def test_the_folder_and_absolute_paths_in_it_resolve_as_prefect_resolves_them(tmp_path: Path) -> None:
    """Prefect's result store asks for the folder ("") and writes by the absolute path it made:
    both are answered from the folder resolved once, equal to Prefect's own answers."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    base = str(tmp_path / "link")
    fast, slow = ResolvedLocalFileSystem(basepath=base), LocalFileSystem(basepath=base)
    assert fast._resolve_path("") == slow._resolve_path("") == tmp_path / "real"
    inside = str(slow._resolve_path("96c0ab"))
    assert fast._resolve_path(inside) == slow._resolve_path(inside) == tmp_path / "real" / "96c0ab"


@pytest.mark.parametrize("suffix", ["/../escape", "x/../../escape", "/sub/key"])
def test_absolute_paths_not_directly_in_the_folder_keep_prefects_checks(tmp_path: Path, suffix: str) -> None:
    fast = ResolvedLocalFileSystem(basepath=str(tmp_path))
    path = str(tmp_path.resolve()) + ("/" if not suffix.startswith("/") else "") + suffix.lstrip("/")
    expected = LocalFileSystem(basepath=str(tmp_path))
    try:
        want = expected._resolve_path(path)
    except ValueError:
        with pytest.raises(ValueError, match="outside of the base path"):
            fast._resolve_path(path)
    else:
        assert fast._resolve_path(path) == want


def test_a_cache_write_through_the_result_store_resolves_nothing_again(tmp_path: Path, monkeypatch) -> None:
    """The session cache's write path (Prefect's ResultStore with this storage) makes no
    ``Path.resolve`` call per record: the folder was resolved once."""
    from prefect.results import ResultStore

    store = ResultStore(result_storage=resolved_once(LocalFileSystem(basepath=str(tmp_path))))
    store.write({"a": 1}, key="first")  # resolves the folder once (cached)
    calls = []
    real = Path.resolve
    monkeypatch.setattr(Path, "resolve", lambda self, *a, **k: calls.append(self) or real(self, *a, **k))
    store.write({"a": 2}, key="second")
    assert calls == []
    assert (tmp_path / "second").exists()


def test_a_write_makes_its_folder_again_when_it_was_removed(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    fast = ResolvedLocalFileSystem(basepath=str(folder))
    fast.write_path("first", content=b"1", _sync=True)
    shutil.rmtree(folder)  # e.g. the user cleaned the cache while a run went on
    written = fast.write_path("second", content=b"2", _sync=True)
    assert Path(written) == folder.resolve() / "second"
    assert (folder / "second").read_bytes() == b"2"


def test_a_write_replaces_an_older_file_whole(tmp_path: Path) -> None:
    fast = ResolvedLocalFileSystem(basepath=str(tmp_path))
    fast.write_path("key", content=b"a much longer older record", _sync=True)
    fast.write_path("key", content=b"new", _sync=True)
    assert (tmp_path / "key").read_bytes() == b"new"


@pytest.mark.parametrize("kind", ["folder", "pipe", "link"])
def test_a_write_refuses_a_path_that_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    """As Prefect's own write refuses one; a pipe nobody reads does not block the solver, and a
    link planted at a key does not redirect the write to the file it points at."""
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    folder = tmp_path / "cache"
    folder.mkdir()
    target = folder / "key"
    if kind == "folder":
        target.mkdir()
    elif kind == "pipe":
        os.mkfifo(target)
    else:
        target.symlink_to(outside)
    with pytest.raises(ValueError, match="already exists and is not a file"):
        ResolvedLocalFileSystem(basepath=str(folder)).write_path("key", content=b"x", _sync=True)
    assert outside.read_text() == "keep me"
