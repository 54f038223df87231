"""APE against lm-evaluation-harness itself, on local data in the shapes of GSM8K and an MMLU
subject: for the same model answers, the prompts are byte-identical and every metric equal.

The harness's side is its documented route for a task file of one's own: a YAML that
includes the harness's own task file and names local data files, run by
``lm_eval.simple_evaluate`` with a model object that returns the answers. APE's side is
``[task] lm_eval = "<name>"`` with ``data_files``: the compiled items, APE's checker on
each answer, and the harness's aggregation of the answers (the report's numbers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ape.schemas.config import TaskConfig
from ape.schemas.lm_eval import LmEvalItem
from tests.helpers.lm_eval_data import (
    gsm8k_answers,
    mmlu_answers,
    needs_lm_eval,
    offline,
    replay_lm,
    write_gsm8k,
    write_mmlu,
)

lm_eval = needs_lm_eval()


def _harness_run(
    tmp_path: Path, task: str, include: str, data_files: dict[str, str], answers: dict[int, str], **kwargs: Any
) -> tuple[dict[str, Any], list[str]]:
    """simple_evaluate on a task file that includes the harness's own ``include`` with local data."""
    from lm_eval.tasks import TaskManager

    folder = tmp_path / "harness_tasks"
    folder.mkdir()
    source = Path(lm_eval.__file__).parent / "tasks" / include
    config = {
        "include": str(source),
        "task": task,
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {k: str(tmp_path / v) for k, v in data_files.items()}},
    }
    (folder / f"{task}.yaml").write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    prompts: list[str] = []
    model = replay_lm(lambda request: answers[request.doc_id], prompts)
    results = lm_eval.simple_evaluate(
        model=model, tasks=[task], task_manager=TaskManager(include_path=str(folder)), log_samples=True, **kwargs
    )
    return results, prompts


def _ape_run(
    tmp_path: Path, cfg: TaskConfig, answers: dict[int, str]
) -> tuple[list[LmEvalItem], list[dict[str, Any]], dict[str, Any]]:
    from ape.tasks.checking.lm_eval_check import LmEvalChecker
    from ape.tasks.report.lm_eval_scores import harness_scores
    from ape.tasks.storage.lm_eval_tasks import checker_args, item_lines

    items = [LmEvalItem.model_validate_json(line) for line in item_lines(cfg, tmp_path)]
    checker = LmEvalChecker(**checker_args(cfg, tmp_path))
    grades = [checker(item, answers[item.doc_id]).metadata["lm_eval"] for item in items]
    scores = harness_scores(cfg, tmp_path, {item.id: answers[item.doc_id] for item in items})
    return items, grades, scores


def _same_metrics(harness: dict[str, Any], ape: dict[str, Any]) -> None:
    keys = [k for k in harness if "," in k]
    assert keys, harness
    for key in keys:
        assert ape[key] == pytest.approx(float(harness[key]), abs=1e-12), key


def test_gsm8k_prompts_and_metrics_match_the_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offline(monkeypatch)
    files = write_gsm8k(tmp_path)
    answers = gsm8k_answers()
    harness, prompts = _harness_run(tmp_path, "gsm8k_local", "gsm8k/gsm8k.yaml", files, answers, num_fewshot=3)
    cfg = TaskConfig(lm_eval="gsm8k", data_files=files, num_fewshot=3)
    items, grades, scores = _ape_run(tmp_path, cfg, answers)

    assert [item.context for item in items] == prompts  # byte for byte, few-shot examples included
    assert prompts[0].count("Question:") == 4  # three shots and the question
    per_doc = {
        f: {s["doc_id"]: s["exact_match"] for s in harness["samples"]["gsm8k_local"] if s["filter"] == f}
        for f in ("strict-match", "flexible-extract")
    }
    for item, grade in zip(items, grades):
        for f, values in per_doc.items():
            assert grade[f"exact_match,{f}"] == values[item.doc_id], (item.id, f)
        assert set(grade) == {"exact_match,strict-match", "exact_match,flexible-extract"}
    _same_metrics(harness["results"]["gsm8k_local"], scores["results"]["gsm8k"])
    # the answers differ between the two filters, so the check is not vacuous
    assert (
        scores["results"]["gsm8k"]["exact_match,strict-match"]
        != scores["results"]["gsm8k"]["exact_match,flexible-extract"]
    )
    assert scores["missing"] == 0


def test_mmlu_subject_prompts_and_metrics_match_the_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    offline(monkeypatch)
    files = write_mmlu(tmp_path)
    answers = mmlu_answers()
    subject = "mmlu_abstract_algebra_generative"
    harness, prompts = _harness_run(
        tmp_path, "mmlu_aa_local", "mmlu/generative/mmlu_abstract_algebra.yaml", files, answers, num_fewshot=2
    )
    cfg = TaskConfig(lm_eval=subject, data_files=files, num_fewshot=2)
    items, grades, scores = _ape_run(tmp_path, cfg, answers)

    assert [item.context for item in items] == prompts
    assert prompts[0].startswith("The following are multiple choice questions (with answers) about abstract algebra.")
    per_doc = {s["doc_id"]: s["exact_match"] for s in harness["samples"]["mmlu_aa_local"]}
    assert [g["exact_match,get_response"] for g in grades] == [per_doc[item.doc_id] for item in items]
    _same_metrics(harness["results"]["mmlu_aa_local"], scores["results"][subject])
    assert 0 < scores["results"][subject]["exact_match,get_response"] < 1


def test_a_groups_aggregation_matches_the_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group of two MMLU-shaped subjects (a task file of one's own): APE's items per
    subtask, and the group's size-weighted exact_match, as simple_evaluate gives them."""
    from lm_eval.tasks import TaskManager

    offline(monkeypatch)
    sources = [
        ("abstract_algebra", tmp_path, write_mmlu(tmp_path, test=6)),
        ("anatomy", tmp_path / "b", write_mmlu(tmp_path / "b", test=3)),
    ]
    members = [
        {
            "task": f"local_{name}",
            "include": str(Path(lm_eval.__file__).parent / "tasks" / "mmlu" / "generative" / f"mmlu_{name}.yaml"),
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": {split: str(base / file) for split, file in data.items()}},
        }
        for name, base, data in sources
    ]
    for member in members:
        (tmp_path / f"{member['task']}.yaml").write_text(json.dumps(member), encoding="utf-8")
    group = {
        "group": "local_mmlu",
        "task": [m["task"] for m in members],
        "aggregate_metric_list": [{"metric": "exact_match", "weight_by_size": True, "filter_list": "get_response"}],
    }
    (tmp_path / "local_mmlu.yaml").write_text(json.dumps(group), encoding="utf-8")
    answers = {doc_id: "A" if doc_id % 2 else "B" for doc_id in range(6)}
    prompts: list[str] = []
    model = replay_lm(lambda request: answers[request.doc_id], prompts)
    harness = lm_eval.simple_evaluate(
        model=model, tasks=["local_mmlu"], task_manager=TaskManager(include_path=str(tmp_path)), num_fewshot=1
    )

    from ape.tasks.report.lm_eval_scores import harness_scores
    from ape.tasks.storage.lm_eval_tasks import item_lines

    cfg = TaskConfig(lm_eval="local_mmlu.yaml", num_fewshot=1)
    items = [LmEvalItem.model_validate_json(line) for line in item_lines(cfg, tmp_path)]
    assert sorted(item.context for item in items) == sorted(prompts)
    assert {item.task for item in items} == {"local_abstract_algebra", "local_anatomy"} and len(items) == 9
    scores = harness_scores(cfg, tmp_path, {item.id: answers[item.doc_id] for item in items})
    for name in ("local_mmlu", "local_abstract_algebra", "local_anatomy"):
        _same_metrics(harness["results"][name], scores["results"][name])
    by_task = [scores["results"][t]["exact_match,get_response"] for t in ("local_abstract_algebra", "local_anatomy")]
    assert scores["results"]["local_mmlu"]["exact_match,get_response"] == pytest.approx(
        (by_task[0] * 6 + by_task[1] * 3) / 9
    )
