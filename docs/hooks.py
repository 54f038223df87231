"""mkdocs hooks: tables generated from APE's own code where a page asks for them, so the
docs cannot drift from it (mkdocs.yml names this file under ``hooks``).

A page asks with an HTML comment on a line of its own:

``<!-- ape:config-reference -->``
    every section of config.toml with its keys (``ape.config_schema.reference_markdown``);
``<!-- ape:fields module:Class -->``
    one pydantic model's keys, type, default, allowed values and description: a config
    section, a built-in's ``args``, a row of an output file (``<!-- ape:columns ... -->``
    gives only key, type and description, for rows of output files);
``<!-- ape:cli -->``
    every ``ape`` command with its arguments, read from the argument parser itself.

An unknown marker or a name that does not import fails the build: a strict build must not
publish a page with a hole in it.
"""

from __future__ import annotations

import argparse
import importlib
import re
from typing import Any

from pydantic import BaseModel

MARKER = re.compile(r"^<!-- ape:(?P<kind>[\w-]+)(?: (?P<arg>\S+))? -->$", re.MULTILINE)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """mkdocs event: replace every marker of the page with its table."""
    return render(markdown)


def render(markdown: str) -> str:
    """The page with each marker replaced (also used by the tests, without mkdocs)."""
    return MARKER.sub(lambda match: _expand(match.group("kind"), match.group("arg")), markdown)


def _expand(kind: str, arg: str | None) -> str:
    from ape.config_schema import fields_markdown, reference_markdown

    if kind == "config-reference":
        return reference_markdown()
    if kind in ("fields", "columns") and arg:
        return fields_markdown(model_named(arg), defaults=kind == "fields")
    if kind == "cli":
        return cli_markdown()
    raise ValueError(f"unknown docs marker 'ape:{kind}' (arg {arg!r})")


def model_named(path: str) -> type[BaseModel]:
    """The pydantic model ``module:Class`` names; ValueError when it is none."""
    module, _, name = path.partition(":")
    target = getattr(importlib.import_module(module), name)
    if not (isinstance(target, type) and issubclass(target, BaseModel)):
        raise ValueError(f"{path} is not a pydantic model")
    return target


def cli_markdown() -> str:
    """One section per ``ape`` command: its usage line and a table of its arguments."""
    from ape.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    blocks = []
    for name, command in sub.choices.items():
        usage = " ".join(command.format_usage().split())[len("usage: ") :]
        rows = []
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            flag = ", ".join(action.option_strings) or action.metavar or action.dest
            if isinstance(flag, tuple):
                flag = " ".join(flag)
            if action.choices and not action.option_strings:
                flag = "|".join(str(c) for c in action.choices)
            default = action.default
            shown = "" if default in (None, False, argparse.SUPPRESS) or action.required else f"`{default}`"
            rows.append(f"| `{flag}` | {_cell(action.help or '')} | {shown} |")
        table = "| argument | what it does | default |\n|---|---|---|\n" + "\n".join(rows)
        blocks.append(f"### `ape {name}`\n\n{_cell(helps.get(name) or '')}\n\n```text\n{usage}\n```\n\n{table}")
    return "\n\n".join(blocks) + "\n"


def _cell(text: str) -> str:
    text = " ".join(text.replace("%%", "%").split())
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
