"""The command line as a user meets it: help, validate, one-line errors, exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from ape.cli import EXIT_BAD_INPUT, main
from tests.helpers.paths import REPO_ROOT
from tests.helpers.runner import make_benchmark


def validate(path, capsys):
    code = main(["validate", str(path)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_help_explains_every_command():
    out = subprocess.run(
        [sys.executable, "-m", "ape", "--help"], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    ).stdout
    for command in ("run", "validate", "report", "retry", "demo", "serve", "server"):
        assert command in out
    run_help = subprocess.run(
        [sys.executable, "-m", "ape", "run", "--help"], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    ).stdout
    for option in ("--output", "--workers", "--no-load-save", "--no-progress", "--no-server"):
        assert option in run_help


def test_validate_the_shipped_example(capsys):
    code, out, err = validate(REPO_ROOT / "examples" / "arithmetic" / "config.toml", capsys)
    assert code == 0, err
    assert "ok:" in out and "30 items" in out and "template variables: question" in out


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda t: t.replace("[run]", "[run]\nsolver_wrokers = 2"), "unknown key 'solver_wrokers'"),
        (lambda t: t.replace("benchschema:Item", "benchschema:Itme"), "has no attribute 'Itme'"),
        (lambda t: t.replace("benchschema:Item", "no_such_module:Item"), "cannot import module 'no_such_module'"),
        (lambda t: t.replace("What is {{ question }}?", "What is {{ qestion }}?"), "'{{ qestion }}' is not a field"),
        (
            lambda t: t.replace('schema = "benchschema:Item"', 'schema = "benchschema:Item"\nstart_id = "zz"'),
            "start_id 'zz' is not in the file",
        ),
    ],
    ids=["unknown-key", "bad-attribute", "bad-module", "template-variable", "start-id"],
)
def test_bad_configs_give_one_clear_line(tmp_path, capsys, change, expected):
    path = make_benchmark(tmp_path)
    path.write_text(change(path.read_text()))
    code, out, err = validate(path, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert expected in lines[0] and lines[0].startswith("error: ")
    assert "Traceback" not in err


def test_duplicate_id_names_file_and_line(tmp_path, capsys):
    path = make_benchmark(tmp_path, n=3)
    data = tmp_path / "data.jsonl"
    first = data.read_text().splitlines()[0]
    data.write_text(data.read_text() + first + "\n")
    code, _, err = validate(path, capsys)
    assert code == 2
    assert err.strip() == f"error: {data}:4: duplicate id 'i0', first on line 1 (every item needs a unique id)"


def test_debug_shows_traceback(tmp_path, capsys):
    path = make_benchmark(tmp_path)
    path.write_text(path.read_text().replace("benchschema:Item", "benchschema:Itme"))
    for argv in (["--debug", "validate", str(path)], ["validate", str(path), "--debug"]):
        code = main(argv)
        assert code == 2
        assert "Traceback" in capsys.readouterr().err


def test_missing_config_file(capsys, tmp_path):
    code = main([str(tmp_path / "nope.toml")])
    assert code == 2
    assert "config file not found" in capsys.readouterr().err


def test_report_rebuilds_from_saved_results(tmp_path, capsys):
    from ape.schemas.results import Outcome, OutputBatch, SessionResult

    folder = tmp_path / "run"
    folder.mkdir()
    with (folder / "results.jsonl").open("w") as handle:
        for i, ok in enumerate([True, False, True]):
            s = SessionResult(
                item_id=f"i{i}",
                run_index=0,
                model_id="m",
                outcome=Outcome.SOLVED,
                score=float(ok),
                correct=ok,
                confidence=0.8,
            )
            handle.write(OutputBatch(item_id=f"i{i}", model_id="m", sessions=[s]).model_dump_json() + "\n")
    code = main(["report", str(folder), "--out", str(tmp_path / "rep")])
    assert code == 0
    assert "| 1 | `m` |" in capsys.readouterr().out
    envelope = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert envelope["leaderboard"][0]["model_id"] == "m"
    assert (tmp_path / "rep" / "leaderboard.parquet").exists()


def test_report_refuses_to_rank_different_benchmarks_together(tmp_path, capsys):
    from ape.schemas.results import Outcome, OutputBatch, SessionResult

    folders = []
    for bench, model in (("maths", "m"), ("poetry", "p")):
        folder = tmp_path / bench
        folder.mkdir()
        s = SessionResult(item_id="i0", run_index=0, model_id=model, outcome=Outcome.SOLVED, score=1.0, correct=True)
        (folder / "results.jsonl").write_text(
            OutputBatch(item_id="i0", model_id=model, sessions=[s]).model_dump_json() + "\n"
        )
        meta = {"benchmark": bench, "model": model, "completed_ids": ["i0"], "errored_ids": []}
        (folder / "metadata.json").write_text(json.dumps(meta))
        folders.append(str(folder))
    code = main(["report", *folders, "--out", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    assert code == 2 and "different benchmarks" in err and "maths" in err and "poetry" in err
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            lambda t: t.replace('"last_number"', '"last_numbr"'),
            r":\d+ \[adapter\] implementation: .*did you mean 'last_number'",
        ),
        (
            lambda t: t.replace('"exact_match"', '"exact_mach"'),
            r":\d+ \[checker\] implementation: .*did you mean 'exact_match'",
        ),
        (
            lambda t: t + '\n[tools.calc]\nfactory = "ape.tasks.solving.tools:calculatr"\n',
            r":\d+ \[tools.calc\] factory: .*did you mean 'calculator'",
        ),
        (lambda t: t.replace('provider = "mock"', 'provider = "mokc"'), r":\d+ \[model\] 'm': .*did you mean 'mock'"),
        (
            lambda t: t + '\n[hooks]\non_batch_saved = "benchschema:remembr"\n',
            r"\[hooks\] on_batch_saved: .*did you mean 'remember'",
        ),
    ],
    ids=["adapter", "checker", "tool", "provider", "hook"],
)
def test_plugin_errors_name_file_line_and_key(tmp_path, capsys, change, expected):
    import re

    path = make_benchmark(tmp_path)
    path.write_text(change(path.read_text()))
    code, _, err = validate(path, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: {path}")
    assert re.search(expected, err), err


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            lambda t: t.replace('model = "grader"', 'model = "gradr"'),
            r":\d+ \[checker.judge\] model: 'gradr' is not a mock model.*did you mean 'grader'\?",
        ),
        (
            lambda t: t.replace("accuracy = 0.8, seed = 3", 'accuracy = 0.8, seed = 3, behaviour = "echoo"'),
            r"\[checker.judge\] args: 'echoo' is not a mock behaviour.*did you mean 'echo'\?",
        ),
    ],
    ids=["judge-model", "judge-behaviour"],
)
def test_a_judge_that_cannot_work_fails_validate_with_one_line(tmp_path, capsys, change, expected):
    """A mock judge named "gradr" used to fall back to the arithmetic mock without a word:
    every grade then became a check error. It is now an error before any model call."""
    import re
    import shutil

    shutil.copytree(REPO_ROOT / "examples" / "judge", tmp_path / "judge")
    path = tmp_path / "judge" / "config.toml"
    assert validate(path, capsys)[0] == 0  # the example as shipped is fine
    path.write_text(change(path.read_text()))
    code, out, err = validate(path, capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {path}") and re.search(expected, err), err


def test_a_mock_model_name_that_means_nothing_fails_validate(tmp_path, capsys):
    path = make_benchmark(tmp_path, models='[model]\nname = "m"\nprovider = "mock"\nmodel = "arithmetc"\n')
    code, _, err = validate(path, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "[model] 'm' model: 'arithmetc' is not a mock model" in err and "did you mean 'arithmetic'?" in err
    path.write_text(path.read_text().replace('model = "arithmetc"', 'model = "echo"\nargs = { behaviour = "grader" }'))
    code, _, err = validate(path, capsys)
    assert code == 2 and "name two behaviours" in err


def _edit_line(path, match, change):
    """``path`` with its first line that ``match`` accepts replaced by ``change(line)``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    number = next(n for n, line in enumerate(lines) if match(line))
    lines[number] = change(lines[number])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    "edited, match, change, shown, expected",
    [
        (  # an index past the item's choices, on line 3 of the data
            "data.jsonl",
            lambda line: '"geo-3"' in line,
            lambda line: json.dumps({**json.loads(line), "answer": 9}),
            "data.jsonl:3: item 'geo-3'",
            "[choices] gold 'answer' is 9: the item has only 4 choices",
        ),
        (  # the config names the wrong field: the first item shows it
            "config.toml",
            lambda line: line.startswith("gold ="),
            lambda line: line.replace('"answer"', '"category"'),
            "data.jsonl:1: item 'geo-1'",
            "[choices] gold 'category' is 'geography', which is no choice of the item's 4 choices",
        ),
    ],
    ids=["index-out-of-range", "wrong-field"],
)
def test_a_bad_gold_choice_is_one_line_before_any_model_call(tmp_path, capsys, edited, match, change, shown, expected):
    # a [choices] run reads each item's gold choice; a bad one is found by the data scan,
    # naming the file, the line and the item, before a server starts or a model is asked
    folder = tmp_path / "mc"
    shutil.copytree(REPO_ROOT / "examples" / "multiple_choice", folder, ignore=shutil.ignore_patterns("output"))
    _edit_line(folder / edited, match, change)
    code = main(["run", str(folder / "config.toml"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: {folder / shown}: ") and expected in line, line
    assert not (folder / "output").exists()


def test_validate_says_it_did_not_contact_a_served_models_endpoint(tmp_path, capsys):
    """ "ok" from validate is about the config; a dead endpoint is found by `ape run`'s probe,
    and validate says so rather than letting "ok" read as "reachable"."""
    pytest.importorskip(
        "langchain_openai", reason="the openai provider needs langchain-openai (pip install -e '.[openai]')"
    )
    model = '[[model]]\nname = "served"\nprovider = "openai"\nmodel = "x"\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "HOME"\n'
    path = make_benchmark(tmp_path, n=2, models=model)
    code, out, _ = validate(path, capsys)
    assert code == 0, out
    assert "endpoints: not contacted (served at http://127.0.0.1:9/v1); `ape run` checks each one first" in out


def test_validate_of_mocks_mentions_no_endpoint(tmp_path, capsys):
    code, out, _ = validate(make_benchmark(tmp_path, n=2), capsys)
    assert code == 0 and "endpoints:" not in out


def test_prefects_usage_data_is_off_unless_the_user_turns_it_on(tmp_path, capsys, monkeypatch):
    """A command turns off Prefect's usage data on the server and in the client (in a new home,
    Prefect's first import in a terminal prints a notice and sends an event); a user's own
    DO_NOT_TRACK is kept."""
    monkeypatch.delenv("DO_NOT_TRACK", raising=False)
    monkeypatch.delenv("PREFECT_SERVER_ANALYTICS_ENABLED", raising=False)
    assert main(["validate", str(tmp_path / "missing.toml")]) == EXIT_BAD_INPUT
    assert os.environ["DO_NOT_TRACK"] == "1" and os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    monkeypatch.setenv("DO_NOT_TRACK", "0")
    assert main(["validate", str(tmp_path / "missing.toml")]) == EXIT_BAD_INPUT
    assert os.environ["DO_NOT_TRACK"] == "0"


def _documented_prefect_settings() -> dict[str, str]:
    """docs/server.md's table of the Prefect settings every command starts with: variable -> value."""
    text = (REPO_ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    section = text.split("### Prefect's settings APE's commands start with", 1)[1].split("\n### ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `")]
    return {name.strip().strip("`"): value.strip().split("`")[1] for name, value in rows}


def test_the_documented_prefect_settings_are_what_a_command_sets(tmp_path, monkeypatch):
    """The docs' table is what a command sets when the user set none of them, and a value
    the user set is kept for each one."""
    documented = _documented_prefect_settings()
    assert set(documented) == {"PREFECT_SERVER_ANALYTICS_ENABLED", "DO_NOT_TRACK", "PREFECT_LOGGING_LEVEL"}
    for name in documented:
        monkeypatch.delenv(name, raising=False)
    assert main(["validate", str(tmp_path / "missing.toml")]) == EXIT_BAD_INPUT
    assert {name: os.environ[name] for name in documented} == documented
    for name in documented:
        monkeypatch.setenv(name, "users-own")
    assert main(["validate", str(tmp_path / "missing.toml")]) == EXIT_BAD_INPUT
    assert all(os.environ[name] == "users-own" for name in documented)
