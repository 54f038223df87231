"""The tree on disk is the import tree: a static tool resolves ``ape.tasks...`` from the checkout.

jedi (the engine behind go-to-definition in many editors) reads the source tree without
importing it; before ``ape/tasks`` and its siblings were links to the top-level folders it
found no definition for any ``ape.tasks`` import.
"""

from __future__ import annotations

import pytest

from tests.helpers.paths import REPO_ROOT

jedi = pytest.importorskip("jedi", reason="jedi is in the dev extra")


@pytest.mark.parametrize(
    ("source", "defined_in"),
    [
        ("from ape.tasks.stats.power import items_needed", "tasks/stats/power.py"),
        ("from ape.tasks.checking.code.sandbox import resolve", "tasks/checking/code/sandbox.py"),
        ("from ape.flows.benchmark import benchmark", "flows/benchmark.py"),
        ("from ape.schemas.config import ApeConfig", "schemas/config.py"),
    ],
)
def test_jedi_finds_the_definition_in_the_checkout(source, defined_in):
    project = jedi.Project(REPO_ROOT, smart_sys_path=True)
    script = jedi.Script(source, path=REPO_ROOT / "probe.py", project=project)
    names = script.goto(1, len(source) - 1, follow_imports=True)
    assert names, f"jedi resolved nothing for {source!r}"
    assert names[0].module_path is not None
    assert names[0].module_path.resolve() == (REPO_ROOT / defined_in).resolve()
