"""A copied output folder whose cache files were replaced by pickles that run code resumes
without running them: the records are refused (never unpickled), the sessions redone, the
refusal counted and warned once.

Before :mod:`ape.tasks.storage.cache_format`, a record naming ``pickle`` or ``cloudpickle``
was deserialized through Prefect's result store: the planted ``__reduce__`` ran once per
session, and the run still ended exit 0 with every item passed.
"""

from __future__ import annotations

import base64
import json
import pickle
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.cli import run_ape
from tests.helpers.runner import make_benchmark, read_results

pytestmark = pytest.mark.usefixtures("prefect_server")

N, RUNS = 4, 2
KEY = re.compile(r"^[0-9a-f]{32,64}$")


class Planted:
    """Unpickling this writes the marker file: what an attacker's cache file would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'a').write('ran\\n')",))


def ape(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_ape(*args, cwd=cwd, unset=("PREFECT_LOCAL_STORAGE_PATH",))


def plant(out: Path, marker: Path, how: str) -> int:
    """Replace every cache record of ``out`` with a pickle that writes ``marker``; how many."""
    records = [path for path in (out / ".cache").iterdir() if path.is_file() and KEY.match(path.name)]
    blob = base64.encodebytes(pickle.dumps(Planted(marker)))
    for record in records:
        meta = json.loads(record.read_bytes())
        result = out / ".cache" / "results" / record.name
        if how == "result file only":  # the record as APE wrote it, its result file a pickle
            result.write_bytes(blob)
            continue
        picklelib = "cloudpickle" if how == "cloudpickle" else "pickle"
        meta["serializer"] = {"type": "pickle", "picklelib": picklelib, "picklelib_version": None}
        meta["storage_key"] = str(result)
        record.write_text(json.dumps(meta))
        result.write_bytes(blob)
    return len(records)


@pytest.mark.parametrize(
    ("how", "granularity"),
    # "stage": Prefect's task engine looks the cache up itself (through ape.tasks.storage.prefect_internals.CacheRecords)
    [("pickle", "session"), ("cloudpickle", "session"), ("result file only", "session"), ("cloudpickle", "stage")],
)
def test_planted_pickle_cache_files_never_run_and_their_items_are_redone(
    tmp_path: Path, how: str, granularity: str
) -> None:
    original = tmp_path / "A"
    calls = original / "calls.log"
    run = f'runs_per_data = {RUNS}\ntask_granularity = "{granularity}"'
    config = make_benchmark(original, n=N, model_args=f'behaviour = "arithmetic", call_log = "{calls.name}"', run=run)
    config.write_text(config.read_text().replace(f'call_log = "{calls.name}"', f'call_log = "{calls}"'))
    done = ape("run", str(config), "--no-server", cwd=original)
    assert done.returncode == 0, done.stderr[-3000:]
    assert calls.read_text().count("\n") == N * RUNS

    copy = tmp_path / "copied"
    shutil.copytree(original, copy)
    marker = tmp_path / "marker"
    planted = plant(copy / "out", marker, how)
    assert planted >= N * RUNS
    (copy / "out" / "results.jsonl").write_text("")  # every item to redo: each must read the cache
    before = calls.read_text().count("\n")

    done = ape("run", str(copy / "config.toml"), "--no-server", cwd=copy)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-3000:]
    assert not marker.exists(), "a planted pickle ran"
    assert calls.read_text().count("\n") - before == N * RUNS  # every session redone by the model
    items = read_results(copy / "out" / "results.jsonl")
    assert len(items) == N
    assert all(not s["cached"] and s["outcome"] == "SOLVED" for item in items for s in item["sessions"])
    assert said.count("cache: refused") == 1, said[-3000:]  # warned once, not once per session
    counted = re.search(r"(\d+) cache record\(s\) in .* refused", said)
    assert counted is not None and int(counted.group(1)) >= N * RUNS, said[-3000:]

    # the redone sessions wrote APE's JSON records over the planted ones: the next resume reads them
    (copy / "out" / "results.jsonl").write_text("")
    calls_before = calls.read_text().count("\n")
    done = ape("run", str(copy / "config.toml"), "--no-server", cwd=copy)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert calls.read_text().count("\n") == calls_before  # no model call
    assert all(s["cached"] for item in read_results(copy / "out" / "results.jsonl") for s in item["sessions"])
    assert "cache: refused" not in done.stdout + done.stderr
    assert not marker.exists()
