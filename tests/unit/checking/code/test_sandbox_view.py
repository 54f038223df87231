"""What model-written code can see and fill, in every namespace sandbox this machine has.

A candidate that goes looking for the user's secrets (a key in the home folder, APE_HOME's
server password, the output folder's results, the config folder's ``.env``, ``/etc/shadow``)
finds none of them; the folders it can list are exactly the system's, the interpreter's
and its own; ``/dev`` takes no files and ``/dev/shm`` and ``/tmp`` stop at their caps.
The secrets live outside ``/tmp`` (in the real home folder), where a sandbox that binds
the whole root read-only would show them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from ape.tasks.checking.code import sandbox as sandboxes
from ape.tasks.checking.code.code_exec import run_code
from tests.helpers.sandbox_kinds import KINDS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces need Linux")


SECRET = "ape-sandbox-secret-" + uuid.uuid4().hex
PROBE_TESTS = "assert True\n"


def candidate_output(kind: str, code: str, timeout_s: float = 20.0) -> dict:
    """Run ``code`` (which prints one JSON line) in a ``kind`` sandbox; what it printed."""
    result = run_code(code, PROBE_TESTS, timeout_s=timeout_s, memory_mb=256, sandbox=kind)
    assert result.sandbox == kind and result.score == 1.0, result
    assert SECRET not in result.model_dump_json()
    return json.loads(result.stdout_tail.strip().splitlines()[-1])


@pytest.fixture
def secrets_at_home():
    """Secret files where a user keeps them: the home folder, APE_HOME, an output and a config folder."""
    home = Path.home()
    top = home / f".ape-sandbox-test-{uuid.uuid4().hex[:12]}"
    places = {
        "home": home / f"{top.name}-id_rsa",
        "ape_home": top / "ape-home" / "server" / "auth",
        "output": top / "output" / "results.jsonl",
        "config": top / "config" / ".env",
    }
    for path in places.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SECRET + "\n")
    yield {name: str(path) for name, path in places.items()}
    places["home"].unlink(missing_ok=True)
    shutil.rmtree(top, ignore_errors=True)


READ_EVERYTHING = """
import json, os
outcome = {{}}
for name, path in {paths!r}.items():
    try:
        with open(path) as handle:
            outcome[name] = "read: " + handle.read(80)
    except OSError as exc:
        outcome[name] = type(exc).__name__
    try:
        outcome[name + " listed"] = os.path.basename(path) in os.listdir(os.path.dirname(path))
    except OSError as exc:
        outcome[name + " listed"] = type(exc).__name__
print(json.dumps(outcome))
"""


@pytest.mark.parametrize("kind", KINDS)
def test_the_users_secrets_are_not_found(kind, secrets_at_home):
    paths = dict(secrets_at_home)
    if os.path.exists("/etc/shadow"):
        paths["shadow"] = "/etc/shadow"
    seen = candidate_output(kind, READ_EVERYTHING.format(paths=paths))
    for name in paths:
        assert seen[name] in ("FileNotFoundError", "PermissionError"), (name, seen[name])
        assert seen[name + " listed"] in ("FileNotFoundError", "PermissionError", False), (name, seen)


def expected_view() -> dict[str, list[str]]:
    """Every folder a candidate may list outside the system's and the interpreter's, and what it holds.

    Worked out from this machine, not from the sandbox's settings: the system folders that
    exist here, the two files of /etc the loader and ``time`` read, and the path down to
    each of this Python's prefixes (nothing else of their parents).
    """
    top = {"dev", "etc", "proc", "tmp"}
    top |= {name for name in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32") if os.path.lexists("/" + name)}
    view: dict[str, list[str]] = {
        "/etc": sorted(n for n in ("ld.so.cache", "localtime") if os.path.exists("/etc/" + n))
    }
    roots = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}
    roots |= {os.path.realpath(p) for p in roots if os.path.exists(p)}
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(sys.executable))}
    prefixes |= {os.path.normpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(sys.executable))}
    inside = lambda path, folders: any(path == f or path.startswith(f + "/") for f in folders)  # noqa: E731
    prefixes = {p for p in prefixes if not inside(p, roots) and not inside(p, prefixes - {p})}
    for prefix in prefixes:
        parts = Path(prefix).parts[1:]
        top.add(parts[0])
        for depth in range(1, len(parts)):
            folder = "/" + "/".join(parts[:depth])
            if folder != "/tmp":  # the private /tmp is the candidate's own
                view.setdefault(folder, [])
                view[folder] = sorted({*view[folder], parts[depth]})
    view["/"] = sorted(top)
    return view


LIST_THE_WORLD = """
import json, os
view = {{}}
for folder in {folders!r}:
    try:
        view[folder] = sorted(os.listdir(folder))
    except OSError as exc:
        view[folder] = type(exc).__name__
view["/dev"] = sorted(os.listdir("/dev"))
print(json.dumps(view))
"""
DEVICES = {
    "core",
    "fd",
    "full",
    "null",
    "ptmx",
    "pts",
    "random",
    "shm",
    "stderr",
    "stdin",
    "stdout",
    "tty",
    "urandom",
    "zero",
}


@pytest.mark.parametrize("kind", KINDS)
def test_the_folders_a_candidate_can_list_are_exactly_the_allowed_ones(kind):
    expected = expected_view()
    seen = candidate_output(kind, LIST_THE_WORLD.format(folders=sorted(expected)))
    assert seen.pop("/") == expected.pop("/")
    assert set(seen.pop("/dev")) <= DEVICES
    assert seen == expected


FILL = """
import json, os
block = b"x" * (1 << 20)
written = {{}}
for folder, most in (("/dev/shm", 40), ("/tmp", 100)):
    written[folder] = 0
    for n in range(most):
        try:
            with open("%s/fill-%d" % (folder, n), "wb") as handle:
                handle.write(block)
            written[folder] += 1
        except OSError as exc:
            written[folder + " error"] = type(exc).__name__
            break
    for n in range(written[folder] + 1):
        try:
            os.unlink("%s/fill-%d" % (folder, n))
        except OSError:
            pass
try:
    with open("/dev/ape-fill", "wb") as handle:
        handle.write(block)
    written["/dev"] = "written"
except OSError as exc:
    written["/dev"] = type(exc).__name__
print(json.dumps(written))
"""


@pytest.mark.parametrize("kind", KINDS)
def test_dev_takes_no_files_and_dev_shm_and_tmp_stop_at_their_caps(kind):
    written = candidate_output(kind, FILL.format(), timeout_s=30.0)
    mib = 1 << 20
    assert written["/dev"] == "OSError"  # a read-only file system
    assert written["/dev/shm"] <= sandboxes.SHM_BYTES // mib and written["/dev/shm error"] == "OSError", written
    assert written["/tmp"] <= sandboxes.TMPFS_BYTES // mib and written["/tmp error"] == "OSError", written


def test_an_interpreter_installed_over_the_home_folder_is_named_in_a_warning(monkeypatch, caplog):
    """A Python whose prefix holds the home folder would show that folder: APE says so."""
    monkeypatch.setattr(sys, "prefix", os.path.realpath(Path.home()))
    with caplog.at_level("WARNING", logger="ape.sandbox"):
        folders = sandboxes.interpreter_folders.__wrapped__()
    assert os.path.realpath(Path.home()) in folders
    assert "sandboxed code can read the home folder" in caplog.text
