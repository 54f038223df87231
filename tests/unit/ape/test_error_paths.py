"""Error lines name the config and the data file by one rule: relative to the current folder
when the file is under it, else absolute, whichever way the path was typed.

Before, the TOML loader's own errors named the config as typed (``bench/config.toml:5``), the
errors of plugins, template and fields named it absolute (``/home/me/bench/config.toml:3``),
and the data file was always absolute: one command could print both forms of one file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ape.cli import main
from tests.helpers.runner import make_benchmark


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _damages(bench: Path) -> dict[str, tuple[str, str]]:
    """Each kind of error: (file it names, the text the config or data gets)."""
    config = (bench / "config.toml").read_text()
    data = (bench / "data.jsonl").read_text()
    return {
        "toml syntax": ("config.toml:3:8: invalid TOML", config.replace('file = "data.jsonl"', 'file = "data.jsonl')),
        "unknown key (the loader)": (
            "config.toml:8 [prompt.templat]",
            config.replace("[prompt]\n", "[prompt]\ntemplat = 'x'\n"),
        ),
        "field (a located plugin error)": (
            "config.toml:5 [data] category_field",
            config.replace('category_field = "category"', 'category_field = "kind"'),
        ),
        "data line": ("data.jsonl:2", data.replace('"id": "i1"', '"id": "i0"')),
    }


@pytest.mark.parametrize(
    "kind", ["toml syntax", "unknown key (the loader)", "field (a located plugin error)", "data line"]
)
@pytest.mark.parametrize("typed", ["relative", "absolute"])
def test_a_file_under_the_current_folder_is_named_relative_to_it(tmp_path, monkeypatch, capsys, kind, typed):
    bench = tmp_path / "bench"
    config = make_benchmark(bench, n=3)
    where, text = _damages(bench)[kind]
    (bench / where.split(":")[0]).write_text(text)
    monkeypatch.chdir(tmp_path)
    line = _error(capsys, "validate", "bench/config.toml" if typed == "relative" else str(config))
    assert line.startswith(f"error: bench/{where}"), line


@pytest.mark.parametrize(
    "kind", ["toml syntax", "unknown key (the loader)", "field (a located plugin error)", "data line"]
)
def test_a_file_outside_the_current_folder_is_named_absolute(tmp_path, monkeypatch, capsys, kind):
    bench = tmp_path / "bench"
    make_benchmark(bench, n=3)
    where, text = _damages(bench)[kind]
    (bench / where.split(":")[0]).write_text(text)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    line = _error(capsys, "validate", "../bench/config.toml")
    assert line.startswith(f"error: {bench}/{where}"), line


def test_a_missing_config_is_named_by_the_same_rule(tmp_path, monkeypatch, capsys):
    (tmp_path / "inside").mkdir()
    monkeypatch.chdir(tmp_path / "inside")
    assert _error(capsys, "validate", "../inside/nope.toml").startswith("error: nope.toml: config file not found")
    assert _error(capsys, "validate", "../nope.toml").startswith(f"error: {tmp_path}/nope.toml: config file not found")
