"""The second hour's stumbles of a newcomer writing their own benchmark (issue 37), each
as the user met it: ``ape.DataModel``, a ModelAdapter subclass that sets ``model_id``, an
error in the user's adapter naming its file and line, did-you-mean for a misspelt required
key and for an unknown ``[[checker.canary]]`` key, the Ctrl-C line, one naming in the
progress lines, ``ape validate --output`` and ``run_eval`` leaving no folder behind."""

from __future__ import annotations

import logging
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import ape
from ape import cli, launch
from ape.cli import run as run_command
from ape.schemas.errors import ApeError
from ape.schemas.results import Generation

UNITS = """
import ape
from ape import Generation


class Conversion(ape.DataModel):
    id: str
    question: str
    answer: float


class UnitGuesser(ape.ModelAdapter):
    def __init__(self, name: str = "guesser", broken: bool = False):
        self.model_id = name
        if broken:
            self.table = {}["missing"]

    def generate(self, prompt, task):
        return Generation(text="1000", confidence=0.5)
"""

CONFIG = """
name = "units"

[data]
file = "data.jsonl"
schema = "units:Conversion"

[prompt]
template = "{{ question }}"

[model]
class = "units:UnitGuesser"
args = ARGS

[adapter]
implementation = "last_number"

[checker]
implementation = "accuracy"
args = { field = "answer" }
"""


def _project(tmp_path: Path, *, args: str = "{}", extra: str = "", replace: tuple[str, str] = ("", "")) -> Path:
    (tmp_path / "units.py").write_text(textwrap.dedent(UNITS), encoding="utf-8")
    (tmp_path / "data.jsonl").write_text('{"id": "c1", "question": "1 km in m?", "answer": 1000}\n', encoding="utf-8")
    text = CONFIG.replace("ARGS", args).replace(*replace) + extra
    config = tmp_path / "config.toml"
    config.write_text(text, encoding="utf-8")
    return config


def test_data_model_is_importable_from_ape_and_is_a_pydantic_model():
    from pydantic import BaseModel

    class Item(ape.DataModel):
        id: str
        question: str

    assert issubclass(ape.DataModel, BaseModel)
    assert Item(id="a", question="q", extra="ignored").id == "a"  # unknown data columns are ignored
    assert "DataModel" in ape.__all__ and "DataModel" in dir(ape)


def test_a_model_adapter_subclass_may_set_model_id_in_init():
    class UnitGuesser(ape.ModelAdapter):
        def __init__(self, name: str):
            self.model_id = name

        def generate(self, prompt, task):
            return Generation(text="1", confidence=0.5)

    guesser = UnitGuesser("guesser")
    assert guesser.model_id == "guesser"
    assert isinstance(guesser, ape.ModelAdapter)
    assert not isinstance(object(), ape.ModelAdapter)  # still a runtime-checkable protocol


def test_the_users_adapter_and_data_model_pass_validate(tmp_path, capsys):
    config = _project(tmp_path)
    assert cli.main(["validate", str(config)]) == 0
    assert "models: UnitGuesser" in capsys.readouterr().out


def test_an_error_in_the_users_adapter_names_its_file_and_line_and_exits_2(tmp_path, capsys):
    config = _project(tmp_path, args="{ broken = true }")
    assert cli.main(["validate", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "KeyError: 'missing'" in err
    assert f"(at {tmp_path / 'units.py'}:16 in __init__)" in err  # the line that raised
    assert err.startswith(f"error: {config}:11 [model]")


def test_a_misspelt_required_key_gets_a_did_you_mean(tmp_path):
    config = _project(tmp_path, replace=('implementation = "accuracy"', 'implmentation = "accuracy"'))
    with pytest.raises(ApeError) as caught:
        ape.load_config(config)
    text = str(caught.value)
    assert "unknown key 'implmentation'" in text and "did you mean 'implementation'?" in text
    assert f"{config}:19 " in text  # the line of the misspelt key, the one to fix


def test_an_unknown_canary_key_is_named_beside_the_missing_one(tmp_path):
    canary = '\n[[checker.canary]]\nitem = { id = "k", question = "q", answer = 1 }\nanswer = 1\npassed = true\n'
    config = _project(tmp_path, extra=canary)
    with pytest.raises(ApeError) as caught:
        ape.load_config(config)
    text = str(caught.value)
    assert "missing required key 'solution'" in text and "unknown key 'answer'" in text
    assert "allowed keys: item, name, passed, score, solution" in text


def test_a_missing_key_alone_is_still_said_plainly(tmp_path):
    config = _project(tmp_path, replace=('implementation = "accuracy"', ""))
    with pytest.raises(ApeError, match=r"missing required key 'implementation'$"):
        ape.load_config(config)


def test_validate_takes_output_like_run(tmp_path, capsys):
    config = _project(tmp_path)
    out = tmp_path / "elsewhere"
    assert cli.main(["validate", str(config), "--output", str(out)]) == 0
    assert f"output: {out}" in capsys.readouterr().out


def test_ctrl_c_before_any_item_started_does_not_claim_saved_items(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "_WORK_STARTED", False)
    monkeypatch.setattr(run_command, "load_config", interrupted)
    assert cli.main(["run", str(tmp_path / "config.toml")]) == 130
    err = capsys.readouterr().err
    assert "nothing was saved" in err and "finished items are saved" not in err
    assert cli.main(["history", str(tmp_path)]) in (2, 130)  # not a run: no word about items


def test_ctrl_c_after_the_flow_started_says_finished_items_are_saved(tmp_path, capsys, monkeypatch):
    config = _project(tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "_WORK_STARTED", False)
    monkeypatch.setattr(launch, "connect", lambda api: None)
    monkeypatch.setattr("ape.flows.benchmark.benchmark", interrupted)
    monkeypatch.setattr(launch, "api_watchdog", lambda output: None)
    assert cli.main(["run", str(config), "--no-progress"]) == 130
    assert "interrupted: finished items are saved" in capsys.readouterr().err


def test_periodic_progress_lines_name_the_model_as_the_other_lines_do(ape_log):
    from ape.flows.progress import ProgressView, Tally

    tally = Tally(total=40)
    view = ProgressView("units · bad", tally, enabled=True, artifact=False, name="bad")
    view._bar = None  # a terminal-less run: log lines instead of a bar
    view._log_progress = True
    view._last_log = time.monotonic() - 11
    with ape_log.at_level(logging.INFO, logger="ape"):
        view.update()
    lines = [r.getMessage() for r in ape_log.records]
    assert lines and lines[-1].startswith("bad: 0/40 items"), lines


def test_run_eval_leaves_no_temporary_folder_behind(tmp_path, monkeypatch):
    import ape.flows.demo
    from ape.flows.demo import run_eval
    from ape.schemas.report import Envelope
    from ape.tasks.models.mocks.demo_adapters import RuleBasedAdapter

    seen: list[Path] = []

    def fake_benchmark(config, **kwargs):  # what the flow leaves in the output folder
        out = config.run.output
        seen.append(out)
        (out / "report.json").write_text(Envelope().model_dump_json(), encoding="utf-8")
        (out / "results.jsonl").write_text("", encoding="utf-8")
        return object()

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(ape.flows.demo, "benchmark", fake_benchmark)
    monkeypatch.setattr(ape.flows.demo, "items_failed", lambda state: None)
    task = {"id": "t1", "prompt": "Say hi", "reference": "hi", "metric": "exact_match", "category": "c"}
    envelope = run_eval([RuleBasedAdapter()], [task])
    assert isinstance(envelope, Envelope)
    assert seen and seen[0].name.startswith("ape-eval-") and seen[0].parent == tmp_path
    assert not list(tmp_path.glob("ape-eval-*")), "run_eval left its temporary folder behind"
    kept = tmp_path / "kept"
    run_eval([RuleBasedAdapter()], [task], out=kept)
    assert (kept / "report.json").is_file()  # a folder the caller names is kept


def test_an_error_in_the_users_generate_is_a_session_error_at_its_line(tmp_path, monkeypatch):
    """At run time the same adapter's failure ends its session ERROR with the user's file and
    line (the run goes on), rather than a traceback or a bare exception name."""
    from ape.schemas.config import SolverConfig
    from ape.tasks.models.adapter_chat import AdapterChatModel
    from ape.tasks.plugins.loader import load_object
    from ape.tasks.solving.solve import run_solver

    (tmp_path / "broken.py").write_text(
        "from ape import Generation, ModelAdapter\n\n\n"
        "class Broken(ModelAdapter):\n"
        "    def __init__(self):\n"
        '        self.model_id = "broken"\n\n'
        "    def generate(self, prompt, task):\n"
        '        return Generation(text={}["x"], confidence=0.5)\n',
        encoding="utf-8",
    )
    broken = load_object("broken:Broken", base_dir=tmp_path)()
    state = run_solver(AdapterChatModel(adapter=broken), "hi", None, settings=SolverConfig())
    assert state.error is not None
    assert state.error.line() == f"KeyError: 'x' (at {tmp_path / 'broken.py'}:9 in generate)"
