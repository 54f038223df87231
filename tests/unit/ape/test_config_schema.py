"""``ape schema``: the JSON Schema of config.toml that TOML editors read through a ``#:schema``
line. The copy in the repository equals what ``ape schema`` writes, every shipped example
points at it and validates against it, and it rejects what the loader rejects."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest

from ape import cli
from ape.config_schema import SCHEMA_PATH, json_schema, schema_text
from tests.helpers.paths import REPO_ROOT

EXAMPLES = sorted((REPO_ROOT / "examples").rglob("*.toml"))
REGENERATE = "python -m ape schema --output schemas/config.schema.json"


def _validator() -> jsonschema.Draft202012Validator:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_committed_schema_is_what_ape_schema_writes():
    committed = (REPO_ROOT / "schemas" / "config.schema.json").read_text(encoding="utf-8")
    assert committed == schema_text(), f"the config models changed: run `{REGENERATE}`"
    assert SCHEMA_PATH.resolve() == (REPO_ROOT / "schemas" / "config.schema.json").resolve()


def test_ape_schema_prints_it_and_writes_it(tmp_path, capsys):
    assert cli.main(["schema"]) == 0
    assert capsys.readouterr().out == schema_text()
    target = tmp_path / "nested" / "config.schema.json"
    assert cli.main(["schema", "--output", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == schema_text()
    assert "#:schema" in capsys.readouterr().out


def test_the_schema_is_installed_with_the_package():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "*.json" in pyproject["tool"]["setuptools"]["package-data"]["ape.schemas"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_example_points_at_the_schema_and_validates(example: Path):
    first = example.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("#:schema "), f"{example}: add '#:schema ../../schemas/config.schema.json' as line 1"
    target = (example.parent / first.removeprefix("#:schema ").strip()).resolve()
    assert target == SCHEMA_PATH.resolve(), f"{example}: #:schema points at {target}"
    errors = [e.message for e in _validator().iter_errors(tomllib.loads(example.read_text(encoding="utf-8")))]
    assert errors == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda c: c["checker"].update(implmentation="f1"), "'implmentation' was unexpected"),
        (lambda c: c["run"].update(solver_workers=0), "less than the minimum"),
        (lambda c: c["run"].update(task_runner="threads"), "is not one of"),
        (lambda c: c["run"].update(load_save="yes"), "is not of type 'boolean'"),
        (lambda c: c.pop("data"), "'data' is a required property"),
        (lambda c: c.update(base_dir="/elsewhere"), "'base_dir' was unexpected"),
    ],
)
def test_the_schema_rejects_what_the_loader_rejects(change, problem):
    config = tomllib.loads((REPO_ROOT / "examples" / "arithmetic" / "config.toml").read_text(encoding="utf-8"))
    change(config)
    messages = [e.message for e in _validator().iter_errors(config)]
    assert any(problem in m for m in messages), messages


def test_one_model_table_or_an_array_of_them():
    config = tomllib.loads((REPO_ROOT / "examples" / "arithmetic" / "config.toml").read_text(encoding="utf-8"))
    config["model"] = config["model"][0]  # [model] instead of [[model]]
    assert list(_validator().iter_errors(config)) == []
    assert json.loads(schema_text())["title"] == "APE config.toml"


def test_a_task_config_needs_no_data_prompt_or_checker():
    config = {"task": {"lm_eval": "gsm8k"}, "model": {"name": "m", "provider": "mock"}}
    assert [e.message for e in _validator().iter_errors(config)] == []
    config.pop("task")  # without [task], [data], [prompt] and a checker are required again
    messages = [e.message for e in _validator().iter_errors(config)]
    assert any("'data' is a required property" in m for m in messages), messages
    assert any("'prompt' is a required property" in m for m in messages), messages
