"""MMLU's CSV layout (question,A,B,C,D,answer) loads out of the box, with or without its header."""

from __future__ import annotations

import pytest

from ape.schemas.choices import ChoicesConfig, MMLUItem
from ape.schemas.errors import ApeError
from ape.tasks.plugins.registry import resolve
from ape.tasks.solving.choices import choice_texts, gold_index, score_request
from ape.tasks.storage.data import DataProvider

ROWS = 'What is 2 + 2?,3,4,5,22,B\n"Which gas do plants take in, mostly?",oxygen,carbon dioxide,argon,helium,b\n'


def test_a_header_less_mmlu_file_loads_with_line_ids_and_the_subject_from_its_name(tmp_path):
    path = tmp_path / "elementary_mathematics_test.csv"
    path.write_text(ROWS, encoding="utf-8")
    items = list(DataProvider(path, MMLUItem))
    assert [item.id for item in items] == ["1", "2"]
    assert items[1].question == "Which gas do plants take in, mostly?"
    assert items[1].choices == ["oxygen", "carbon dioxide", "argon", "helium"]
    assert items[1].answer == "B" and items[0].subject == "elementary_mathematics"


def test_a_file_with_the_header_row_loads_alike_and_keeps_its_own_columns(tmp_path):
    path = tmp_path / "mmlu.csv"
    path.write_text("id,question,A,B,C,D,answer,subject\n" + "q1,What is 2 + 2?,3,4,5,22,B,arithmetic\n")
    (item,) = DataProvider(path, MMLUItem)
    assert (item.id, item.subject, item.answer) == ("q1", "arithmetic", "B")


def test_mmlu_items_score_their_letters_and_read_the_gold_letter(tmp_path):
    path = tmp_path / "x_dev.csv"
    path.write_text(ROWS, encoding="utf-8")
    item = next(iter(DataProvider(path, MMLUItem)))
    cfg = ChoicesConfig(field="choices", gold="answer", continuation="letter")
    choices = choice_texts(item, cfg)
    assert gold_index(item, cfg, choices) == 1
    assert score_request("Answer:", cfg, choices, 1).continuations == (" A", " B", " C", " D")
    assert resolve("schema", "mmlu", where="[data] schema") == "ape.schemas.choices:MMLUItem"


def test_a_row_with_a_bad_answer_is_one_located_error(tmp_path):
    path = tmp_path / "bad_test.csv"
    path.write_text("What?,a,b,c,d,E\n", encoding="utf-8")
    with pytest.raises(ApeError) as caught:
        list(DataProvider(path, MMLUItem))
    assert "bad_test.csv:1" in str(caught.value) and "answer" in str(caught.value)
