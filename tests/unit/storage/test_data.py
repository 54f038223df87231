"""DataProvider: formats, id fields, slicing, streaming and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from ape.schemas.data import id_field
from ape.schemas.errors import ApeError
from ape.tasks.storage.data import DataProvider, json_depth


class Item(BaseModel):
    id: str
    text: str
    n: int = 0


class Keyed(BaseModel):
    key: int = id_field()
    text: str


def jsonl(tmp_path: Path, rows: list[dict], name: str = "d.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def ids(provider) -> list[str]:
    return [str(getattr(i, provider.id_name)) for i in provider]


def test_jsonl_and_csv(tmp_path):
    path = jsonl(tmp_path, [{"id": "a", "text": "x", "n": 1}, {"id": "b", "text": "y"}])
    items = list(DataProvider(path, Item))
    assert [i.id for i in items] == ["a", "b"] and items[0].n == 1
    csv = tmp_path / "d.csv"
    csv.write_text('id,text,n\na,x,1\nb,"y, z",2\n')
    items = list(DataProvider(csv, Item))
    assert [(i.id, i.text, i.n) for i in items] == [("a", "x", 1), ("b", "y, z", 2)]


def test_id_field_marker(tmp_path):
    path = jsonl(tmp_path, [{"key": 5, "text": "x"}, {"key": 2, "text": "y"}])
    provider = DataProvider(path, Keyed)
    assert provider.id_name == "key" and ids(provider) == ["5", "2"]


def test_slice_by_file_order_inclusive(tmp_path):
    rows = [{"key": k, "text": "t"} for k in (30, 10, 20, 5, 40)]
    path = jsonl(tmp_path, rows)
    assert ids(DataProvider(path, Keyed, start_id=10, end_id=5)) == ["10", "20", "5"]
    assert ids(DataProvider(path, Keyed, start_id="20")) == ["20", "5", "40"]
    assert ids(DataProvider(path, Keyed, end_id=30)) == ["30"]


def test_unknown_start_and_end_ids(tmp_path):
    path = jsonl(tmp_path, [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}])
    with pytest.raises(ApeError, match="start_id 'zz' is not in the file"):
        list(DataProvider(path, Item, start_id="zz"))
    with pytest.raises(ApeError, match="end_id 'zz' is not in the file"):
        DataProvider(path, Item, end_id="zz").scan()


def test_duplicate_id_names_line(tmp_path):
    path = jsonl(tmp_path, [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}, {"id": "a", "text": "z"}])
    with pytest.raises(ApeError, match=r"d.jsonl:3: duplicate id 'a', first on line 1"):
        DataProvider(path, Item).scan()


def test_validation_error_names_line_and_field(tmp_path):
    path = jsonl(tmp_path, [{"id": "a", "text": "x"}, {"id": "b", "text": "y", "n": "many"}])
    with pytest.raises(ApeError, match=r"d.jsonl:2: item 'b': field 'n'"):
        DataProvider(path, Item).scan()
    csv = tmp_path / "d.csv"
    csv.write_text("id,n\na,1\n")
    with pytest.raises(ApeError, match=r"d.csv:2: item 'a': field 'text'"):
        DataProvider(csv, Item).scan()


def test_empty_file_extension_encoding_json(tmp_path):
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    with pytest.raises(ApeError, match="no items"):
        DataProvider(empty, Item).scan()
    with pytest.raises(ApeError, match="unsupported data file extension '.txt'"):
        DataProvider(tmp_path / "x.txt", Item)
    bad = tmp_path / "b.jsonl"
    bad.write_bytes(b'{"id": "a", "text": "\xff\xfe"}\n')
    with pytest.raises(ApeError, match="not valid UTF-8"):
        DataProvider(bad, Item).scan()
    broken = tmp_path / "j.jsonl"
    broken.write_text('{"id": "a", "text": "x"}\n{"id": \n')
    with pytest.raises(ApeError, match=r"j.jsonl:2: invalid JSON"):
        DataProvider(broken, Item).scan()


@pytest.mark.parametrize(
    ("line", "said", "cut"),
    [
        ('{"id": "a", "text": "a line cut off in its str', "Unterminated string starting at column 21", True),
        ('{"id": "a", "text": ', "Expecting value at column 21", True),
        ('{"id": "a" "text": "x"}', "Expecting ',' delimiter at column 12", False),
        ('{"id": "a", "text": "x"} and more', "Extra data at column 26", False),
    ],
)
def test_invalid_json_says_what_is_wrong(tmp_path, line, said, cut):
    """The cause and column as the line reads without its line end: a line cut off inside a
    string was "Invalid control character at (column 31)" (the newline in the open string)."""
    broken = tmp_path / "j.jsonl"
    broken.write_text('{"id": "z", "text": "x"}\n' + line + "\n")
    with pytest.raises(ApeError) as caught:
        DataProvider(broken, Item).scan()
    assert str(caught.value).startswith(f"{broken}:2: invalid JSON: {said}")
    assert ("was it cut off?" in str(caught.value)) is cut


def test_no_id_field(tmp_path):
    class NoId(BaseModel):
        text: str

    with pytest.raises(ApeError, match="no field 'id'"):
        DataProvider(jsonl(tmp_path, [{"text": "x"}]), NoId)


def test_streams_without_reading_whole_file(tmp_path):
    """The first item arrives although a later line is broken: nothing reads ahead."""
    path = tmp_path / "big.jsonl"
    with path.open("w") as handle:
        handle.write(json.dumps({"id": "first", "text": "x"}) + "\n")
        for i in range(20000):
            handle.write(json.dumps({"id": f"i{i}", "text": "y" * 50}) + "\n")
        handle.write("{broken\n")
    stream = iter(DataProvider(path, Item))
    assert next(stream).id == "first"
    with pytest.raises(ApeError, match="invalid JSON"):
        for _ in stream:
            pass


def test_alias_fields(tmp_path):
    class Aliased(BaseModel):
        id: str
        question_text: str = Field(alias="question")

    items = list(DataProvider(jsonl(tmp_path, [{"id": "a", "question": "q?"}]), Aliased))
    assert items[0].question_text == "q?"


def test_line_length_bound_names_the_line_and_allows_exactly_the_limit(tmp_path):
    head = json.dumps({"id": "a", "text": ""})[:-2]  # '{"id": "a", "text": "'
    exact = head + "x" * (100 - len(head) - 2) + '"}'
    assert len(exact) == 100
    path = tmp_path / "d.jsonl"
    path.write_text(exact + "\n" + exact.replace('"a"', '"b"') + " \n")
    provider = DataProvider(path, Item, max_line_bytes=100)
    with pytest.raises(ApeError, match="longer than 100 bytes") as err:
        list(provider)
    assert err.value.where == f"{path}:2"
    path.write_text(exact + "\n" + exact.replace('"a"', '"b"'))  # the last line, no newline: within
    assert [i.id for i in DataProvider(path, Item, max_line_bytes=100)] == ["a", "b"]


def test_json_depth_bound_names_the_line(tmp_path):
    path = tmp_path / "d.jsonl"
    ok = {"id": "a", "text": "t", "n": 0}
    path.write_text(json.dumps(ok) + "\n" + '{"id": "b", "text": "t", "x": ' + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(ApeError, match="nested deeper than 100 levels") as err:
        list(DataProvider(path, Item))
    assert err.value.where == f"{path}:2"
    # deeper than the bound but within the parser: the same error; at the bound: fine
    path.write_text('{"id": "a", "text": "t", "x": ' + "[" * 11 + "]" * 11 + "}\n")
    with pytest.raises(ApeError, match="nested deeper than 11 levels"):
        list(DataProvider(path, Item, max_depth=11))
    assert len(list(DataProvider(path, Item, max_depth=12))) == 1


def test_many_flat_brackets_are_not_deep(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "[" * 500 + "{" * 500}) + "\n")
    assert len(list(DataProvider(path, Item, max_depth=3))) == 1


def test_json_depth() -> None:
    assert json_depth(1) == 0 and json_depth([]) == 1 and json_depth({"a": [1, {"b": []}]}) == 4


def test_csv_bounds(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("id,text\na,x\nb," + "y" * 300 + "\n")
    with pytest.raises(ApeError, match="longer than 200 bytes") as err:
        list(DataProvider(path, Item, max_line_bytes=200))
    assert err.value.where == f"{path}:3"
    # a quoted cell spanning lines, each short, is held to csv's own cell bound: an ApeError too
    path.write_text('id,text\na,"' + "z\n" * 200_000 + '"\n')
    with pytest.raises(ApeError, match="invalid CSV: field larger than field limit") as err:
        list(DataProvider(path, Item, max_line_bytes=200))
    assert err.value.where is not None and err.value.where.startswith(f"{path}:")
