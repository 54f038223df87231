"""The cache's format: APE's JSON records round-trip; anything else is refused from its raw
bytes, before Prefect or pickle sees it (ape.tasks.storage.cache_format)."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path

import pytest
from pydantic import BaseModel

from ape.schemas.results import Outcome
from ape.schemas.transcript import SolveRecord, SolverState
from ape.tasks.solving.solve import revalued
from ape.tasks.storage.cache_format import SERIALIZER, ForeignRecord, RecordSerializer, Refusals, checked_record


class Boom:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def _record(tmp_path: Path, serializer: dict, blob: bytes) -> bytes:
    result = tmp_path / "result"
    result.write_bytes(blob)
    return json.dumps({"storage_key": str(result), "expiration": None, "serializer": serializer}).encode()


def test_records_round_trip_as_json() -> None:
    record = SolveRecord(outcome=Outcome.SOLVED, solution={"v": 6}, raw_output='{"v": 6}', steps=1)
    blob = RecordSerializer().dumps(record)
    assert json.loads(blob)["kind"] == "solve-record"
    assert RecordSerializer().loads(blob) == record
    state = SolverState(prompt="p", messages=[{"type": "human", "data": {"content": "p"}}])
    assert RecordSerializer().loads(RecordSerializer().dumps(state)) == state
    with pytest.raises(TypeError):
        RecordSerializer().dumps({"not": "a record"})


def test_an_ape_record_is_read(tmp_path: Path) -> None:
    record = SolveRecord(outcome=Outcome.SOLVED, solution=5)
    content = _record(tmp_path, {"type": SERIALIZER}, RecordSerializer().dumps(record))
    assert checked_record(content, "r") == (content, record)


@pytest.mark.parametrize(
    "serializer",
    [
        {"type": "pickle", "picklelib": "pickle"},
        {"type": "pickle", "picklelib": "cloudpickle"},
        {"type": "compressed/pickle"},
        {"type": "json", "jsonlib": "pickle"},
        {"type": SERIALIZER, "extra": "x"},
        "ape-record-json",
    ],
    ids=str,
)
def test_a_record_naming_another_serializer_is_refused_unread(tmp_path: Path, serializer) -> None:
    marker = tmp_path / "marker"
    content = _record(tmp_path, serializer, base64.encodebytes(pickle.dumps(Boom(marker))))
    with pytest.raises(ForeignRecord, match="names serializer"):
        checked_record(content, "r")
    assert not marker.exists()


def test_a_result_file_that_is_not_an_ape_record_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    for blob in (base64.encodebytes(pickle.dumps(Boom(marker))), b'{"kind": "solve-record", "value": {}}'):
        with pytest.raises(ForeignRecord, match="not APE's JSON record"):
            checked_record(_record(tmp_path, {"type": SERIALIZER}, blob), "r")
    assert not marker.exists()
    with pytest.raises(ForeignRecord, match="not JSON"):
        checked_record(b"\x80\x04garbage", "r")


def test_refusals_warn_once_per_run_and_count(tmp_path: Path, caplog) -> None:
    tally = Refusals()
    tally.start(tmp_path)
    with caplog.at_level("WARNING", logger="ape"):
        for n in range(5):
            tally.note(tmp_path, f"record {n}")
    assert [r.getMessage().count("cache: refused record 0") for r in caplog.records] == [1]
    assert tally.take(tmp_path) == 5 and tally.take(tmp_path) == 0


class Answer(BaseModel):
    value: int


def test_a_cached_record_gets_the_adapters_object_back() -> None:
    def adapter(text: str) -> Answer:
        return Answer(value=int(text))

    cached = RecordSerializer().loads(
        RecordSerializer().dumps(SolveRecord(outcome=Outcome.SOLVED, solution={"value": 6}, raw_output="6"))
    )
    assert cached.value == {"value": 6}  # the JSON form: what a round trip keeps
    assert revalued(cached, adapter).value == Answer(value=6)
    # an adapter that now parses differently: the recorded solution stands
    other = SolveRecord(outcome=Outcome.SOLVED, solution={"value": 7}, raw_output="6")
    assert revalued(other, adapter).value == {"value": 7}
