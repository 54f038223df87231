"""Config loading: sections, defaults, path resolution and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from ape.config import load_config
from ape.schemas.errors import ApeError

BASE = """
[data]
file = "data.jsonl"
schema = "itemschema:Item"

[prompt]
template = "Q: {{ question }}"

[model]
provider = "mock"

[checker]
implementation = "exact_match"
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "data.jsonl").write_text('{"id": "a", "question": "1+1", "answer": "2"}\n')
    (tmp_path / "itemschema.py").write_text(
        "from pydantic import BaseModel\nclass Item(BaseModel):\n    id: str\n    question: str\n    answer: str\n"
    )
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_and_relative_paths(tmp_path):
    config = load_config(write(tmp_path, BASE))
    assert config.data.file == (tmp_path / "data.jsonl").resolve()
    assert config.run.output == (tmp_path / "output").resolve()
    assert config.run.load_save is True
    assert config.run.solver_workers >= 1 and config.run.runs_per_data == 1
    assert config.solver.solution_adaption_attempts >= 1
    assert "I_GIVE_UP" in config.solver.force_finish_prompt
    assert config.name == "config"
    assert len(config.model) == 1 and config.model[0].model_id == "mock"


def test_model_list_and_tools(tmp_path):
    text = (
        BASE.replace('[model]\nprovider = "mock"\n', "")
        + """
[[model]]
name = "a"
provider = "mock"

[[model]]
name = "b"
provider = "mock"

[tools.calc]
factory = "ape.tasks.solving.tools:calculator"
args = { precision = 3 }
"""
    )
    config = load_config(write(tmp_path, text))
    assert [m.model_id for m in config.model] == ["a", "b"]
    assert config.tools["calc"].args == {"precision": 3}
    assert config.output_dir_for(config.model[1]) == config.run.output / "b"


def test_unknown_key_names_file_line_and_suggests(tmp_path):
    path = write(tmp_path, BASE + "\n[run]\nsolver_wokers = 3\n")
    with pytest.raises(ApeError) as err:
        load_config(path)
    text = str(err.value)
    assert "unknown key 'solver_wokers'" in text
    assert "did you mean 'solver_workers'" in text
    assert str(path) in text and "[run.solver_wokers]" in text
    line = path.read_text().splitlines().index("solver_wokers = 3") + 1
    assert f":{line} " in text


def test_unknown_section(tmp_path):
    with pytest.raises(ApeError, match="unknown key 'chekcer'.*did you mean 'checker'"):
        load_config(write(tmp_path, BASE + "\n[chekcer]\nimplementation = 'x'\n"))


def test_wrong_type_is_named(tmp_path):
    with pytest.raises(ApeError, match=r"\[run.runs_per_data\].*integer"):
        load_config(write(tmp_path, BASE + "\n[run]\nruns_per_data = 'many'\n"))


def test_missing_required_key(tmp_path):
    with pytest.raises(ApeError, match=r"missing required key 'checker'"):
        load_config(write(tmp_path, BASE.replace('[checker]\nimplementation = "exact_match"\n', "")))


def test_missing_data_file(tmp_path):
    path = write(tmp_path, BASE.replace("data.jsonl", "nope.jsonl"))
    with pytest.raises(ApeError, match=r"\[data.file\].*file not found"):
        load_config(path)


def test_template_and_template_file_conflict(tmp_path):
    (tmp_path / "p.mustache").write_text("x")
    path = write(
        tmp_path, BASE.replace('template = "Q: {{ question }}"', 'template = "x"\ntemplate_file = "p.mustache"')
    )
    with pytest.raises(ApeError, match="exactly one of 'template' or 'template_file'"):
        load_config(path)


def test_fail_on_error_share(tmp_path):
    with pytest.raises(ApeError, match="share between 0 and 1"):
        load_config(write(tmp_path, BASE + "\n[run]\nfail_on_error = 1.5\n"))
    config = load_config(write(tmp_path, BASE + "\n[run]\nfail_on_error = 0.1\n"))
    assert config.run.fail_on_error == 0.1


def test_invalid_toml(tmp_path):
    with pytest.raises(ApeError, match="invalid TOML"):
        load_config(write(tmp_path, BASE + "\n[run\n"))


def test_overrides(tmp_path):
    config = load_config(write(tmp_path, BASE), {"run.solver_workers": 7, "run.load_save": False})
    assert config.run.solver_workers == 7 and config.run.load_save is False


TWO_MODELS = BASE.replace('[model]\nprovider = "mock"\n', "") + (
    '\n[[model]]\nname = "a"\nprovider = "mock"\ntemperature = 0.0\nargs = { seed = 1 }\n'
    '\n[[model]]\nname = "b"\nprovider = "mock"\ntemperature = "hot"\nargs = { seed = 2 }\n'
)


def test_an_error_in_the_second_model_points_at_the_second_model(tmp_path):
    path = write(tmp_path, TWO_MODELS)
    hot = path.read_text().splitlines().index('temperature = "hot"') + 1
    with pytest.raises(ApeError) as err:
        load_config(path)
    assert f"{path}:{hot} [model[1].temperature]" in str(err.value)
    unknown = write(tmp_path, TWO_MODELS.replace('temperature = "hot"', "temprature = 0.5"))
    with pytest.raises(ApeError) as err:
        load_config(unknown)
    assert f"{unknown}:{hot} [model[1].temprature]" in str(err.value)


def test_a_plugin_error_of_the_second_model_is_located_in_its_table(tmp_path):
    from ape.config import locate

    path = write(tmp_path, TWO_MODELS.replace('temperature = "hot"', "temperature = 0.5"))
    config = load_config(path)
    lines = path.read_text().splitlines()
    second_args = [n for n, line in enumerate(lines, start=1) if line.startswith("args = { seed")][1]
    error = locate(ApeError("bad args", where="[model] 'b' args"), config)
    assert error.where == f"{path}:{second_args} [model] 'b' args"
    second_table = [n for n, line in enumerate(lines, start=1) if line == "[[model]]"][1]
    error = locate(ApeError("bad class", where="[model] 'b' class"), config)  # no class key: the table
    assert error.where == f"{path}:{second_table} [model] 'b' class"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('fail_on_error = "yes"', "[run.fail_on_error]: must be a number or true or false, not the string 'yes'"),
        ('load_save = "false"', "[run.load_save]: must be true or false, not the string 'false'"),
        ('solver_workers = "4"', "[run.solver_workers]: must be an integer, not the string '4'"),
        ("solver_workers = true", "[run.solver_workers]: must be an integer, not true"),
        ('max_cost = "5"', "[run.max_cost]: must be a number, not the string '5'"),
    ],
)
def test_a_string_or_bool_where_a_bool_or_number_belongs_is_an_error(tmp_path, line, message):
    path = write(tmp_path, BASE + f"\n[run]\n{line}\n")
    with pytest.raises(ApeError) as err:
        load_config(path)
    assert f"{path}:{path.read_text().splitlines().index(line) + 1} {message}" in str(err.value)
    assert "\n" not in str(err.value).strip()


def test_bools_and_numbers_written_as_such_still_load(tmp_path):
    config = load_config(write(tmp_path, BASE + "\n[run]\nfail_on_error = false\nmax_cost = 5\nsolver_workers = 2\n"))
    assert config.run.fail_on_error is False and config.run.max_cost == 5.0 and config.run.solver_workers == 2


def test_an_error_that_names_only_the_file_gets_the_line_too(tmp_path):
    from ape.config import locate

    path = write(tmp_path, BASE)
    config = load_config(path)
    line = path.read_text().splitlines().index('template = "Q: {{ question }}"') + 1
    error = locate(ApeError("template variable", where=f"{config.config_file} [prompt] template"), config)
    assert error.where == f"{config.config_file}:{line} [prompt] template"
