"""A newcomer's path through the catalogue, on a loopback OpenAI-compatible endpoint:
``ape init gsm8k DIR``, one line edited, the dataset given as local files in GSM8K's shape,
``ape run``: a scored leaderboard, the dataset in the run's provenance and its history, and a
changed row told apart by its hash. And a dataset neither cached nor given, with
``HF_DATASETS_OFFLINE=1``: one line, exit 2, no model call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.cli import run_ape

datasets = pytest.importorskip("datasets", reason="the hf extra (datasets) is not installed")
pytest.importorskip("langchain_openai", reason="the stub endpoint test needs the 'openai' extra")
pytestmark = pytest.mark.slow  # a Prefect server, and the command line in child processes

ROWS = [
    {"question": "Tom has 2 apples and buys 2 more. How many apples?", "answer": "2 + 2 = 4\n#### 4"},
    {"question": "A box holds 1,000 pins and 1 more is added. How many pins?", "answer": "#### 1,001"},
    {"question": "Half of 10 is?", "answer": "10 / 2 = 5\n#### 5"},
]
# what the endpoint answers, by question: right, right (with a thousands separator), wrong
ANSWERS = {"Tom has": "2 + 2 makes 4.\n#### 4", "A box": "So 1,001 pins.\n#### 1,001", "Half of": "#### 6"}


@pytest.fixture
def endpoint() -> Iterator:
    from tests.helpers.fake_openai import LoopbackEndpoint, Request, completion

    def answer(request: Request) -> tuple[int, dict]:
        prompt = json.dumps(request.body.get("messages", []))
        reply = next(text for start, text in ANSWERS.items() if start in prompt)
        return 200, completion(reply)

    server = LoopbackEndpoint(answer)
    yield server
    server.close()


def write_rows(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def newcomer_config(folder: Path, base_url: str) -> Path:
    """``ape init gsm8k`` and the newcomer's edits: the model line, the local files' line."""
    from ape.cli import main

    assert main(["init", "gsm8k", str(folder)]) == 0
    config = folder / "gsm8k.toml"
    text = config.read_text()
    model_line = next(line for line in text.splitlines() if line.startswith("model = {"))
    edited = model_line.replace("http://127.0.0.1:8000/v1", base_url).replace("MODEL-NAME", "fake")
    text = text.replace(model_line, edited)
    text = text.replace('# hf_data_files = "gsm8k_test.jsonl"', 'hf_data_files = "gsm8k_test.jsonl"')
    config.write_text(text)
    write_rows(folder / "gsm8k_test.jsonl", ROWS)
    return config


def test_newcomer_runs_gsm8k_from_local_files_and_history_tells_a_changed_row(
    tmp_path: Path, prefect_server: str, endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ape.cli import main
    from ape.tasks.storage.history import read_runs

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    folder = tmp_path / "newcomer"
    config = newcomer_config(folder, endpoint.base_url)
    out = folder / "output"

    assert main(["run", str(config), "--no-server", "--no-progress", "--new-run"]) == 0
    (run,) = (out / "runs").iterdir()
    report = json.loads((run / "report.json").read_text())
    (row,) = report["leaderboard"]
    assert (row["model_id"], row["n_items"]) == ("my-model", 3)
    assert row["mean_score"] == pytest.approx(2 / 3)  # flexible-extract: 4 and 1,001 right, 6 wrong
    assert "| `my-model` | 3 | 0.667 [" in (run / "leaderboard.md").read_text()
    assert len(endpoint.requests) == 3

    metadata = json.loads((run / "metadata.json").read_text())["provenance"]
    dataset = metadata["hf_dataset"]
    assert (dataset["hf_path"], dataset["hf_name"], dataset["hf_split"]) == ("openai/gsm8k", "main", "test")
    assert dataset["rows"] == 3 and dataset["origin"] == "local files"
    assert metadata["data_sha256"] == dataset["rows_sha256"] and metadata["data_file"] is None

    first = read_runs(out)
    assert len(first) == 1 and first.iloc[0]["data_sha256"] == dataset["rows_sha256"]
    assert json.loads(first.iloc[0]["hf_dataset"])["rows_sha256"] == dataset["rows_sha256"]

    changed = [ROWS[0], {**ROWS[1], "answer": "one thousand and one\n#### 1,001"}, ROWS[2]]
    write_rows(folder / "gsm8k_test.jsonl", changed)  # a changed data set, the same model
    assert main(["run", str(config), "--no-server", "--no-progress", "--new-run"]) == 0
    runs = read_runs(out).sort_values("finished_at")
    assert len(runs) == 2
    hashes = [json.loads(text)["rows_sha256"] for text in runs["hf_dataset"]]
    assert hashes[0] == dataset["rows_sha256"] and hashes[1] != hashes[0]
    assert list(runs["data_sha256"]) == hashes
    assert isinstance(runs, pd.DataFrame) and runs["config_fingerprint"].nunique() == 1  # the model did not change


def test_a_dataset_neither_cached_nor_given_is_one_line_before_any_model_call(tmp_path: Path, endpoint) -> None:
    folder = tmp_path / "offline"
    config = newcomer_config(folder, endpoint.base_url)
    config.write_text(config.read_text().replace('hf_data_files = "gsm8k_test.jsonl"', ""))  # nothing local
    hf_home = tmp_path / "empty-hf-home"
    line = config.read_text().splitlines().index('hf_path = "openai/gsm8k"') + 1
    for command in ("validate", "run"):
        done = run_ape_offline(command, config, hf_home)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0] == (
            f"error: {config.name}:{line} [data] hf_path: dataset 'openai/gsm8k' (configuration 'main', split 'test') "
            "is not in the local Hugging Face cache (HF_DATASETS_OFFLINE=1) and no local files are given "
            "(download it once with a network (without HF_DATASETS_OFFLINE) into the cache, "
            "or set [data] hf_data_files to local files or a folder holding its rows)"
        )
    assert endpoint.requests == []  # no model call


def run_ape_offline(command: str, config: Path, hf_home: Path):
    import os

    env_before = dict(os.environ)
    try:
        os.environ.update({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(hf_home)})
        for name in ("HF_DATASETS_CACHE", "HF_HUB_CACHE"):
            os.environ.pop(name, None)
        extra = ["--no-server", "--no-progress"] if command == "run" else []
        return run_ape(command, config.name, *extra, cwd=config.parent)
    finally:
        os.environ.clear()
        os.environ.update(env_before)
