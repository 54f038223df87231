"""A damaged history through the command line: `ape validate` and `ape run --new-run` stop
with one line before any model call, `ape history OUTPUT --rebuild` restores it from the run
folders (the same rows as before the damage), and the next new run records as usual."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ape.cli import main
from ape.tasks.storage import history
from tests.helpers import mock_calls
from tests.helpers.runner import make_benchmark

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_a_truncated_history_stops_before_any_model_call_and_is_rebuilt(tmp_path: Path, capsys) -> None:
    path = make_benchmark(tmp_path, n=8, model_args='behaviour = "arithmetic", use_tools = false')
    out = tmp_path / "out"
    for _ in range(2):
        assert main(["run", str(path), "--new-run", "--no-server"]) == 0
    before = history.read_runs(out)
    assert len(before) == 2 and before["history_verdict"].iloc[1] == "no detectable change"
    runs_file = out / "history" / "runs.parquet"
    runs_file.write_bytes(runs_file.read_bytes()[:100])
    folders = sorted(p.name for p in (out / "runs").iterdir())
    capsys.readouterr()

    calls = mock_calls.chat_calls("m")
    for argv in (["validate", str(path)], ["run", str(path), "--new-run", "--no-server"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {runs_file}: the run history cannot be read"), err
        assert f"ape history {out} --rebuild" in err[0] and "ArrowInvalid" not in err[0]
    assert mock_calls.chat_calls("m") == calls  # found before any model call
    assert sorted(p.name for p in (out / "runs").iterdir()) == folders  # and before a run folder was made

    assert main(["history", str(out), "--rebuild", "--no-chart"]) == 0
    assert "rebuilt" in capsys.readouterr().out
    pd.testing.assert_frame_equal(history.read_runs(out), before)
    assert main(["run", str(path), "--new-run", "--no-server"]) == 0
    after = history.read_runs(out)
    assert len(after) == 3 and after["history_verdict"].iloc[2] == "no detectable change"
    assert after["history_reference_runs"].iloc[2] == 2  # the rebuilt runs are its reference
