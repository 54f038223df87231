"""Layers import only downward: ape (commands, API) -> deployments / flows -> tasks -> schemas,
and inside ``ape.tasks`` from the task wrappers down through its sub-packages by job.

Every import of an ``ape.*`` module in the product code is read from the source (also
the ones inside functions), so a lower layer reaching up is caught even when it only
happens on one code path. The order inside ``ape.tasks`` is the one its package
docstring gives.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT

# package -> layer; a module may import its own package's layer and the ones below
LAYERS = {
    "ape.schemas": 0,
    "ape.tasks.common": 1,
    "ape.tasks.plugins": 2,
    "ape.tasks.storage": 3,
    "ape.tasks.stats": 4,
    "ape.tasks.models": 5,
    "ape.tasks.solving": 6,
    "ape.tasks.checking": 7,
    "ape.tasks.agent": 7,  # an agent session's sandbox, tools and grade (on checking.code's namespaces)
    "ape.tasks.report": 8,
    "ape.tasks.recording": 9,  # the run's mirror in the Prefect UI
    "ape.tasks.session": 10,  # one session's chain: its stages, their cache; reports to the mirror
    "ape.tasks.setup": 11,  # a run's setup, resolved once; the judge-agreement task
    "ape.tasks.after_run": 12,  # the report and history tasks and what they call
    "ape.tasks": 12,  # the package itself
    "ape.flows": 13,
    "ape.deployments": 13,
    "ape": 14,
}
# top-level folder of the repository -> the package it installs as
FOLDERS = {"schemas": "ape.schemas", "tasks": "ape.tasks", "flows": "ape.flows", "deployments": "ape.deployments"}


def _layer_of(module: str) -> int:
    for package in sorted(LAYERS, key=len, reverse=True):
        if module == package or module.startswith(package + "."):
            return LAYERS[package]
    raise AssertionError(f"not an ape module: {module}")


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` in ``package`` names, a relative one resolved."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every ape import in ``path``, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "ape"]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            if module.split(".")[0] == "ape":
                found.append((node.lineno, module))
    return found


def _package_of(path: Path) -> str:
    """The package a source file belongs to (``tasks/stats/power.py`` -> ``ape.tasks.stats``)."""
    relative = path.relative_to(REPO_ROOT)
    top = FOLDERS.get(relative.parts[0], "ape")
    return ".".join([top, *relative.parts[1:-1]])


def _sources() -> list[Path]:
    paths = sorted((REPO_ROOT / "ape").glob("*.py"))
    for folder in FOLDERS:
        paths += sorted((REPO_ROOT / folder).rglob("*.py"))
    return paths


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_module_imports_a_layer_above_its_own(path):
    package = _package_of(path)
    layer = _layer_of(package)
    upward = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {module}"
        for line, module in _imports(path, package)
        if _layer_of(module) > layer
    ]
    assert not upward, "\n".join(upward)


def test_every_sub_package_of_tasks_has_a_layer():
    packages = {f"ape.tasks.{p.name}" for p in (REPO_ROOT / "tasks").iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(LAYERS) | {"ape.tasks.checking.code"}, packages - set(LAYERS)


def test_the_layer_check_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from ape.tasks.setup.model import make_setup\n    from . import sibling\n")
    found = _imports(source, "ape.tasks.stats")
    assert (2, "ape.tasks.setup.model") in found and (3, "ape.tasks.stats") in found
    assert _layer_of("ape.tasks.setup.model") > _layer_of("ape.tasks.stats")
    assert _layer_of("ape.tasks.report.build") > _layer_of("ape.tasks.checking.code.sandbox")


def _module_name(path: Path) -> str:
    package = _package_of(path)
    return package if path.name == "__init__.py" else f"{package}.{path.stem}"


def _runtime_imports(path: Path, package: str, modules: set[str]) -> set[str]:
    """The APE modules ``path`` imports when it runs (inside functions too), not the ones
    only a type checker reads (``if TYPE_CHECKING:``); ``from ape.x import y`` counts as an
    import of the module ``ape.x.y`` when there is one."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    typing_only = {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for sub in ast.walk(stmt)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            named = {f"{module}.{alias.name}" for alias in node.names} & modules
            found |= named or ({module} & modules)
    return found


def _import_graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in _sources()}
    modules = set(paths)
    return {name: _runtime_imports(path, _package_of(path), modules) - {name} for name, path in paths.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan 1972), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles_not_even_inside_a_layer():
    """An import circle only works while one side imports inside a function; none is left."""
    assert _cycles(_import_graph()) == []


def test_the_cycle_check_finds_a_circle_through_a_function_level_import():
    graph = {"ape.a": {"ape.b"}, "ape.b": {"ape.c"}, "ape.c": {"ape.a"}, "ape.d": {"ape.a"}}
    assert _cycles(graph) == [["ape.a", "ape.b", "ape.c"]]
