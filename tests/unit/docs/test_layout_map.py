"""The plan is kept true: the layout map of docs/development.md names every product module,
every package says its job in a docstring, and no function is over 80 lines.

The map is the newcomer's plan of the house; a module it does not name, or a package with no
docstring, is a room nobody can find. The map is the ``text`` block under ``## Layout``: a line
that starts with a folder name (``tasks/``, ``  models/``, ``    code/``; two spaces a level)
opens that folder's part, and a module is named when its file name without ``.py`` stands as
a word in its own folder's part.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers.paths import REPO_ROOT

PRODUCT = ("ape", "schemas", "tasks", "flows", "deployments")
# folders under ape/ that are links to the top-level ones (read there, not twice)
LINKED = {"tasks", "flows", "schemas", "deployments", "examples"}
LONGEST = 80
# code kept whole, and why. The agent sandbox's command runner starts a namespace and waits on
# it as one unit. (The code sandbox's harness is held to the limit too: its main keeps the
# guard's order as a short line of named steps, then the test loop.)
WHOLE = {
    "tasks/agent/sandbox.py": "the agent sandbox: a command's namespace started and waited on as one unit",
}
HEADER = re.compile(r"^( *)([a-z_]+)/(?=\s|$)")


def _product_files() -> list[Path]:
    files: list[Path] = []
    for top in PRODUCT:
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            rel = path.relative_to(REPO_ROOT)
            if top == "ape" and len(rel.parts) > 2 and rel.parts[1] in LINKED:
                continue
            if "__pycache__" in rel.parts:
                continue
            files.append(rel)
    return files


def _layout_parts() -> dict[str, str]:
    """Folder (``tasks/checking/code``) -> the text of its part of the map."""
    text = (REPO_ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    block = text.split("## Layout", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    parts: dict[str, str] = {}
    stack: list[str] = []
    current = ""
    for line in block.splitlines():
        match = HEADER.match(line)
        if match:
            depth = len(match.group(1)) // 2
            stack = [*stack[:depth], match.group(2)]
            current = "/".join(stack)
            line = line[match.end() :]
        parts[current] = parts.get(current, "") + " " + line
    return parts


def test_every_product_module_is_named_in_the_layout_map() -> None:
    parts = _layout_parts()
    missing = []
    for rel in _product_files():
        if rel.name == "__init__.py":
            continue
        folder = rel.parent.as_posix()
        named = re.search(rf"(?<![\w.]){re.escape(rel.stem)}(?![\w])", parts.get(folder, ""))
        if not named:
            missing.append(rel.as_posix())
    assert not missing, f"docs/development.md's layout map does not name {len(missing)} modules: {missing}"


def test_every_package_has_a_docstring() -> None:
    bare = [
        rel.as_posix()
        for rel in _product_files()
        if rel.name == "__init__.py" and not ast.get_docstring(ast.parse((REPO_ROOT / rel).read_text(encoding="utf-8")))
    ]
    assert not bare, f"packages without a docstring saying their job: {bare}"


def test_no_function_is_over_80_lines() -> None:
    long = []
    for rel in _product_files():
        if rel.as_posix() in WHOLE:
            continue
        tree = ast.parse((REPO_ROOT / rel).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONGEST:
                    long.append(f"{rel.as_posix()}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"functions over {LONGEST} lines (split them into named helpers): {long}"


def test_the_map_reader_finds_the_folders() -> None:
    """The reader above would pass a map it cannot read; it must see the folders it checks."""
    parts = _layout_parts()
    for folder in ("ape", "schemas", "tasks/models", "tasks/checking/code", "flows", "deployments"):
        assert parts.get(folder, "").strip(), f"the layout map has no part for {folder}/"
