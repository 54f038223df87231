"""A hostile data file (a line nested 5,000 deep, a line of many megabytes) stops ``ape validate``
and ``ape run`` with one line naming the file and line, exit 2, before any model call.

Before the bounds of ``[data] max_depth`` and ``max_line_bytes`` the deep line ended both
commands with a bare ``RecursionError`` (exit 1, no file or line), and a 200 MB line validated.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.cli import run_ape
from tests.helpers.runner import make_benchmark


def ape(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_ape(*args, cwd=cwd, unset=("PREFECT_API_URL",))


def _append(data: Path, line: str) -> int:
    """Add ``line`` to the data file; its line number."""
    with data.open("a") as handle:
        handle.write(line + "\n")
    return data.read_text().count("\n")


def _deep(depth: int) -> str:
    return (
        json.dumps({"id": "deep", "question": "1 + 1", "answer": 2})[:-1]
        + ', "extra": '
        + "[" * depth
        + "]" * depth
        + "}"
    )


def _long(size: int) -> str:
    return json.dumps({"id": "long", "question": "1 + 1 " + "x" * size, "answer": 2})


@pytest.mark.parametrize("hostile", ["deep", "long"])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_hostile_data_line_is_exit_2_with_file_and_line(tmp_path: Path, hostile: str, command: str) -> None:
    calls = tmp_path / "calls.log"
    config = make_benchmark(tmp_path, n=3, model_args=f'behaviour = "arithmetic", call_log = "{calls}"')
    data = tmp_path / "data.jsonl"
    number = _append(data, _deep(5000) if hostile == "deep" else _long(5 * 1024 * 1024))
    args = ["run", str(config), "--no-server"] if command == "run" else ["validate", str(config)]
    done = ape(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    said = done.stdout + done.stderr
    assert f"data.jsonl:{number}" in said
    assert ("nested deeper than 100 levels" if hostile == "deep" else "longer than 4,194,304 bytes") in said
    assert "Traceback" not in said and "RecursionError" not in said
    assert not calls.exists()  # no model call
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_the_data_bounds_can_be_raised(tmp_path: Path) -> None:
    """A benchmark whose items are that long or deep says so in [data] and validates."""
    config = make_benchmark(tmp_path, n=2)
    text = config.read_text().replace(
        'category_field = "category"', 'category_field = "category"\nmax_depth = 150\nmax_line_bytes = 6291456'
    )
    config.write_text(text)
    _append(tmp_path / "data.jsonl", _deep(120))
    _append(tmp_path / "data.jsonl", _long(5 * 1024 * 1024))
    done = ape("validate", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
