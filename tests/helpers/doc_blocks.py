"""The fenced code blocks of the README and the docs pages, and how each kind is checked.

Every block is checked by its language, so a documented example cannot drift from the code:

- ``toml``: parses; a whole config validates as :class:`ApeConfig`, a snippet validates
  section by section (keys and values must be right; keys a snippet leaves out may be
  missing), and a built-in adapter's or checker's ``args`` validate against that built-in;
- ``bash`` (``sh``, ``shell``, ``console``): every ``ape`` / ``python -m ape`` command parses
  with APE's own argument parser, repository paths and ``pip install`` extras exist, a
  benchmark script's flags appear in that script, and only known programs are called;
- ``python``: compiles, uses only names ``ape`` exports, and runs when its top level only
  imports and defines (a plugin module);
- ``json``: parses (a JSON value, or JSON Lines);
- ``text``: output, trees and error lines, not checked here.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import shlex
import tomllib
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from tests.helpers.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"
LANGUAGES = {"toml", "bash", "sh", "shell", "console", "python", "json", "text"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")
# programs a documented shell line may call besides ape and python
PROGRAMS = {
    "pip",
    "prefect",
    "apt-get",
    "sudo",
    "eval",
    ".",
    "source",
    "cd",
    "export",
    "umask",
    "git",
    "mkdir",
    "cp",
    "chmod",
    "openssl",
    "dask",
}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def documents() -> list[Path]:
    """README.md and every page of the docs site."""
    return [REPO_ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def blocks(path: Path) -> Iterator[Block]:
    """The fenced blocks of one markdown file, dedented by their fence's indentation."""
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if opened is None:
            index += 1
            continue
        indent, fence, info = opened.group("indent"), opened.group("fence"), opened.group("info").strip()
        body: list[str] = []
        start = index + 1
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            line = lines[index]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            index += 1
        index += 1
        yield Block(path, start, info.split()[0] if info else "", "\n".join(body) + "\n")


def all_blocks() -> list[Block]:
    return [block for path in documents() for block in blocks(path)]


# ------------------------------------------------------------------ TOML


def check_toml(block: Block) -> None:
    from ape.schemas.config import ApeConfig

    raw = tomllib.loads(block.text)
    if {"data", "prompt", "model"} <= raw.keys() and ({"checker", "choices"} & raw.keys()):
        _valid(ApeConfig, raw, block, partial=False)
        _check_builtin_args(raw, block)
        return
    for key, value in raw.items():
        field = _field_by_key(ApeConfig, key)
        assert field is not None, f"{block.where}: [{key}] is not a config section or top-level key"
        _check_section(field.annotation, value, block, key)
    _check_builtin_args(raw, block)


def _field_by_key(model: type[BaseModel], key: str) -> Any:
    return next((f for n, f in model.model_fields.items() if (f.alias or n) == key), None)


def _check_section(annotation: Any, value: Any, block: Block, key: str) -> None:
    from ape.config_schema import section_model

    model = section_model(annotation)
    if model is None:  # a top-level scalar such as name
        return
    if key == "tools":
        for table in value.values():
            _valid(model, table, block, partial=True)
    elif isinstance(value, list):
        for table in value:
            _valid(model, table, block, partial=True)
    else:
        _valid(model, value, block, partial=True)


def _valid(model: type[BaseModel], value: Any, block: Block, *, partial: bool) -> None:
    try:
        model.model_validate(value)
    except ValidationError as exc:
        problems = [e for e in exc.errors() if not (partial and e["type"] == "missing")]
        assert not problems, f"{block.where}: {model.__name__}: " + "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in problems
        )


def _check_builtin_args(raw: dict[str, Any], block: Block) -> None:
    """``[adapter] args`` and ``[checker] args`` of a built-in, validated by that built-in."""
    from ape.schemas.errors import ApeError
    from ape.tasks.checking.builtin import builtin_checker
    from ape.tasks.checking.judge import parse_args
    from ape.tasks.checking.metrics import METRICS
    from ape.tasks.plugins.registry import is_short_name
    from ape.tasks.solving.adapt import builtin_adapter

    adapter, checker = raw.get("adapter") or {}, raw.get("checker") or {}
    try:
        name = adapter.get("implementation")
        if isinstance(name, str) and is_short_name(name):
            builtin_adapter(name, adapter.get("args") or {})
        name = checker.get("implementation")
        if name in METRICS:
            builtin_checker(name, checker.get("args") or {})
        elif name == "judge" and "args" in checker:
            parse_args(checker["args"])
    except ApeError as exc:
        raise AssertionError(f"{block.where}: {exc}") from None


# ------------------------------------------------------------------ shell


def commands(text: str) -> Iterator[list[str]]:
    """Each simple command of a shell block as its words: continuation lines joined,
    comments dropped, ``&&``/``||``/``;``/``|`` split, ``$(...)`` inside a word included."""
    script = re.sub(r"\\\n", " ", text)
    for line in script.splitlines():
        line = re.sub(r"^\$ ", "", line.strip())
        if not line or line.startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for token in lexer:
            if set(token) <= set(";&|"):
                if words:
                    yield words
                words = []
                continue
            for inner in re.findall(r"\$\(([^)]*)\)", token):
                yield from commands(inner)
            words.append(token)
        if words:
            yield words


def check_shell(block: Block) -> None:
    for words in commands(block.text):
        while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
            words = words[1:]  # VAR=value before the command
        if not words:
            continue
        check_command(words, block)


def check_command(words: list[str], block: Block) -> None:
    where = f"{block.where}: `{' '.join(words)}`"
    program = words[0]
    if program == "ape":
        _check_ape(words[1:], where)
    elif program in ("python", "python3"):
        _check_python(words[1:], where)
    elif program == "pip":
        _check_pip(words[1:], where)
    else:
        assert program in PROGRAMS, f"{where}: '{program}' is not a program the docs may call"


def _check_ape(args: list[str], where: str) -> None:
    from ape import cli

    first = next((a for a in args if not a.startswith("-")), None)
    if first is not None and first not in cli.COMMANDS:
        args = [*args[: args.index(first)], "run", *args[args.index(first) :]]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            cli.build_parser().parse_args(args)
    except SystemExit:
        raise AssertionError(f"{where}: the ape argument parser refused it: {err.getvalue().strip()}") from None
    for arg in args:
        _check_repo_path(arg, where)


def _check_python(args: list[str], where: str) -> None:
    if args[:2] == ["-m", "ape"]:
        _check_ape(args[2:], where)
    elif args[:1] == ["-m"]:
        module = args[1]
        assert re.fullmatch(r"[\w.]+", module), where
        for arg in args[2:]:
            _check_repo_path(arg, where)
    elif args and args[0].endswith(".py"):
        script = REPO_ROOT / args[0]
        assert script.is_file(), f"{where}: {args[0]} does not exist"
        source = script.read_text(encoding="utf-8")
        for flag in (a.split("=")[0] for a in args[1:] if a.startswith("--")):
            assert f'"{flag}"' in source, f"{where}: {args[0]} has no option {flag}"


def _check_pip(args: list[str], where: str) -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(pyproject["project"]["optional-dependencies"])
    for arg in args:
        found = re.fullmatch(r"\.\[([\w,-]+)\]", arg)
        if found:
            missing = set(found.group(1).split(",")) - extras
            assert not missing, f"{where}: no extra {sorted(missing)} in pyproject.toml"


def _check_repo_path(arg: str, where: str) -> None:
    """An argument that names a file of this repository must exist."""
    if re.match(r"^(examples|benchmarks|deployments|tests|docs|schemas)/", arg):
        assert (REPO_ROOT / arg).exists(), f"{where}: {arg} does not exist"


# ------------------------------------------------------------------ python


def check_python(block: Block) -> None:
    import ape

    tree = ast.parse(block.text, filename=block.where)
    exported = set(ape.__all__)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "ape":
            unknown = [a.name for a in node.names if a.name not in exported]
            assert not unknown, f"{block.where}: ape does not export {unknown}"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ape":
            assert node.attr in exported, f"{block.where}: ape.{node.attr} does not exist"
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ape."):
            module = __import__(node.module, fromlist=["_"])
            for alias in node.names:
                assert hasattr(module, alias.name), f"{block.where}: {node.module} has no {alias.name}"
    if _only_definitions(tree):
        module = types.ModuleType("docs_example")
        exec(compile(tree, block.where, "exec"), module.__dict__)  # noqa: S102 - the docs' own examples


def _only_definitions(tree: ast.Module) -> bool:
    """Imports, classes, functions, plain assignments and docstrings: safe and cheap to run."""
    kinds = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef, ast.Assign, ast.AnnAssign)
    return all(
        isinstance(node, kinds) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        for node in tree.body
    )


# ------------------------------------------------------------------ json


def check_json(block: Block) -> None:
    try:
        json.loads(block.text)
    except json.JSONDecodeError:
        for number, line in enumerate(block.text.splitlines(), start=1):
            if line.strip():
                try:
                    json.loads(line)
                except json.JSONDecodeError as exc:
                    raise AssertionError(f"{block.where} (+{number}): not JSON: {exc}") from None


CHECKS = {
    "toml": check_toml,
    "bash": check_shell,
    "sh": check_shell,
    "shell": check_shell,
    "console": check_shell,
    "python": check_python,
    "json": check_json,
}
