"""`ape diff` over two real runs: flips, and re-scoring across a checker change."""

from __future__ import annotations

import pandas as pd
import pytest

from ape.cli import main
from tests.helpers.runner import make_benchmark

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_a_changed_checker_is_rescored_and_the_diff_says_so(tmp_path, capsys):
    strict = make_benchmark(tmp_path / "a", n=5)
    harsh = make_benchmark(tmp_path / "b", n=5, checker='implementation = "benchschema:check_always_fails"')
    assert main(["run", str(strict)]) == 0
    assert main(["run", str(harsh)]) == 0  # every item failing its check is a result, not an error
    capsys.readouterr()

    # without re-scoring, every item flips: the earlier checker passed what the later one fails
    assert main(["diff", str(tmp_path / "a" / "out"), str(tmp_path / "b" / "out"), "--no-rescore"]) == 0
    plain = capsys.readouterr().out
    assert "5 went from pass to fail" in plain
    assert "| `m` | `fingerprint checker` |" in plain

    # re-scored: run a's saved answers graded by run b's checker fail too, so nothing flipped
    assert main(["diff", str(tmp_path / "a" / "out"), str(tmp_path / "b" / "out")]) == 0
    rescored = capsys.readouterr().out
    assert "0 went from pass to fail" in rescored
    assert "a/out's saved answers were re-scored with b/out's checker (no model calls)" in rescored
    table = pd.read_parquet(tmp_path / "b" / "out" / "diff.parquet")
    assert len(table) == 5 and not table["passed_a"].any() and not table["passed_b"].any()
    assert (tmp_path / "b" / "out" / "diff.md").read_text().startswith("# Diff: a/out -> b/out")


def test_two_run_ids_and_an_unknown_one(tmp_path, capsys):
    path = make_benchmark(tmp_path, n=4)
    for _ in range(2):
        assert main(["run", str(path), "--new-run", "--no-load-save"]) == 0
    capsys.readouterr()
    assert main(["diff", str(tmp_path / "out"), "previous", "latest"]) == 0
    out = capsys.readouterr().out
    assert "Nothing that the runs record" in out and "0 went from pass to fail" in out
    assert main(["diff", str(tmp_path / "out"), "previous", "nope"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_runs_of_different_benchmarks_are_refused_and_nothing_is_written(tmp_path, capsys):
    """No item in common (other ids) or no model in common: exit 2 with one line, no diff files."""
    base = make_benchmark(tmp_path / "a", n=3)
    other_items = make_benchmark(tmp_path / "b", n=3, id_prefix="q")
    other_model = make_benchmark(tmp_path / "c", n=3, models='[model]\nname = "z"\nprovider = "mock"\n')
    for path in (base, other_items, other_model):
        assert main(["run", str(path), "--no-server"]) == 0
    capsys.readouterr()
    for folder, what in (("b", "no item in common"), ("c", "no model in common")):
        before = sorted(p.name for p in (tmp_path / folder / "out").iterdir())
        code = main(["diff", str(tmp_path / "a" / "out"), str(tmp_path / folder / "out")])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == "", captured
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and what in lines[0] and "nothing was written" in lines[0], lines
        assert sorted(p.name for p in (tmp_path / folder / "out").iterdir()) == before
        assert not (tmp_path / folder / "out" / "diff.md").exists()
    assert "models m; c/out: models z" in lines[0]
