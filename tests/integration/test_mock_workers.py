"""Mock models that answer from the item, through whole runs on a real Prefect server, with 1 and
4 solver workers: the ``oracle`` (generated answers and ``[choices]`` log-likelihoods) scores
its ``accuracy`` within a binomial bound, and item by item the same with any number of
workers; ``scripted`` with responses keyed by item id scores what its script holds.

The stumble these reproduce: ``scripted`` cycled its list per solver worker, so 20 responses
in file order, 14 of them right, scored 5% with 4 workers; and no mock could answer a
benchmark of one's own from its items.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from ape.config import load_config
from ape.tasks.models.mocks.oracle import is_right
from tests.helpers.paths import REPO_ROOT
from tests.helpers.runner import make_benchmark, read_results

pytestmark = pytest.mark.usefixtures("prefect_server")


def run(path: Path) -> dict[str, bool]:
    """Run the config; each item's verdict (one session per item)."""
    from ape.flows.benchmark import benchmark

    config = load_config(path)
    state = benchmark(config, return_state=True)
    assert state.is_completed(), state
    sessions = [s for batch in read_results(config.run.output / "results.jsonl") for s in batch["sessions"]]
    assert all(s["outcome"] == "SOLVED" for s in sessions), {s["outcome"] for s in sessions}
    return {s["item_id"]: bool(s["correct"]) for s in sessions}


def within_binomial(hits: int, n: int, p: float) -> bool:
    """``hits`` of ``n`` is within four standard deviations of ``n * p`` (about 1 in 15,000)."""
    return abs(hits - n * p) <= 4 * math.sqrt(n * p * (1 - p)) + 1


def by_workers(tmp_path: Path, make) -> dict[int, dict[str, bool]]:
    """The verdicts of one benchmark run with 1 and with 4 solver workers (a folder each)."""
    return {workers: run(make(tmp_path / f"w{workers}", workers)) for workers in (1, 4)}


def test_oracle_scores_its_accuracy_alike_with_1_and_4_workers(tmp_path):
    n, accuracy = 300, 0.8

    def make(folder: Path, workers: int) -> Path:
        return make_benchmark(
            folder,
            n,
            model_args='behaviour = "oracle", field = "answer", accuracy = 0.8, seed = 1, '
            'template = "The answer is {{answer}}."',
            run=f"solver_workers = {workers}",
        )

    verdicts = by_workers(tmp_path, make)
    assert verdicts[1] == verdicts[4]  # item by item, not only on average
    hits = sum(verdicts[1].values())
    assert len(verdicts[1]) == n and within_binomial(hits, n, accuracy), hits
    # and it is the documented draw: right exactly where is_right says so
    assert verdicts[1] == {f"i{i}": is_right(1, f"i{i}", 0, accuracy, sampling=False) for i in range(n)}


def test_scripted_responses_by_item_id_score_the_same_with_1_and_4_workers(tmp_path):
    n = 20
    right = {i for i in range(n) if i % 10 not in (3, 7, 8)}  # 14 of 20, wrong ones spread out

    def make(folder: Path, workers: int) -> Path:
        table = ", ".join(f'i{i} = "The sum is {(i + 2) + (3 * i + 1) + (0 if i in right else 1)}."' for i in range(n))
        return make_benchmark(
            folder,
            n,
            model_args=f'behaviour = "scripted", responses = {{ {table} }}',
            run=f"solver_workers = {workers}",
        )

    verdicts = by_workers(tmp_path, make)
    assert len(right) == 14
    for workers in (1, 4):
        assert verdicts[workers] == {f"i{i}": i in right for i in range(n)}, workers


def choices_benchmark(folder: Path, workers: int, n: int, model_args: str, metric: str) -> Path:
    """``n`` multiple-choice items (2 to 5 choices of different lengths) on the example's schema."""
    folder.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "examples" / "multiple_choice" / "mc_items.py", folder)
    with (folder / "data.jsonl").open("w") as handle:
        for i in range(n):
            count = 2 + i % 4
            choices = [f"choice {k}" + " long" * ((i * 7 + k * 3) % 5) for k in range(count)]
            row = {
                "id": f"m{i}",
                "category": "c",
                "question": f"Question {i}?",
                "choices": choices,
                "answer": i % count,
            }
            handle.write(json.dumps(row) + "\n")
    path = folder / "config.toml"
    path.write_text(
        f'''name = "mc"
[data]
file = "data.jsonl"
schema = "mc_items:ChoiceQuestion"

[prompt]
template = "Question: {{{{ question }}}}\\nAnswer:"

[choices]
field = "choices"
gold = "answer"
metric = "{metric}"

[[model]]
name = "oracle"
provider = "mock"
args = {{ {model_args} }}

[run]
solver_workers = {workers}
output = "out"

[cli]
progress = false
'''
    )
    return path


@pytest.mark.parametrize("metric", ["acc", "acc_norm"])
def test_the_log_likelihood_oracle_scores_its_accuracy_alike_with_1_and_4_workers(tmp_path, metric):
    n, accuracy = 200, 0.7
    args = 'behaviour = "oracle", accuracy = 0.7, seed = 3'
    verdicts = by_workers(tmp_path, lambda folder, workers: choices_benchmark(folder, workers, n, args, metric))
    assert verdicts[1] == verdicts[4]
    hits = sum(verdicts[1].values())
    assert within_binomial(hits, n, accuracy), hits
    # not accuracy plus chance, as the default mock: wrong exactly where the draw says so
    assert verdicts[1] == {f"m{i}": is_right(3, f"m{i}", 0, accuracy, sampling=False) for i in range(n)}
