"""Built-in names: one registry, did-you-mean on a miss, a clear error for a module that is not there."""

from __future__ import annotations

from pathlib import Path

import pytest

from ape.schemas.errors import ApeError
from ape.schemas.taskspec import METRIC_NAMES, POSTPROCESS_NAMES
from ape.tasks.plugins.loader import load_object
from ape.tasks.plugins.registry import BUILTINS, names, resolve
from tests.helpers.paths import REPO_ROOT


@pytest.mark.parametrize("kind", list(BUILTINS))
def test_every_builtin_name_resolves_to_an_object(kind):
    for name in names(kind):
        if kind == "provider" and not resolve(kind, name).startswith(("ape.", "langchain_openai")):
            continue  # integrations of other providers are optional packages
        assert load_object(name, kind=kind) is not None, (kind, name)


def test_the_registry_matches_the_implementations():
    from ape.tasks.checking.metrics import METRICS
    from ape.tasks.checking.taskspec import POSTPROCESSORS

    # choice: log-likelihood runs; sandbox_state: agent sessions (graded in the session)
    assert set(names("checker")) == {*METRICS, "taskspec", "judge", "choice", "sandbox_state"}
    assert set(METRIC_NAMES) <= set(METRICS)
    assert set(names("postprocess")) == set(POSTPROCESS_NAMES) == set(POSTPROCESSORS)


def test_short_names_used_by_configs():
    from ape.schemas.taskspec import TaskSpec
    from ape.tasks.checking.taskspec import TaskSpecChecker
    from ape.tasks.models.mocks.demo_adapters import RuleBasedAdapter

    assert load_object("taskspec", kind="schema") is TaskSpec
    assert load_object("rule-based", kind="model") is RuleBasedAdapter
    assert load_object("rule_based", kind="model") is RuleBasedAdapter  # - and _ alike
    assert load_object("taskspec", kind="checker") is TaskSpecChecker
    assert load_object("calculator", kind="tool").__name__ == "calculator"


def test_a_misspelt_name_gets_did_you_mean():
    with pytest.raises(ApeError) as info:
        load_object("calculater", kind="tool", where="[tools.calc] factory")
    assert info.value.where == "[tools.calc] factory"
    assert "not a built-in tool" in info.value.message and "calculator" in (info.value.hint or "")
    with pytest.raises(ApeError, match="built-ins are raw, strip, regex"):
        resolve("adapter", "lastnumber")


def test_a_module_path_from_before_the_split_is_a_clear_error():
    with pytest.raises(ApeError) as info:
        load_object("ape.tasks.tools:calculator", kind="tool", where="[tools.calc] factory")
    assert info.value.where == "[tools.calc] factory"
    assert info.value.message == (
        "cannot import module 'ape.tasks.tools' of 'ape.tasks.tools:calculator': no module named 'ape.tasks.tools'"
    )
    with pytest.raises(ApeError, match="^cannot import module 'tasks.tools' of 'tasks.tools:calculator'"):
        load_object("tasks.tools:calculator")


def test_a_folder_beside_the_config_named_like_an_ape_package_wins(tmp_path: Path):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "__init__.py").write_text("")
    (tmp_path / "tasks" / "tools.py").write_text("def calculator():\n    return 'mine'\n")
    factory = load_object("tasks.tools:calculator", base_dir=tmp_path)
    assert factory() == "mine"


def test_config_with_short_names_validates(capsys):
    from ape.cli import main

    root = REPO_ROOT
    assert main(["validate", str(root / "examples" / "demo" / "config.toml")]) == 0
    assert "ok:" in capsys.readouterr().out


def test_plugin_that_exits_on_import_is_one_clear_error(tmp_path: Path):
    (tmp_path / "bad.py").write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(ApeError) as info:
        load_object("bad:Thing", where="[data] schema", base_dir=tmp_path)
    assert "importing 'bad' of 'bad:Thing' exited with status 3" in info.value.message


def test_a_sibling_import_gets_a_hint(tmp_path: Path):
    (tmp_path / "helpers.py").write_text("X = 1\n")
    (tmp_path / "plugin.py").write_text("import helpers\n")
    with pytest.raises(ApeError) as info:
        load_object("plugin:X", base_dir=tmp_path)
    assert "from . import helpers" in (info.value.hint or "")
    (tmp_path / "plugin2.py").write_text("from .helpers import X\n")
    assert load_object("plugin2:X", base_dir=tmp_path) == 1


def test_the_public_api_lists_every_export():
    import ape

    assert set(ape.__all__) == {*ape._EXPORTS, "__version__"}
    for name in ape._EXPORTS:
        assert getattr(ape, name) is not None
