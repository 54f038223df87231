"""Finding a run's files whatever [run] save_file and metadata_file call them (ape.tasks.storage.run_files),
and `ape report` / `ape retry` on such runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ape.cli import main
from ape.schemas.errors import ApeError
from ape.schemas.results import Outcome, OutputBatch, SessionResult
from ape.tasks.report.provenance import recorded_provenance
from ape.tasks.report.sessions_table import load_sessions
from ape.tasks.storage.run_files import (
    find_metadata,
    find_runs,
    metadata_near,
    read_metadata,
    run_files_in,
)
from ape.tasks.storage.save import SaveHandler
from tests.helpers.runner import make_benchmark, read_results

CUSTOM = 'save_file = "answers.jsonl"\nmetadata_file = "state.json"'


def batch(model: str, item: str, correct: bool = True) -> OutputBatch:
    session = SessionResult(
        item_id=item, run_index=0, model_id=model, outcome=Outcome.SOLVED, score=float(correct), correct=correct
    )
    return OutputBatch(item_id=item, model_id=model, sessions=[session])


def saved_run(folder: Path, model: str, items: list[str], **names: str) -> Path:
    """A run folder written by the SaveHandler, as a real run writes it."""
    run_info = {"benchmark": "b", "model": model, "provenance": {"data_sha256": f"sha-{model}"}}
    with SaveHandler(folder, run_info=run_info, **names) as saver:
        saver.load()
        saver.save([batch(model, item) for item in items])
    return folder


# --- the finder ----------------------------------------------------------------------------------


def test_the_save_handler_records_its_results_file_and_the_finder_follows_it(tmp_path: Path):
    folder = saved_run(tmp_path / "m", "m", ["a", "b"], save_file="answers.jsonl", metadata_file="state.json")
    assert json.loads((folder / "state.json").read_text())["save_file"] == "answers.jsonl"
    run = run_files_in(folder)
    assert run.results == folder / "answers.jsonl" and run.metadata_path == folder / "state.json"
    assert run.metadata["model"] == "m"
    assert [run.results for run in find_runs([tmp_path])] == [folder / "answers.jsonl"]
    assert load_sessions([tmp_path]).item_id.tolist() == ["a", "b"]


def test_metadata_is_recognised_by_content_not_by_name(tmp_path: Path):
    (tmp_path / "report.json").write_text(json.dumps({"leaderboard": [], "summary": {"tasks": 1}}))
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "x", "status": "finished"}))
    (tmp_path / "a-broken.json").write_text("{not json")
    (tmp_path / "list.json").write_text(json.dumps([1, 2]))
    (tmp_path / "metadata.json").write_text("{}")  # not what a SaveHandler writes
    assert find_metadata(tmp_path) is None
    assert read_metadata(tmp_path / "report.json") is None
    state = {"completed_ids": ["a"], "errored_ids": [], "save_file": "answers.jsonl"}
    (tmp_path / "state.json").write_text(json.dumps(state))
    assert find_metadata(tmp_path) == (tmp_path / "state.json", state)


def test_metadata_json_is_tried_first(tmp_path: Path):
    for name, save_file in (("a.json", "first.jsonl"), ("metadata.json", "default.jsonl")):
        meta = {"completed_ids": [], "errored_ids": [], "save_file": save_file}
        (tmp_path / name).write_text(json.dumps(meta))
    assert run_files_in(tmp_path).results == tmp_path / "default.jsonl"


@pytest.mark.parametrize(
    "metadata",
    [None, {"completed_ids": ["a"], "errored_ids": []}, {"completed_ids": [], "errored_ids": [], "save_file": "../x"}],
    ids=["no-metadata", "metadata-without-save-file", "unsafe-save-file"],
)
def test_falls_back_to_results_jsonl(tmp_path: Path, metadata: dict | None):
    if metadata is not None:
        (tmp_path / "meta.json").write_text(json.dumps(metadata))
    (tmp_path / "results.jsonl").write_text(batch("m", "a").model_dump_json() + "\n")
    assert run_files_in(tmp_path).results == tmp_path / "results.jsonl"
    assert [run.results for run in find_runs([tmp_path])] == [tmp_path / "results.jsonl"]


def test_find_runs_walks_folders_and_takes_files_as_they_are(tmp_path: Path):
    custom = saved_run(tmp_path / "out" / "alpha", "alpha", ["a"], save_file="answers.jsonl", metadata_file="s.json")
    default = saved_run(tmp_path / "out" / "beta", "beta", ["a"])
    (tmp_path / "out" / "beta" / "report.json").write_text("{}")
    started = tmp_path / "out" / "gamma"  # metadata written at the start, no results yet
    with SaveHandler(started, save_file="answers.jsonl") as saver:
        saver.load()
    (custom / "results.jsonl").write_text("stale, and not the file its metadata names\n")
    runs = find_runs([tmp_path / "out"])
    assert [r.results for r in runs] == [custom / "answers.jsonl", default / "results.jsonl"]
    assert [r.metadata_path for r in runs] == [custom / "s.json", default / "metadata.json"]
    (beside,) = find_runs([custom / "answers.jsonl"])  # a file: the metadata beside it
    assert beside.metadata_path == custom / "s.json"
    assert recorded_provenance(find_runs([tmp_path / "out"])) == {
        "alpha": {"data_sha256": "sha-alpha"},
        "beta": {"data_sha256": "sha-beta"},
    }
    with pytest.raises(ApeError, match="no such folder"):
        find_runs([tmp_path / "nowhere"])


def test_metadata_near_is_the_folder_then_its_sub_folders(tmp_path: Path):
    top = tmp_path / "out"
    saved_run(top / "b", "b", ["a"], metadata_file="state.json")
    saved_run(top / "a", "a", ["a"])
    (top / "report.json").write_text("{}")
    assert [path for path, _ in metadata_near(top)] == [top / "a" / "metadata.json", top / "b" / "state.json"]
    assert [data["model"] for _, data in metadata_near(top / "b")] == ["b"]
    assert metadata_near(tmp_path / "nowhere") == []


# --- the commands on custom file names, without a flow --------------------------------------------


def test_report_reads_custom_file_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    top = tmp_path / "out"
    for model in ("alpha", "beta"):
        saved_run(top / model, model, ["a", "b"], save_file="answers.jsonl", metadata_file="state.json")
    assert main(["report", str(top)]) == 0
    assert "| `alpha` |" in capsys.readouterr().out
    envelope = json.loads((top / "report.json").read_text())
    assert {row["model_id"] for row in envelope["leaderboard"]} == {"alpha", "beta"}
    assert envelope["summary"]["provenance"]["runs"]["beta"] == {"data_sha256": "sha-beta"}
    assert envelope["summary"]["sources"] == [str(top / m / "answers.jsonl") for m in ("alpha", "beta")]


def test_report_and_retry_name_the_folder_when_nothing_is_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "report.json").write_text("{}")
    assert main(["report", str(folder), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert str(folder) in err and "no results.jsonl found" in err
    assert main(["retry", str(folder), "--no-server"]) == 2
    err = capsys.readouterr().err
    assert str(folder) in err and "no run metadata with a recorded config" in err and "--config" in err


# --- a real run with custom file names ------------------------------------------------------------


def calls(tmp_path: Path) -> dict[str, int]:
    return {name: len((tmp_path / f"{name}.log").read_text().splitlines()) for name in ("alpha", "beta")}


def test_a_run_with_custom_file_names_is_reportable_and_retryable(tmp_path: Path, prefect_server: str):
    models = "".join(
        f'[[model]]\nname = "{name}"\nprovider = "mock"\n'
        f'args = {{ behaviour = "arithmetic", seed = {seed}, call_log = "{tmp_path / name}.log" }}\n'
        for seed, name in enumerate(("alpha", "beta"))
    )  # different seeds: no shared cache entries
    config = make_benchmark(tmp_path / "bench", n=3, models=models, run=CUSTOM)
    assert main(["run", str(config), "--no-server", "--no-progress"]) == 0
    out = tmp_path / "bench" / "out"
    for model in ("alpha", "beta"):
        names = {p.name for p in (out / model).iterdir()}
        assert {"answers.jsonl", "state.json"} <= names and not {"results.jsonl", "metadata.json"} & names
        assert json.loads((out / model / "state.json").read_text())["save_file"] == "answers.jsonl"
    assert calls(tmp_path) == {"alpha": 3, "beta": 3}

    # `ape report` on the benchmark's folder and on one model's folder
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    envelope = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert envelope["error"] is None
    assert {row["model_id"]: row["n_items"] for row in envelope["leaderboard"]} == {"alpha": 3, "beta": 3}
    assert set(envelope["summary"]["provenance"]["runs"]) == {"alpha", "beta"}
    assert main(["report", str(out / "beta"), "--out", str(tmp_path / "rep-beta")]) == 0
    envelope = json.loads((tmp_path / "rep-beta" / "report.json").read_text())
    assert [row["model_id"] for row in envelope["leaderboard"]] == ["beta"]

    # `ape retry` on the benchmark's folder redoes every model ...
    assert main(["retry", str(out), "--outcomes", "SOLVED", "--no-server", "--no-progress"]) == 0
    assert calls(tmp_path) == {"alpha": 6, "beta": 6}
    # ... and on one model's folder that model only
    assert main(["retry", str(out / "alpha"), "--outcomes", "SOLVED", "--no-server", "--no-progress"]) == 0
    assert calls(tmp_path) == {"alpha": 9, "beta": 6}
    assert not (out / "alpha" / "alpha").exists()
    for model in ("alpha", "beta"):
        assert sorted(b["item_id"] for b in read_results(out / model / "answers.jsonl")) == ["i0", "i1", "i2"]
        assert not (out / model / "results.jsonl").exists() and not (out / model / "metadata.json").exists()
    envelope = json.loads((out / "report.json").read_text())
    assert {row["model_id"]: row["n_items"] for row in envelope["leaderboard"]} == {"alpha": 3, "beta": 3}
