"""The calibration file: every bad line is one error naming the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from ape.schemas.errors import ApeError
from ape.tasks.checking.judge import parse_scale
from ape.tasks.checking.judge_labels import load_calibration


class Item(BaseModel):
    id: str
    question: str


def write(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_loads_items_solutions_and_verdicts(tmp_path):
    path = write(
        tmp_path / "c.jsonl",
        [
            {"id": "a", "question": "q", "solution": "s", "human": True},
            {"id": "b", "question": "q", "solution": {"x": 1}, "human": "fail", "model": "m"},
        ],
    )
    rows = load_calibration(path, Item, parse_scale("pass/fail"))
    assert [(r.item.id, r.human, r.model) for r in rows] == [("a", "PASS", None), ("b", "FAIL", "m")]
    assert rows[1].solution == {"x": 1}


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("{not json", "not a JSON object"),
        ({"id": "a", "question": "q", "human": 1}, "lacks 'solution'"),
        ({"id": "a", "question": "q", "solution": "s", "human": "maybe"}, "not a grade on the pass/fail scale"),
        ({"id": "a", "solution": "s", "human": 1}, "not a valid Item: 'question'"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, line, words):
    good = {"id": "z", "question": "q", "solution": "s", "human": 0}
    path = write(tmp_path / "c.jsonl", [good, line, good])
    with pytest.raises(ApeError, match=words) as info:
        load_calibration(path, Item, parse_scale("pass/fail"))
    assert info.value.where == f"{path}:2"


def test_too_few_lines_and_missing_file(tmp_path):
    path = write(tmp_path / "c.jsonl", [{"id": "a", "question": "q", "solution": "s", "human": 1}])
    with pytest.raises(ApeError, match="at least 2"):
        load_calibration(path, Item, parse_scale("0-3"))
    with pytest.raises(ApeError, match="cannot read the calibration file"):
        load_calibration(tmp_path / "nope.jsonl", Item, parse_scale("0-3"))
