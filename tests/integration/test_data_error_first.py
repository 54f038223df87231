"""A broken data file in a benchmark that already has results: the data file's own error comes
first, in ``ape run`` and ``ape validate``, exit 2, and the saved results stay as they were.

Before, a line cut off (invalid JSON) or a duplicate id changed the file's digest, and both
commands answered "[run] output: ... holds results made with a different data file; resuming
would mix them ... (give this run a new output folder (--output), or pass --no-load-save to
start afresh ...)": advice to throw the results away for a file that only needed mending. The
real error showed only after following it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.cli import run_ape
from tests.helpers.paths import REPO_ROOT

MODELS = ("mock-careful", "mock-sloppy")
SAVED = ("results.jsonl", "metadata.json")


def ape(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_ape(*args, cwd=cwd, unset=("PREFECT_API_URL",))


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The arithmetic example (its mock models), run once: its output folder holds results."""
    folder = tmp_path_factory.mktemp("finished") / "arithmetic"
    shutil.copytree(REPO_ROOT / "examples" / "arithmetic", folder, ignore=shutil.ignore_patterns("output"))
    config = folder / "config.toml"
    config.write_text(config.read_text().replace("runs_per_data = 3", "runs_per_data = 1"))  # a shorter run
    done = ape("run", "config.toml", "--no-server", "--no-progress", cwd=folder)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for model in MODELS:
        assert (folder / "output" / model / "results.jsonl").stat().st_size > 0
    return folder


@pytest.fixture
def bench(finished: Path, tmp_path: Path) -> Path:
    """A copy of the finished benchmark, with its results; its unchanged data validates."""
    folder = tmp_path / "arithmetic"
    shutil.copytree(finished, folder)
    done = ape("validate", "config.toml", cwd=folder)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]  # the results fit the data
    return folder


def cut_line_7(data: Path) -> str:
    lines = data.read_text().splitlines()
    lines[6] = lines[6][:30]  # '{"id": "q007", "question": "Wh'
    data.write_text("\n".join(lines) + "\n")
    return "data.jsonl:7: invalid JSON: Unterminated string"


def duplicate_id(data: Path) -> str:
    lines = data.read_text().splitlines()
    lines[4] = lines[4].replace('"q005"', '"q004"')
    data.write_text("\n".join(lines) + "\n")
    return "data.jsonl:5: duplicate id 'q004'"


def wrong_field(data: Path) -> str:
    lines = data.read_text().splitlines()
    lines[2] = lines[2].replace('"answer": 84', '"answer": "eighty-four"')
    data.write_text("\n".join(lines) + "\n")
    return "data.jsonl:3: item 'q003': field 'answer'"


def saved(folder: Path) -> dict[str, bytes]:
    return {f"{m}/{name}": (folder / "output" / m / name).read_bytes() for m in MODELS for name in SAVED}


@pytest.mark.parametrize(
    "damage", [cut_line_7, duplicate_id, wrong_field], ids=["cut-line", "duplicate-id", "schema-error"]
)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_the_data_error_comes_before_the_different_data_file_refusal(bench: Path, command: str, damage) -> None:
    expected = damage(bench / "data.jsonl")
    before = saved(bench)
    args = ["run", "config.toml", "--no-server", "--no-progress"] if command == "run" else ["validate", "config.toml"]
    done = ape(*args, cwd=bench)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-3000:]
    assert expected in said
    assert "different data file" not in said and "--no-load-save" not in said
    assert "Traceback" not in said
    assert saved(bench) == before  # the results are neither redone nor set aside as .bak
    assert not list((bench / "output").rglob("*.bak"))
