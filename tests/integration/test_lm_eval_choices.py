"""``multiple_choice`` and ``loglikelihood`` harness tasks run through APE's log-likelihood
scoring, on a real Prefect server and local data in the shapes of ARC, HellaSwag, an MMLU
subject and LAMBADA:

- on SmolLM2 (in process), APE's prompts equal the harness's byte for byte, and its acc and
  acc_norm (LAMBADA: acc and perplexity; per document and aggregated by the harness after the run) equal
  ``lm_eval.simple_evaluate``'s with a harness model object that scores with the same model;
- a resumed run asks the model nothing for the documents it has (the mock scorer, counted);
- a chat-only model is one line naming the task, exit code 2, before any model call.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ape.config import load_config
from ape.schemas.config import ModelConfig
from ape.schemas.lm_eval import LmEvalItem
from tests.helpers import mock_calls
from tests.helpers.llm_server import smollm2_missing
from tests.helpers.lm_eval_data import (
    needs_lm_eval,
    offline,
    write_arc,
    write_hellaswag,
    write_lambada,
    write_mmlu,
)
from tests.helpers.paths import REPO_ROOT
from tests.helpers.runner import read_results

lm_eval = needs_lm_eval()
pytestmark = pytest.mark.usefixtures("prefect_server")

SMOLLM2 = '[[model]]\nname = "smollm2"\nprovider = "llama-cpp"\nmodel = "smollm2-135m"\n'
MOCK = '[[model]]\nname = "mc-mock"\nprovider = "mock"\nargs = { accuracy = 0.6, seed = 3 }\n'
SHAPES = {  # harness task, its file (included by the harness's side), data writer, shots
    "arc": ("arc_easy", "arc/arc_easy.yaml", write_arc, 2),
    "hellaswag": ("hellaswag", "hellaswag/hellaswag.yaml", write_hellaswag, 1),
    "mmlu": ("mmlu_abstract_algebra", "mmlu/default/mmlu_abstract_algebra.yaml", write_mmlu, 2),
    "lambada": ("lambada_openai", "lambada/lambada_openai.yaml", write_lambada, 0),
}


def _config(folder: Path, task: str, files: dict[str, str], shots: int, model: str) -> Path:
    table = ", ".join(f'{k} = "{v}"' for k, v in files.items())
    path = folder / "config.toml"
    path.write_text(
        f'name = "{task}-local"\n\n[task]\nlm_eval = "{task}"\nnum_fewshot = {shots}\ndata_files = {{ {table} }}\n\n'
        f'{model}\n[run]\noutput = "out"\n[cli]\nprogress = false\n',
        encoding="utf-8",
    )
    return path


def _run(path: Path) -> tuple[Any, Any]:
    from ape.flows.benchmark import benchmark

    config = load_config(path)
    return config, benchmark(config, return_state=True)


def _scoring_lm(scorer: Any, contexts: list[str]) -> Any:
    """A harness model object whose ``loglikelihood`` asks APE's scorer of the same model, with
    the context's trailing whitespace moved to the continuation as the harness's own back
    ends move it (``_encode_pair``)."""
    from lm_eval.api.model import LM

    from ape.tasks.models.scoring import ScoreRequest

    class Scoring(LM):
        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            out = []
            for request in requests:
                context, continuation = request.args
                contexts.append(context)
                kept = context.rstrip()
                scored = scorer.score(ScoreRequest(kept, (context[len(kept) :] + continuation,)))
                out.append((scored.scores[0].loglikelihood, bool(scored.scores[0].greedy)))
            return out

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            raise NotImplementedError

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            raise NotImplementedError

    return Scoring()


def _harness_run(folder: Path, shape: str, files: dict[str, str], model: Any) -> dict[str, Any]:
    """simple_evaluate on a task file that includes the harness's own task with local data."""
    from lm_eval.tasks import TaskManager

    task, include, _, shots = SHAPES[shape]
    tasks = folder / "harness_tasks"
    tasks.mkdir()
    source = Path(lm_eval.__file__).parent / "tasks" / include
    local = {
        "include": str(source),
        "task": f"{task}_local",
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {k: str(folder / v) for k, v in files.items()}},
    }
    (tasks / f"{task}_local.yaml").write_text(json.dumps(local), encoding="utf-8")  # JSON is YAML
    results: dict[str, Any] = lm_eval.simple_evaluate(
        model=model, tasks=[f"{task}_local"], task_manager=TaskManager(include_path=str(tasks)), num_fewshot=shots
    )
    return results


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs the llm extra (llama-cpp-python)")
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_acc_and_acc_norm_on_smollm2_equal_the_harness(
    shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if smollm2_missing():
        pytest.skip(smollm2_missing())
    from ape.tasks.models.local.llama_inprocess import llama_scorer

    offline(monkeypatch)
    task, _, write, shots = SHAPES[shape]
    files = write(tmp_path)
    config, state = _run(_config(tmp_path, task, files, shots, SMOLLM2))
    assert state.is_completed(), state
    out = config.run.output
    sessions = {b["item_id"]: b["sessions"][0] for b in read_results(out / "results.jsonl")}
    items = [LmEvalItem.model_validate_json(line) for line in config.data.file.read_text().splitlines()]
    assert len(sessions) == len(items) == 8 and all(s["outcome"] == "SOLVED" for s in sessions.values())

    contexts: list[str] = []
    scorer = llama_scorer(ModelConfig.model_validate({"provider": "llama-cpp", "model": "smollm2-135m"}))
    harness = _harness_run(tmp_path, shape, files, _scoring_lm(scorer, contexts))
    ours = json.loads((out / "report.json").read_text())["summary"]["lm_eval"]["models"]["smollm2"]
    theirs, mine = harness["results"][f"{task}_local"], ours["results"][task]
    assert sorted(set(contexts)) == sorted({item.context for item in items})  # byte for byte, shots included
    metrics = [k for k in theirs if k.split(",")[0] in ("acc", "acc_norm", "perplexity")]
    assert "acc,none" in metrics and (shape in ("mmlu", "lambada") or "acc_norm,none" in metrics)
    assert shape != "lambada" or "perplexity,none" in metrics
    for key in metrics:
        assert mine[key] == pytest.approx(theirs[key], abs=1e-12), key
        print(f"{shape} {key}: harness {theirs[key]:.4f}, APE {mine[key]:.4f}, {len(set(contexts))} contexts")
    # each session's grade is the harness's per-document metric; the log-likelihoods are the model's
    for item in items:
        session = sessions[item.id]
        assert all(ll < 0 for ll in session["solution"]["loglikelihoods"])
        assert session["check"]["metadata"]["lm_eval"]["acc,none"] in (0.0, 1.0)
    passed = sum(s["check"]["metadata"]["lm_eval"]["acc,none"] for s in sessions.values())
    assert passed / 8 == pytest.approx(theirs["acc,none"])
    assert ours["missing"] == 0


def test_a_resumed_run_asks_the_model_nothing_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offline(monkeypatch)
    mock_calls.reset()
    task, _, write, shots = SHAPES["arc"]
    path = _config(tmp_path, task, write(tmp_path), shots, MOCK)
    config, state = _run(path)
    assert state.is_completed(), state
    first = mock_calls.scorer_calls("mc-mock")
    choices = sum(len(LmEvalItem.model_validate_json(x).choices) for x in config.data.file.read_text().splitlines())
    assert first == choices  # one request per choice (ARC's documents have 3 or 4)
    report = json.loads((config.run.output / "report.json").read_text())
    both = report["choices"]["mc-mock"]
    harness = report["summary"]["lm_eval"]["models"]["mc-mock"]["results"]["arc_easy"]
    assert both["acc"] == pytest.approx(harness["acc,none"]) and both["acc_norm"] == pytest.approx(
        harness["acc_norm,none"]
    )

    again, state = _run(path)
    assert state.is_completed(), state
    assert mock_calls.scorer_calls("mc-mock") == first  # every document came from the saved sessions
    assert (
        json.loads((again.run.output / "report.json").read_text())["summary"]["lm_eval"]["models"]
        == (report["summary"]["lm_eval"]["models"])
    )


def test_a_chat_only_model_is_refused_naming_the_task(tmp_path: Path) -> None:
    task, _, write, shots = SHAPES["arc"]
    chat = '[[model]]\nname = "chat"\nprovider = "anthropic"\nmodel = "claude-x"\n'
    path = _config(tmp_path, task, write(tmp_path), shots, chat)
    env = {"PYTHONPATH": str(REPO_ROOT), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "ape", "run", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=600,
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "task 'arc_easy' is a multiple_choice task, scored by each choice's log-likelihood" in errors[0]
    assert "provider 'anthropic' is chat-only" in errors[0] and "llama-cpp" in errors[0]
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_a_failed_document_of_a_choice_task_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ape retry`` of an ARC-shaped run on a completions endpoint that fails one document's
    requests: only that document is asked again, and the harness's table then counts it."""
    pytest.importorskip("langchain_openai", reason="the completions scorer needs the 'openai' extra")
    from ape.cli import main
    from tests.helpers.fake_completions import completions
    from tests.helpers.fake_openai import LoopbackEndpoint, Request, error_body

    answer, broken = completions("right"), [True]

    def respond(request: Request) -> Any:
        if broken[0] and "about sample 1 is" in str(request.body.get("prompt", "")).rsplit("Question:", 1)[-1]:
            return 500, error_body("overloaded")
        return answer(request)

    server = LoopbackEndpoint(respond)
    try:
        task, _, write, shots = SHAPES["arc"]
        model = f'[[model]]\nname = "endpoint"\nprovider = "openai"\nmodel = "m"\nbase_url = "{server.base_url}"\n'
        path = _config(tmp_path, task, write(tmp_path), shots, model + "max_retries = 0\n")
        offline(monkeypatch)
        assert main(["run", str(path), "--no-server", "--workers", "1", "--no-progress"]) == 1
        out = tmp_path / "out"
        sessions = {b["item_id"]: b["sessions"][0] for b in read_results(out / "results.jsonl")}
        assert sessions["arc_easy/1"]["outcome"] == "ERROR"
        assert all(s["outcome"] != "ERROR" for key, s in sessions.items() if key != "arc_easy/1")
        first = json.loads((out / "report.json").read_text())["summary"]["lm_eval"]["models"]["endpoint"]
        assert first["missing"] == 1
        asked = len(server.requests)

        broken[0] = False
        assert main(["retry", str(out), "--no-server", "--no-progress"]) == 0
        prompts = [str(r.body.get("prompt", "")) for r in server.requests[asked:] if r.path.endswith("/completions")]
        documents = {p.rsplit("Question:", 1)[-1].split(" is true")[0] for p in prompts if "Question:" in p}
        assert documents == {" Which statement about sample 1"}  # only the failed document, beside the canary
        sessions = {b["item_id"]: b["sessions"][0] for b in read_results(out / "results.jsonl")}
        assert all(s["outcome"] != "ERROR" for s in sessions.values())
        report = json.loads((out / "report.json").read_text())
        second = report["summary"]["lm_eval"]["models"]["endpoint"]
        assert second["missing"] == 0 and "acc,none" in second["results"]["arc_easy"]
        leaderboard = (out / "leaderboard.md").read_text()
        assert (
            "scored by the harness task's first metric" in leaderboard and "[choices] metric picks" not in leaderboard
        )
    finally:
        server.close()
