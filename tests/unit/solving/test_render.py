"""Mustache rendering through langchain-core, with schema-checked variables."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from ape.schemas.errors import ApeError
from ape.tasks.solving.render import check_template, render, template_variables


class Item(BaseModel):
    id: str
    question_text: str = Field(alias="question")
    tags: list[str] = []


def test_render_uses_alias_names():
    item = Item(id="1", question="2 < 3 & more?", tags=["a", "b"])
    text = render("Q{{ id }}: {{ question }} {{#tags}}[{{.}}]{{/tags}}", item)
    assert text == "Q1: 2 < 3 & more? [a][b]"


def test_template_variables():
    assert template_variables("{{ a }} {{#b}}{{ c }}{{/b}} {{^d}}x{{/d}}") >= {"a", "b", "d"}


def test_unknown_variable_is_an_error_with_hint():
    with pytest.raises(ApeError, match=r"'\{\{ questoin \}\}' is not a field of Item.*did you mean 'question'"):
        check_template("{{ questoin }}", Item, where="config.toml [prompt] template")


def test_python_field_name_is_not_a_variable_when_aliased():
    with pytest.raises(ApeError, match="question_text"):
        check_template("{{ question_text }}", Item, where="t")
    check_template("{{ question }} {{ id }}", Item, where="t")
