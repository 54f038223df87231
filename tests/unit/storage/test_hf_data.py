"""[data] hf_path: a Hugging Face dataset read through ``datasets`` from local files, its rows
validated like a file's, and what was read recorded (provenance, resume, history)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from ape.schemas.benchmark_items import GSM8KItem
from ape.schemas.config import DataConfig
from ape.schemas.errors import ApeError
from ape.tasks.storage import hf_data
from ape.tasks.storage.data import DataProvider, data_provenance

datasets = pytest.importorskip("datasets", reason="the hf extra (datasets) is not installed")

ROWS = [
    {"question": "Tom has 2 apples and buys 2 more. How many?", "answer": "2 + 2 = 4\n#### 4"},
    {"question": "A box holds 1,000 pins; 1 is lost.", "answer": "1000 - 1 = 999\n#### 999"},
    {"question": "Half of 10?", "answer": "#### 5"},
]


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """datasets prepares even local files into its cache: a folder of the test's own; and each
    test loads afresh (the loader keeps what it loaded per process)."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    hf_data._load.cache_clear()


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def gsm8k(tmp_path: Path, rows: list[dict] = ROWS, **keys) -> DataConfig:
    files = write_rows(tmp_path / "gsm8k_test.jsonl", rows)
    return DataConfig.model_validate(
        {
            "hf_path": "openai/gsm8k",
            "hf_name": "main",
            "hf_data_files": [str(files)],
            "schema": "ape.schemas.benchmark_items:GSM8KItem",
            **keys,
        }
    )


def test_local_files_give_validated_items_numbered_by_row(tmp_path):
    provider = DataProvider.for_config(gsm8k(tmp_path), GSM8KItem)
    items = list(provider)
    assert [i.id for i in items] == ["1", "2", "3"]  # rows without ids: their row numbers
    assert [i.target for i in items] == ["4", "999", "5"]
    assert provider.scan() == ["1", "2", "3"]
    sliced = DataProvider.for_config(gsm8k(tmp_path, start_id="2", end_id="3"), GSM8KItem)
    assert [i.id for i in sliced] == ["2", "3"]


def test_a_bad_row_is_named_by_dataset_and_row(tmp_path):
    rows = [*ROWS[:2], {"question": "no answer here"}]  # datasets fills the missing column with null
    with pytest.raises(ApeError) as caught:
        DataProvider.for_config(gsm8k(tmp_path, rows), GSM8KItem).scan()
    assert str(caught.value) == "openai/gsm8k/main[test] row 3: field 'answer': Input should be a valid string"


def test_exactly_one_of_file_and_hf_path():
    with pytest.raises(ValidationError, match="exactly one of 'file'"):
        DataConfig.model_validate({"schema": "x:Y"})
    with pytest.raises(ValidationError, match="exactly one of 'file'"):
        DataConfig.model_validate({"schema": "x:Y", "file": "d.jsonl", "hf_path": "a/b"})
    with pytest.raises(ValidationError, match="need 'hf_path'"):
        DataConfig.model_validate({"schema": "x:Y", "file": "d.jsonl", "hf_name": "main"})


def test_missing_local_files_and_unknown_split_are_one_line(tmp_path):
    config = gsm8k(tmp_path).model_copy(update={"hf_data_files": [str(tmp_path / "nope.jsonl")]})
    with pytest.raises(ApeError, match="local files not found") as caught:
        hf_data.load_hf(config)
    assert "\n" not in str(caught.value)
    config = gsm8k(tmp_path).model_copy(update={"hf_data_files": [str(tmp_path / "rows.txt")]})
    with pytest.raises(ApeError, match="cannot read .* as rows"):
        hf_data.load_hf(config)


def test_provenance_records_the_dataset_and_a_hash_that_a_changed_row_changes(tmp_path):
    record = data_provenance(gsm8k(tmp_path))
    dataset = record["hf_dataset"]
    assert dataset["hf_path"] == "openai/gsm8k" and dataset["hf_name"] == "main" and dataset["hf_split"] == "test"
    assert dataset["rows"] == 3 and dataset["origin"] == "local files" and dataset["fingerprint"]
    assert record["data_sha256"] == dataset["rows_sha256"] and len(record["data_sha256"]) == 64
    assert data_provenance(gsm8k(tmp_path))["data_sha256"] == record["data_sha256"]  # same rows, same hash

    changed = [ROWS[0], {**ROWS[1], "answer": "1000 - 2 = 998 pins\n#### 998"}, ROWS[2]]  # the file changed: read again
    again = data_provenance(gsm8k(tmp_path, changed))
    assert again["data_sha256"] != record["data_sha256"]
    assert again["hf_dataset"]["hf_path"] == dataset["hf_path"]  # the same dataset, changed rows


def test_a_file_keeps_its_provenance(tmp_path):
    path = write_rows(tmp_path / "d.jsonl", [{"id": "a", "question": "q", "answer": "#### 1"}])
    record = data_provenance(DataConfig.model_validate({"file": str(path), "schema": "x:Y"}))
    assert record["data_file"] == str(path) and record["hf_dataset"] is None and len(record["data_sha256"]) == 64


def test_the_cache_is_read_from_its_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    for name in ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    assert not hf_data.cached("openai/gsm8k", "main", "test")
    prepared = tmp_path / "home" / "datasets" / "openai___gsm8k" / "main" / "0.0.0" / ("a" * 40)
    prepared.mkdir(parents=True)
    (prepared / "gsm8k-train.arrow").write_bytes(b"")
    assert not hf_data.cached("openai/gsm8k", "main", "test")  # another split only
    (prepared / "gsm8k-test.arrow").write_bytes(b"")
    assert hf_data.cached("openai/gsm8k", "main", "test")
    assert not hf_data.cached("openai/gsm8k", "socratic", "test")
    snapshot = tmp_path / "home" / "hub" / "datasets--cais--mmlu" / "snapshots" / ("b" * 40)
    snapshot.mkdir(parents=True)
    assert hf_data.cached("cais/mmlu", "all", "test")  # the repository downloaded: loads offline
