"""Loading tools from [tools.X] sections, and the built-in calculator."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from langchain_core.tools import BaseTool

from ape.schemas.config import ToolConfig
from ape.schemas.errors import ApeError
from ape.tasks.common.arithmetic import calculate
from ape.tasks.solving.tools import calculator, load_tools

FACTORIES = '''
from langchain_core.tools import tool

@tool
def echo(text: str) -> str:
    """Repeat the text."""
    return text

@tool
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper()

def one():
    return echo

def many(upper=True):
    return [echo, shout] if upper else [echo]

class Counter:
    """A ToolProvider whose tool keeps a count: state per loaded instance."""
    def __init__(self, start=0):
        self.count = start
    def get_tool(self):
        @tool
        def count() -> int:
            """Count calls."""
            self.count += 1
            return self.count
        return count

def provider(start=0):
    return Counter(start)

def mixed():
    return [Counter(10), shout]

def wrong():
    return "not a tool"

def empty():
    return []

def broken():
    raise RuntimeError("no licence")

NOT_CALLABLE = 3
'''


@pytest.fixture()
def module(tmp_path: Path) -> tuple[str, Path]:
    name = f"plug_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(FACTORIES)
    return name, tmp_path


def load(module: tuple[str, Path], **sections: tuple[str, dict]) -> list[BaseTool]:
    name, base = module
    cfg = {key: ToolConfig(factory=f"{name}:{attr}", args=args) for key, (attr, args) in sections.items()}
    return load_tools(cfg, base)


def test_factories_returning_a_tool_a_list_or_a_provider(module):
    tools = load(module, a=("one", {}), c=("provider", {"start": 5}))
    assert [t.name for t in tools] == ["echo", "count"]
    assert all(isinstance(t, BaseTool) for t in tools)
    assert [t.name for t in load(module, b=("many", {}))] == ["echo", "shout"]
    assert [t.name for t in load(module, b=("many", {"upper": False}))] == ["echo"]


def test_each_load_gets_fresh_stateful_tools(module):
    (first,) = load(module, c=("provider", {"start": 5}))
    (second,) = load(module, c=("provider", {"start": 5}))
    assert first.invoke({}) == 6 and first.invoke({}) == 7
    assert second.invoke({}) == 6  # another worker's tool has its own state


def test_list_may_mix_tools_and_providers_and_a_tool_may_be_named_directly(module):
    assert [t.name for t in load(module, m=("mixed", {}))] == ["count", "shout"]
    assert [t.name for t in load(module, d=("echo", {}))] == ["echo"]
    with pytest.raises(ApeError, match="is a tool, not a factory"):
        load(module, d=("echo", {"x": 1}))


def test_duplicate_tool_names_are_rejected(module):
    with pytest.raises(ApeError, match="'echo' is used twice") as info:
        load(module, a=("one", {}), b=("many", {}))
    assert info.value.where == "[tools.b] factory"


@pytest.mark.parametrize(
    "attr, args, message",
    [
        ("wrong", {}, "returned a str"),
        ("empty", {}, "returned no tools"),
        ("broken", {}, "RuntimeError: no licence"),
        ("many", {"loud": True}, "unexpected keyword argument 'loud'"),
        ("NOT_CALLABLE", {}, "not a callable"),
        ("missing", {}, "no attribute 'missing'"),
    ],
)
def test_bad_factories_name_their_section(module, attr, args, message):
    with pytest.raises(ApeError) as info:
        load(module, search=(attr, args))
    assert info.value.where == "[tools.search] factory"
    assert message in str(info.value)


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("2 + 3 * 4", 14),
        ("(1 + 2) ** 3", 27),
        ("7 // 2 + 7 % 2", 4),
        ("-sqrt(16)", -4.0),
        ("max(1, 5, 3) / 2", 2.5),
        ("round(pi, 2)", 3.14),
    ],
)
def test_calculator_arithmetic(expression, expected):
    assert calculate(expression) == expected


@pytest.mark.parametrize(
    "expression, message",
    [
        ("__import__('os').system('true')", "unsupported element"),
        ("open('x')", "unsupported element"),
        ("(1).__class__", "unsupported element"),
        ("9 ** 9 ** 9", "too large"),
        ("(10 ** 900) ** 900", "too large"),
        ("1 +", "not an arithmetic expression"),
        ("'a' * 3", "unsupported element"),
        ("(-8) ** 0.5", "not a real number"),
        ("1" * 600, "longer than"),
    ],
)
def test_calculator_refuses_anything_else(expression, message):
    with pytest.raises(ValueError, match=message):
        calculate(expression)


def test_calculator_tool():
    tool = calculator()
    assert tool.name == "calculator" and "expression" in tool.args
    assert tool.invoke({"expression": "1/4 * 8"}) == "2"
    assert calculator(name="calc").name == "calc"
    with pytest.raises(ZeroDivisionError):
        tool.invoke({"expression": "1/0"})


def test_calculator_loads_by_dotted_path():
    tools = load_tools({"calc": ToolConfig(factory="ape.tasks.solving.tools:calculator")}, Path("."))
    assert [t.name for t in tools] == ["calculator"]
