"""Load the LangChain tools named in ``[tools.X]`` sections, plus small built-in tool factories.

Each ``[tools.X]`` section names a factory (``factory = "pkg.module:make_tool"``) called
with its ``args``. A factory may return a ``BaseTool``, a list of them, or a
``ToolProvider`` (an object with ``get_tool()``); the dotted path may also name a
``BaseTool`` directly (e.g. a function decorated with ``@tool``). Every solver worker
calls :func:`load_tools` once, so a stateful tool is private to its worker.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from ape.schemas.config import ToolConfig
from ape.schemas.errors import ApeError
from ape.schemas.models import ToolProvider
from ape.tasks.common.arithmetic import calculate
from ape.tasks.plugins.loader import call_plugin, load_object


def takes_sandbox(target: Any) -> bool:
    """Whether a tool factory has a ``sandbox`` parameter: it is then called once per session
    with that session's sandbox (:mod:`ape.tasks.agent.tools`)."""
    if isinstance(target, BaseTool) or not callable(target):
        return False
    try:
        return "sandbox" in inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False


def session_sections(tools: dict[str, ToolConfig], base_dir: Path) -> list[str]:
    """The ``[tools.X]`` sections whose factory takes the session's sandbox."""
    return [
        section
        for section, cfg in tools.items()
        if takes_sandbox(load_object(cfg.factory, kind="tool", where=f"[tools.{section}] factory", base_dir=base_dir))
    ]


def session_tools(tools: dict[str, ToolConfig], base_dir: Path, loaded: list[BaseTool], sandbox: Any) -> list[BaseTool]:
    """``loaded`` (the worker's tools, in section order) with the tools of every factory that
    takes a sandbox built afresh for this session's ``sandbox``; the others are kept as
    they are, so a stateful tool stays private to its worker, not to a session."""
    fresh: dict[str, BaseTool] = {}
    for section in session_sections(tools, base_dir):
        for tool in tools_from_section(section, tools[section], base_dir, sandbox=sandbox):
            fresh[tool.name] = tool
    return [fresh.get(tool.name, tool) for tool in loaded]


def load_tools(tools: dict[str, ToolConfig], base_dir: Path, sandbox: Any = None) -> list[BaseTool]:
    """Build every configured tool; tool names must be unique across all sections. A factory
    that takes a ``sandbox`` gets ``sandbox`` (None outside a session)."""
    loaded: list[BaseTool] = []
    owner: dict[str, str] = {}
    for section, cfg in tools.items():
        for tool in tools_from_section(section, cfg, base_dir, sandbox=sandbox):
            if tool.name in owner:
                raise ApeError(
                    f"tool name '{tool.name}' is used twice (also by [tools.{owner[tool.name]}]); "
                    "tool names must be unique",
                    where=f"[tools.{section}] factory",
                )
            owner[tool.name] = section
            loaded.append(tool)
    return loaded


def tools_from_section(section: str, cfg: ToolConfig, base_dir: Path, sandbox: Any = None) -> list[BaseTool]:
    """Call one section's factory and normalise what it returns to a list of tools."""
    where = f"[tools.{section}] factory"
    target = load_object(cfg.factory, kind="tool", where=where, base_dir=base_dir)
    if isinstance(target, BaseTool):
        if cfg.args:
            raise ApeError(
                f"'{cfg.factory}' is a tool, not a factory, so it takes no args; remove "
                f"[tools.{section}] args or point 'factory' at a function that builds the tool",
                where=where,
            )
        return [target]
    if not callable(target):
        raise ApeError(
            f"'{cfg.factory}' is a {type(target).__name__}, not a callable that returns tools",
            where=where,
        )
    args = {**cfg.args, "sandbox": sandbox} if takes_sandbox(target) else cfg.args
    produced = call_plugin(target, args, label=f"'{cfg.factory}'", where=where)
    return normalise_tools(produced, where=where)


def normalise_tools(produced: Any, *, where: str) -> list[BaseTool]:
    """Accept a BaseTool, a ToolProvider, or a list/tuple of either."""
    items = list(produced) if isinstance(produced, (list, tuple)) else [produced]
    result: list[BaseTool] = []
    for thing in items:
        if not isinstance(thing, BaseTool) and isinstance(thing, ToolProvider):
            thing = thing.get_tool()
        if not isinstance(thing, BaseTool):
            raise ApeError(
                f"the factory returned a {type(thing).__name__}; expected a LangChain BaseTool, "
                "a list of them, or an object with get_tool()",
                where=where,
            )
        result.append(thing)
    if not result:
        raise ApeError("the factory returned no tools", where=where)
    return result


# --- built-in tool: a safe calculator ---------------------------------------------------------


class CalculatorInput(BaseModel):
    expression: str = Field(description="An arithmetic expression, e.g. '(17 * 3) / 4 + sqrt(2)'.")


def _calculator_text(expression: str) -> str:
    value = calculate(expression)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    return str(value)


def calculator(name: str = "calculator") -> BaseTool:
    """Tool factory for ``[tools.calc] factory = "ape.tasks.solving.tools:calculator"``."""
    return StructuredTool.from_function(
        func=_calculator_text,
        name=name,
        description="Evaluate an arithmetic expression exactly and return the result. "
        "Supports + - * / // % **, parentheses, abs, round, min, max, sqrt, log, exp, floor, "
        "ceil, pi and e.",
        args_schema=CalculatorInput,
    )
