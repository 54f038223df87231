"""Seeding a working folder from an item's archive (issue 49): a good tar or zip is unpacked;
a hostile one (a path out of the folder, a link out of it, a device, a bomb) is refused as a
whole, nothing is written outside the folder, and the session's sandbox is not made."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from ape.schemas.config import SandboxConfig
from ape.tasks.agent.archive import MAX_MEMBERS
from ape.tasks.agent.sandbox import AgentSandbox, SandboxError
from tests.helpers.sandbox_kinds import available

MIB = 1024 * 1024


class Task(BaseModel):
    id: str


def add(tar: tarfile.TarFile, name: str, data: bytes = b"x", **fields: Any) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data) if fields.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
    for key, value in fields.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if info.size else None)


def make_tar(path: Path, members: list[tuple[str, bytes, dict[str, Any]]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for name, data, fields in members:
            add(tar, name, data, **fields)
    return path


def sandbox_for(archives: Path, item_id: str = "t1", **changes: Any) -> AgentSandbox:
    settings: dict[str, Any] = {"archive_dir": archives, "isolation": "none", **changes}
    return AgentSandbox(SandboxConfig(**settings), Task(id=item_id), item_id)


def test_a_tar_and_a_zip_seed_the_folder(tmp_path: Path) -> None:
    make_tar(
        tmp_path / "t1.tar.gz",
        [
            ("pkg/__init__.py", b"", {}),
            ("pkg/core.py", b"def f():\n    return 1\n", {}),
            ("run.sh", b"#!/bin/sh\necho hi\n", {"mode": 0o755}),
            ("alias.py", b"", {"type": tarfile.SYMTYPE, "linkname": "pkg/core.py"}),  # a link inside is fine
        ],
    )
    with sandbox_for(tmp_path) as sandbox:
        assert (sandbox.folder / "pkg" / "core.py").read_text().startswith("def f")
        assert (sandbox.folder / "run.sh").stat().st_mode & stat.S_IXUSR
        assert (sandbox.folder / "alias.py").is_symlink()
    with zipfile.ZipFile(tmp_path / "t2.zip", "w") as archive:
        archive.writestr("data/numbers.txt", "1\n2\n")
        archive.writestr(zipfile.ZipInfo("empty/"), "")
    with sandbox_for(tmp_path, "t2") as sandbox:
        assert (sandbox.folder / "data" / "numbers.txt").read_text() == "1\n2\n"
        assert (sandbox.folder / "empty").is_dir()


HOSTILE_TARS = {
    "dot-dot": [("../escaped.txt", b"pwned", {})],
    "absolute": [("/tmp/ape-absolute-escape.txt", b"pwned", {})],
    "link out, then through it": [
        ("out", b"", {"type": tarfile.SYMTYPE, "linkname": "/tmp"}),
        ("out/ape-through-link.txt", b"pwned", {}),
    ],
    "relative link out": [("up", b"", {"type": tarfile.SYMTYPE, "linkname": "../../.."})],
    "hard link out": [("passwd", b"", {"type": tarfile.LNKTYPE, "linkname": "/etc/passwd"})],
    "device": [("null", b"", {"type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3})],
    "fifo": [("pipe", b"", {"type": tarfile.FIFOTYPE})],
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TARS))
def test_a_hostile_tar_is_refused_and_writes_nothing_outside(tmp_path: Path, case: str) -> None:
    archives = tmp_path / "archives"
    archives.mkdir()
    make_tar(archives / "t1.tar", HOSTILE_TARS[case], mode="w")
    root = tmp_path / "root"
    with pytest.raises(SandboxError, match=r"archive_dir: t1\.tar"):
        sandbox_for(archives, root=root)
    assert not (tmp_path / "escaped.txt").exists() and not (root / "escaped.txt").exists()
    assert not Path("/tmp/ape-absolute-escape.txt").exists() and not Path("/tmp/ape-through-link.txt").exists()
    assert [p.name for p in root.iterdir()] == []  # the half-made folder is gone


def test_a_tar_bomb_is_refused_before_it_is_written(tmp_path: Path) -> None:
    make_tar(tmp_path / "t1.tar.gz", [("zeros.bin", bytes(3 * MIB), {})])  # a few KiB compressed
    assert (tmp_path / "t1.tar.gz").stat().st_size < 64 * 1024
    with pytest.raises(SandboxError, match="over \\[sandbox\\] file_bytes"):
        sandbox_for(tmp_path, file_bytes=MIB)
    make_tar(tmp_path / "t2.tar.gz", [(f"part{i}.bin", bytes(MIB // 2), {}) for i in range(6)])
    with pytest.raises(SandboxError, match="archive_bytes"):
        sandbox_for(tmp_path, "t2", file_bytes=MIB, archive_bytes=2 * MIB)
    make_tar(tmp_path / "t3.tar.gz", [(f"f{i}", b"", {}) for i in range(MAX_MEMBERS + 1)])
    with pytest.raises(SandboxError, match="members"):
        sandbox_for(tmp_path, "t3")


def test_a_hostile_zip_is_refused(tmp_path: Path) -> None:
    cases: dict[str, Any] = {
        "z1": lambda z: z.writestr("../escaped.txt", "pwned"),
        "z2": lambda z: z.writestr("/abs.txt", "pwned"),
        "z3": lambda z: z.writestr("c:/windows.txt", "pwned"),
    }
    link = zipfile.ZipInfo("link")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    cases["z4"] = lambda z: z.writestr(link, "/etc/passwd")
    cases["z5"] = lambda z: z.writestr("zeros.bin", bytes(3 * MIB), compress_type=zipfile.ZIP_DEFLATED)
    for name, write in cases.items():
        with zipfile.ZipFile(tmp_path / f"{name}.zip", "w") as archive:
            write(archive)
        with pytest.raises(SandboxError, match=rf"{name}\.zip"):
            sandbox_for(tmp_path, name, file_bytes=MIB)
    assert not (tmp_path / "escaped.txt").exists()


def test_two_archives_for_one_item_or_a_broken_one_are_named(tmp_path: Path) -> None:
    make_tar(tmp_path / "t1.tar", [("a", b"1", {})], mode="w")
    make_tar(tmp_path / "t1.tgz", [("a", b"2", {})])
    with pytest.raises(SandboxError, match="2 archives"):
        sandbox_for(tmp_path)
    (tmp_path / "t2.zip").write_bytes(b"PK not really a zip")
    with pytest.raises(SandboxError, match="cannot unpack t2.zip"):
        sandbox_for(tmp_path, "t2")
    with sandbox_for(tmp_path, "t3") as sandbox:  # an item without an archive starts empty
        assert list(sandbox.folder.iterdir()) == []


@pytest.mark.skipif(not available("bwrap"), reason="needs bubblewrap")
def test_the_agent_works_on_what_the_archive_held(tmp_path: Path) -> None:
    make_tar(tmp_path / "t1.tar.gz", [("calc.py", b"print(6 * 7)\n", {})])
    with sandbox_for(tmp_path, isolation="bwrap") as sandbox:
        assert sandbox.python("exec(open('calc.py').read())").stdout.strip() == "42"
