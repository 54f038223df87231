"""``ape ctl`` given a flow run's id points at ``ape status`` of the run's folder, which
``ape status`` takes; it used to advise ``ape status <flow run id>``, which was refused."""

from __future__ import annotations

from pathlib import Path

from ape.cli.ctl import shown_by
from ape.cli.flow_run_output import output_of


def test_the_output_folder_comes_from_the_flow_runs_config(tmp_path: Path) -> None:
    assert output_of({"config": {"run": {"output": str(tmp_path)}}, "model_index": 0}) == tmp_path
    assert output_of({"config": {"run": {}}}) is None and output_of({}) is None and output_of(None) is None


def test_the_hint_names_the_folder_never_the_flow_run_id(tmp_path: Path) -> None:
    assert shown_by(tmp_path) == f"`ape status {tmp_path}` shows it"
    assert shown_by(None) == "the flow run's page in the Prefect UI shows it"
