"""Layers import only downward: ape (commands, API) -> deployments / flows -> tasks -> schemas.

Every import of an ``ape.*`` module in the product code is read from the source (also
the ones inside functions), so a lower layer reaching up is caught even when it only
happens on one code path.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# folder -> (package, layer); a module may import its own layer and the ones below
LAYERS = {
    "schemas": ("ape.schemas", 0),
    "tasks": ("ape.tasks", 1),
    "flows": ("ape.flows", 2),
    "deployments": ("ape.deployments", 2),
    "ape": ("ape", 3),
}


def _layer_of(module: str) -> int:
    for package, layer in sorted(LAYERS.values(), key=lambda pl: -len(pl[0])):
        if module == package or module.startswith(package + "."):
            return layer
    raise AssertionError(f"not an ape module: {module}")


def _imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every ape import in ``path``, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "ape"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module.split(".")[0] == "ape":
                found.append((node.lineno, module))
    return found


def _sources() -> list[tuple[Path, str, int]]:
    sources = []
    for folder, (package, layer) in LAYERS.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            sources.append((path, package, layer))
    return sources


@pytest.mark.parametrize(("path", "package", "layer"), _sources(), ids=lambda v: getattr(v, "name", None))
def test_no_module_imports_a_layer_above_its_own(path, package, layer):
    upward = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for line, module in _imports(path, package)
        if _layer_of(module) > layer
    ]
    assert not upward, "\n".join(upward)


def test_the_layer_check_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from ape.flows.plan import make_plan\n    from . import sibling\n")
    found = _imports(source, "ape.tasks")
    assert (2, "ape.flows.plan") in found and (3, "ape.tasks") in found
    assert _layer_of("ape.flows.plan") > LAYERS["tasks"][1]
