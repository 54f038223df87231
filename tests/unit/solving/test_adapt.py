"""Built-in solution adapters and loading user adapters by dotted path."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path

import pytest
from pydantic import BaseModel

from ape.schemas.config import AdapterConfig
from ape.schemas.errors import ApeError
from ape.tasks.solving.adapt import JsonAdapter, extract_json, load_adapter, parse_number


def adapter(name: str, **args):
    # a config folder without a "tests" package beside it, so this module imports as itself
    return load_adapter(AdapterConfig(implementation=name, args=args), Path(__file__).parent)


def plugin(tmp_path: Path, source: str) -> str:
    """Write a throwaway module beside a 'config' in tmp_path; return its import name."""
    name = f"plug_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(source)
    return name


def test_raw_and_strip():
    assert adapter("raw")("  a \n") == "  a \n"
    assert adapter("strip")("  a \n") == "a"


def test_regex_group_flags_and_last_match():
    first = adapter("regex", pattern=r"answer:\s*(\w+)", flags="IGNORECASE")
    assert first("Answer: cat ... ANSWER: dog") == "cat"
    last = adapter("regex", pattern=r"answer:\s*(?P<word>\w+)", group="word", flags=["I"], last=True)
    assert last("Answer: cat ... ANSWER: dog") == "dog"
    whole = adapter("regex", pattern=r"\d+")
    assert whole("abc 123") == "123"  # no group: the whole match
    with pytest.raises(ValueError, match="does not match"):
        first("nothing here")


@pytest.mark.parametrize(
    "args, message",
    [
        ({"pattern": "("}, "invalid regular expression"),
        ({"pattern": "(a)", "group": 2}, "group 2 does not exist"),
        ({"pattern": "(a)", "group": "x"}, "no group named 'x'"),
        ({"pattern": "a", "flags": "IGNORCASE"}, "did you mean 'IGNORECASE'"),
        ({"pattern": "a", "patern": "b"}, "patern"),
        ({}, "pattern"),
    ],
)
def test_regex_bad_options_name_the_problem(args, message):
    with pytest.raises(ApeError) as info:
        adapter("regex", **args)
    assert info.value.where == "[adapter] args"
    assert message in str(info.value)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is 42.", 42),
        ("1,234,567 apples", 1234567),
        ("costs -3.50 dollars", -3.5),
        ("first 1 then 2.0", 2),
        ("ratio .25", 0.25),
        ("big 1e3", 1000),
        ("v2 then 12345678901234567890", 12345678901234567890),
    ],
)
def test_last_number(text, expected):
    value = adapter("last_number")(text)
    assert value == expected and type(value) is type(expected)


def test_last_number_without_number_fails():
    with pytest.raises(ValueError, match="no number"):
        adapter("last_number")("forty-two")
    with pytest.raises(ValueError, match="finite"):
        parse_number("1e999")


def test_json_extraction_from_fences_prose_and_plain_text():
    assert extract_json('Here:\n```json\n{"a": 1}\n```\nbye') == {"a": 1}
    assert extract_json("```\n[1, 2]\n```") == [1, 2]
    assert extract_json('I think {"b": [1, {"c": 2}]} is right') == {"b": [1, {"c": 2}]}
    assert extract_json(' {"x": null} ') == {"x": None}
    assert extract_json('broken {"a": } then {"ok": true}') == {"ok": True}
    with pytest.raises(ValueError, match="no valid JSON"):
        extract_json("no json {here")


class Point(BaseModel):
    x: int
    y: int


def test_json_into_a_pydantic_model():
    parse = adapter("json", model=f"{__name__}:Point")
    assert parse('```json\n{"x": 1, "y": 2}\n```') == Point(x=1, y=2)
    with pytest.raises(ValueError, match=r"does not fit Point: y: Field required"):
        parse('{"x": 1}')
    assert pickle.loads(pickle.dumps(parse))('{"x": 3, "y": 4}') == Point(x=3, y=4)


def test_json_with_a_bad_model_path_fails_at_load_time():
    with pytest.raises(ApeError) as info:
        adapter("json", model=f"{__name__}:Pointt")
    assert info.value.where == "[adapter] args.model" and "Point" in str(info.value)
    with pytest.raises(ApeError, match="not a pydantic model"):
        adapter("json", model=f"{__name__}:adapter")


def test_unknown_builtin_suggests_the_near_name():
    with pytest.raises(ApeError) as info:
        adapter("last_numbr")
    assert info.value.where == "[adapter] implementation"
    assert info.value.hint == "did you mean 'last_number'?"


def test_builtins_pickle():
    for built in (adapter("raw"), adapter("regex", pattern="(a+)"), adapter("last_number")):
        assert pickle.loads(pickle.dumps(built))("xaay 3") == built("xaay 3")


def test_user_function_with_args(tmp_path):
    name = plugin(tmp_path, "def shout(text, suffix='!'):\n    return text.upper() + suffix\n")
    plain = load_adapter(AdapterConfig(implementation=f"{name}:shout"), tmp_path)
    assert plain("hi") == "HI!"
    bound = load_adapter(AdapterConfig(implementation=f"{name}.shout", args={"suffix": "?"}), tmp_path)
    assert bound("hi") == "HI?"


def test_user_class_is_instantiated_with_args(tmp_path):
    source = (
        "class Prefix:\n"
        "    def __init__(self, prefix):\n        self.prefix = prefix\n"
        "    def __call__(self, text):\n        return self.prefix + text\n"
        "class NotCallable:\n    pass\n"
    )
    name = plugin(tmp_path, source)
    made = load_adapter(AdapterConfig(implementation=f"{name}:Prefix", args={"prefix": ">"}), tmp_path)
    assert made("x") == ">x"
    with pytest.raises(ApeError, match="calling adapter") as info:
        load_adapter(AdapterConfig(implementation=f"{name}:Prefix"), tmp_path)
    assert info.value.where == "[adapter] args"
    with pytest.raises(ApeError, match="not callable"):
        load_adapter(AdapterConfig(implementation=f"{name}:NotCallable"), tmp_path)


def test_user_pydantic_model_parses_json(tmp_path):
    name = plugin(tmp_path, "from pydantic import BaseModel\nclass Sol(BaseModel):\n    n: int\n")
    parse = load_adapter(AdapterConfig(implementation=f"{name}:Sol"), tmp_path)
    assert isinstance(parse, JsonAdapter)
    assert parse('{"n": 5}').n == 5


def test_user_path_errors(tmp_path):
    name = plugin(tmp_path, "VALUE = 3\n")
    with pytest.raises(ApeError, match="not a function") as info:
        load_adapter(AdapterConfig(implementation=f"{name}:VALUE"), tmp_path)
    assert info.value.where == "[adapter] implementation"
    with pytest.raises(ApeError, match="no attribute"):
        load_adapter(AdapterConfig(implementation=f"{name}:missing"), tmp_path)
