"""The harness's own aggregated metrics of an ``[task] lm_eval`` run.

After the run, the answers saved in each model's ``results.jsonl`` are handed back to
lm-evaluation-harness through a model object that replays them
(:func:`harness_scores`), and ``lm_eval.evaluator.evaluate`` filters, scores and
aggregates them as it does its own runs: the same per-document metrics as APE's checker,
the task's aggregation (mean, corpus BLEU, ...) with its standard errors, and group
aggregation (MMLU's subjects into its categories and the whole). APE's leaderboard and
intervals sit beside these numbers in the report (``summary.lm_eval`` of report.json and
its "lm-evaluation-harness" table).

A multiple-choice document's saved log-likelihoods are replayed the same way, one per
choice, so the harness's acc and acc_norm and its group aggregation (an MMLU group's
subjects) come from its own code.

A document whose session has no answer (an error) is replayed as the empty answer (as
choices the harness never picks) and counted under ``missing``.
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

from ape.schemas.config import ApeConfig, TaskConfig
from ape.tasks.checking.lm_eval_check import choice_results, cut_at_stops
from ape.tasks.storage.lm_eval_tasks import load_tasks
from ape.tasks.storage.save import read_batches

MISSING_LL = -1e30  # a missing document's choices: a log-likelihood no real one is below


def saved_answers(results_file: Path) -> dict[str, Any]:
    """The answer of each item's first session (run_index 0), by item id: the generated
    text, or a multiple-choice session's ``(loglikelihood, is_greedy)`` per choice."""
    answers: dict[str, Any] = {}
    for batch in read_batches(results_file):
        for session in batch.sessions:
            if session.run_index != 0:
                continue
            if isinstance(session.solution, str):
                answers[batch.item_id] = session.solution
            elif isinstance(session.solution, dict) and "loglikelihoods" in session.solution:
                answers[batch.item_id] = choice_results(session.solution)
    return answers


def _replay_model(answers: dict[str, Any], missing: list[str]) -> Any:
    """An ``lm_eval.api.model.LM`` that answers each request with the saved answer (a
    generation) or the saved log-likelihood of its choice (a multiple-choice request)."""
    base = importlib.import_module("lm_eval.api.model").LM

    class Replay(base):  # type: ignore[misc, valid-type]
        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            out = []
            for request in requests:
                key = f"{request.task_name}/{request.doc_id}"
                answer = answers.get(key)
                if not isinstance(answer, str):
                    missing.append(key)
                until = request.args[1].get("until", [])
                stops = [until] if isinstance(until, str) else list(until)
                out.append(cut_at_stops(answer if isinstance(answer, str) else "", stops))
            return out

        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            out = []
            for request in requests:
                key = f"{request.task_name}/{request.doc_id}"
                answer = answers.get(key)
                if not isinstance(answer, list) or request.idx >= len(answer):
                    if request.idx == 0:
                        missing.append(key)
                    out.append((MISSING_LL, False))
                else:
                    out.append(answer[request.idx])
            return out

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            raise NotImplementedError("APE replays generated answers only")

    return Replay()


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    try:
        number = float(value)
    except (TypeError, ValueError):
        return value if isinstance(value, str | int | bool) or value is None else str(value)
    return number if math.isfinite(number) else None


def harness_scores(cfg: TaskConfig, base_dir: Path, answers: dict[str, Any]) -> dict[str, Any]:
    """``{"results": {task or group: {metric: value}}, "missing": n}`` of ``answers`` (item id
    -> answer) by ``lm_eval.evaluator.evaluate``."""
    evaluator = importlib.import_module("lm_eval.evaluator")
    loaded = load_tasks(cfg, base_dir)
    for task in loaded["tasks"].values():  # the few-shot sampler afresh: the same contexts again
        task.set_fewshot_seed(seed=cfg.fewshot_seed)
    missing: list[str] = []
    results = evaluator.evaluate(lm=_replay_model(answers, missing), task_dict=loaded, limit=cfg.limit)
    for task in loaded["tasks"].values():
        task.set_fewshot_seed(seed=cfg.fewshot_seed)
    table = {**results.get("groups", {}), **results["results"]}
    return {"results": _plain(table), "missing": len(missing)}


def run_scores(cfg: TaskConfig, base_dir: Path, results_files: dict[str, Path]) -> dict[str, Any]:
    """:func:`harness_scores` of every model (model id -> its results file)."""
    lm_eval = importlib.import_module("lm_eval")
    return {
        "task": cfg.lm_eval,
        "harness": f"lm-eval {getattr(lm_eval, '__version__', '?')}",
        "models": {model: harness_scores(cfg, base_dir, saved_answers(path)) for model, path in results_files.items()},
    }


def report_scores(config: ApeConfig) -> dict[str, Any] | None:
    """``summary.lm_eval`` of a ``[task] lm_eval`` run's report (None for other runs): the
    harness's scores of each model's saved answers, or the error that stopped them (the
    leaderboard stands either way)."""
    if config.task is None:
        return None
    files = {m.model_id: config.output_dir_for(m) / config.run.save_file for m in config.model}
    try:
        return run_scores(config.task, config.base_dir, {k: v for k, v in files.items() if v.exists()})
    except Exception as exc:  # the report's other numbers stand; this one says why it is missing
        return {"task": config.task.lm_eval, "error": f"{type(exc).__name__}: {exc}"}


def markdown_lines(scores: dict[str, Any]) -> list[str]:
    """The report's "lm-evaluation-harness" table: one row per model, task or group and metric."""
    title = f"## lm-evaluation-harness: `{scores.get('task')}` ({scores.get('harness', 'harness')})"
    if "error" in scores:
        return [title, "", f"Not computed: {scores['error']}", ""]
    rows = []
    for model, found in scores.get("models", {}).items():
        for name, metrics in found.get("results", {}).items():
            for key, value in metrics.items():
                if "," not in key or "_stderr" in key or not isinstance(value, float):
                    continue
                stderr = metrics.get(key.replace(",", "_stderr,", 1))
                shown = f"{value:.4f}" + (f" ± {stderr:.4f}" if isinstance(stderr, float) else "")
                rows.append(f"| `{model}` | `{name}` | {key.replace(',', ' (', 1)}) | {shown} |")
        if found.get("missing"):
            rows.append(f"| `{model}` | | documents without an answer (scored as empty) | {found['missing']} |")
    lines = [title, "", "| Model | Task | Metric (filter) | Value ± stderr |", "|---|---|---|---|", *rows, ""]
    return lines + ["The harness's own filters, metrics and aggregation of the answers above (docs/lm_eval.md).", ""]
