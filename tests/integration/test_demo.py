"""`ape demo` (the eval demo) end to end on a real Prefect server: the clean run, each broken
criterion's exit code and error, the envelope's schema, parallel == sequential."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from ape.cli.demo import demo_exit
from ape.config import load_config
from ape.flows.demo import DEMO_DIR, DEMO_TASKS, demo_config, run_eval, workers_for
from ape.schemas.report import Envelope
from ape.schemas.results import Generation
from ape.tasks.checking.taskspec import load_tasks
from ape.tasks.models.build import build_model
from ape.tasks.models.mocks.demo_adapters import RandomAdapter, RuleBasedAdapter, demo_adapters, model_entry
from ape.tasks.report.demo_criteria import EXIT_CODES, Criterion
from tests.helpers.report_keys import REPORT_KEYS

pytestmark = pytest.mark.timeout(240)

SESSION_COLUMNS = [
    "model_id",
    "item_id",
    "outcome",
    "metric",
    "check_status",
    "score",
    "correct",
    "confidence",
    "token_nll",
    "token_count",
    "category",
    "raw_output",
]


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def _rounded(value):
    """Pydantic models, lists and dicts as plain data with floats rounded to 12 digits."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return round(value, 12) if isinstance(value, float) else value


def _sessions(out: Path) -> pd.DataFrame:
    frame = pd.read_parquet(out / "sessions.parquet")[SESSION_COLUMNS]
    return frame.sort_values(["model_id", "item_id"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def clean_run(prefect_server, tmp_path_factory):
    out = tmp_path_factory.mktemp("demo-parallel")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = demo_exit(out, parallel=True)
    return out, code, stdout.getvalue()


@pytest.fixture()
def two_tasks(tmp_path) -> Path:
    """Two fixture tasks (one per category): small runs for the broken-criterion tests."""
    lines = DEMO_TASKS.read_text().splitlines()
    path = tmp_path / "two.jsonl"
    path.write_text(lines[0] + "\n" + lines[-1] + "\n")
    return path


# ---------------------------------------------------------------- the clean run


def test_clean_run_exits_zero_and_prints_the_table(clean_run):
    out, code, stdout = clean_run
    assert code == 0
    assert "## Leaderboard" in stdout and "## Calibration" in stdout
    assert "| 1 | `rule-based` |" in stdout
    for name in (
        "report.json",
        "leaderboard.parquet",
        "sessions.parquet",
        "pairwise.parquet",
        "calibration_bins.parquet",
        "summary.png",
        "tasks.jsonl",
        "leaderboard.md",
    ):
        assert (out / name).is_file(), name


def test_clean_run_envelope_matches_the_schema(clean_run):
    out, _, _ = clean_run
    data = _report(out)
    envelope = Envelope.model_validate(data)  # extra="forbid": no stray keys
    assert envelope.error is None
    assert set(data) == REPORT_KEYS
    assert data["judge"] is None and data["choices"] == {}  # only a judge, only [choices] runs add them
    summary = data["summary"]
    assert (summary["tasks"], summary["models"], summary["sessions"]) == (10, 4, 40)
    assert summary["wall_seconds"] > 0  # the 10 s budget is a warning of `ape demo`, not a timed test
    assert set(summary["criteria"].values()) == {"passed"}
    ranks = {row.model_id: row.rank for row in envelope.leaderboard}
    assert ranks["rule-based"] == 1 and ranks["random"] == 4
    assert len(envelope.pairwise) == 6
    for model_id in ("rule-based", "noisy", "biased", "random"):
        calibration = envelope.calibration[model_id]
        assert calibration.n == 10 and calibration.missing == 0 and calibration.ece is not None
    biased = next(r for r in envelope.leaderboard if r.model_id == "biased")
    assert biased.by_category["language"].mean_score == 1.0
    assert biased.by_category["reasoning"].mean_score == 0.0


def test_every_session_used_its_tasks_metric(clean_run):
    out, _, _ = clean_run
    metrics = {t.id: t.metric for t in load_tasks(DEMO_TASKS)}
    sessions = _sessions(out)
    assert (sessions["item_id"].map(metrics) == sessions["metric"]).all()
    assert (sessions["outcome"] == "SOLVED").all()


def test_sequential_run_gives_identical_results(clean_run, tmp_path):
    out, _, _ = clean_run
    envelope = run_eval(demo_adapters(), DEMO_TASKS, parallel=False, out=tmp_path)
    pd.testing.assert_frame_equal(_sessions(tmp_path), _sessions(out))
    parallel = Envelope.model_validate(_report(out))
    strip = {"mean_latency_s"}
    assert [r.model_dump(exclude=strip) for r in envelope.leaderboard] == [
        r.model_dump(exclude=strip) for r in parallel.leaderboard
    ]
    # aggregates agree up to float summation order (results.jsonl is in completion order)
    assert _rounded(envelope.pairwise) == _rounded(parallel.pairwise)
    assert _rounded(envelope.calibration) == _rounded(parallel.calibration)
    assert workers_for(10, True) == 8 and workers_for(3, True) == 3 and workers_for(10, False) == 1


# ---------------------------------------------------------------- each broken criterion


def _error(out: Path) -> dict:
    data = _report(out)
    Envelope.model_validate(data)
    assert data["error"] is not None
    return data["error"]


def test_invalid_task_exits_3_with_an_error_naming_task_and_field(prefect_server, tmp_path, capsys):
    rows = [json.loads(line) for line in DEMO_TASKS.read_text().splitlines()]
    rows[4]["metric"] = "bleu"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = demo_exit(tmp_path / "out", tasks_file=bad)
    assert code == EXIT_CODES[Criterion.TASKS_VALIDATED] == 3
    error = _error(tmp_path / "out")
    assert error["type"] == "TaskValidationFailed"
    assert error["details"]["criterion"] == "tasks_validated"
    assert f"task '{rows[4]['id']}'" in error["message"] and "field 'metric'" in error["message"]
    assert "tasks_validated" in capsys.readouterr().err


class _Crashing:
    """Raises on one task: that task never gets a score."""

    model_id = "random"

    def generate(self, prompt, task):
        if task.id == "arith-01":
            raise RuntimeError("adapter exploded")
        return Generation(text="blue", confidence=0.5)


def test_unscored_task_exits_4_naming_model_and_task(prefect_server, tmp_path, two_tasks):
    code = demo_exit(tmp_path, tasks_file=two_tasks, adapters=[RuleBasedAdapter(), _Crashing()])
    assert code == EXIT_CODES[Criterion.TASKS_SCORED] == 4
    error = _error(tmp_path)
    assert error["type"] == "TasksNotScored"
    problems = error["details"]["problems"]
    assert problems == [
        {"model": "random", "task": "arith-01", "reason": "the session ended ERROR: RuntimeError: adapter exploded"}
    ]
    assert _report(tmp_path)["leaderboard"], "the partial report is kept"


class _Unsure:
    """Answers without any confidence: its calibration cannot be aggregated."""

    model_id = "random"

    def generate(self, prompt, task):
        return "blue"


def test_missing_calibration_exits_5(prefect_server, tmp_path, two_tasks):
    code = demo_exit(tmp_path, tasks_file=two_tasks, adapters=[RuleBasedAdapter(), _Unsure()])
    assert code == EXIT_CODES[Criterion.CALIBRATION] == 5
    error = _error(tmp_path)
    assert error["type"] == "CalibrationFailed"
    assert error["details"]["problems"] == [{"model": "random", "reason": "2 session(s) reported no confidence"}]
    assert _report(tmp_path)["summary"]["criteria"]["tasks_scored"] == "passed"


def test_rule_based_not_above_random_exits_6(prefect_server, tmp_path, two_tasks):
    adapters = [RuleBasedAdapter(error_rate=1.0), RandomAdapter()]
    code = demo_exit(tmp_path, tasks_file=two_tasks, adapters=adapters)
    assert code == EXIT_CODES[Criterion.RANKING] == 6
    error = _error(tmp_path)
    assert error["type"] == "RankingFailed"
    assert "'rule-based'" in error["message"] and "not strictly above" in error["message"]
    assert _report(tmp_path)["summary"]["criteria"]["calibration"] == "passed"


def test_run_failure_exits_1(prefect_server, tmp_path, two_tasks):
    code = demo_exit(tmp_path, tasks_file=two_tasks, adapters=[RuleBasedAdapter(), RuleBasedAdapter()])
    assert code == EXIT_CODES[Criterion.RUN_COMPLETED] == 1
    error = _error(tmp_path)
    assert error["type"] == "RunFailed" and "must be unique" in error["message"]


def test_exit_codes_are_distinct_and_nonzero():
    codes = list(EXIT_CODES.values())
    assert len(set(codes)) == len(Criterion) and 0 not in codes and 2 not in codes


# ---------------------------------------------------------------- the example config


def test_example_config_is_the_demo_pipeline(tmp_path):
    config = load_config(DEMO_DIR / "config.toml")
    entries = [model_entry(a)[0] for a in demo_adapters()]
    expected = demo_config(entries, config.data.file, tmp_path, workers=8)
    for part in ("data", "prompt", "adapter", "checker"):
        assert getattr(config, part) == getattr(expected, part), part
    assert [m.model_id for m in config.model] == [m.model_id for m in expected.model]
    tasks = load_tasks(config.data.file)
    for mine, theirs in zip(config.model, expected.model):
        built, reference = build_model(mine, config.base_dir), build_model(theirs, config.base_dir)
        mine_answers = [built.inner.adapter.generate("p", t) for t in tasks]
        assert mine_answers == [reference.inner.adapter.generate("p", t) for t in tasks]
