"""Task specs, their post-processing and checker, and the mock ModelAdapters (no Prefect)."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError
from ape.schemas.models import ModelAdapter
from ape.schemas.results import Generation
from ape.schemas.taskspec import METRIC_NAMES, POSTPROCESS_NAMES, TASK_TEMPLATE, TaskSpec
from ape.tasks.checking.taskspec import POSTPROCESSORS, TaskSpecChecker, load_tasks, postprocess, write_tasks
from ape.tasks.models.adapter_chat import AdapterChatModel
from ape.tasks.models.build import build_model
from ape.tasks.models.managed import ManagedChatModel
from ape.tasks.models.mocks.demo_adapters import (
    REGISTRY_PATH,
    BiasedAdapter,
    NoisyAdapter,
    RandomAdapter,
    RuleBasedAdapter,
    demo_adapters,
    model_entry,
    registered_adapter,
    unregister_adapter,
)
from ape.tasks.solving.render import render
from tests.helpers.paths import REPO_ROOT

FIXTURE = REPO_ROOT / "examples" / "demo" / "tasks.jsonl"


@pytest.fixture(scope="module")
def tasks() -> list[TaskSpec]:
    return load_tasks(FIXTURE)


@pytest.fixture(scope="module")
def checker() -> TaskSpecChecker:
    return TaskSpecChecker()


def grade(adapter, tasks, checker):
    """(task, generation, verdict) for every task, as the pipeline would produce them."""
    out = []
    for task in tasks:
        gen = adapter.generate(render(TASK_TEMPLATE, task), task)
        out.append((task, gen, checker(task, gen.text)))
    return out


# ---------------------------------------------------------------- the fixture


def test_fixture_has_ten_tasks_covering_every_metric_and_two_categories(tasks):
    assert len(tasks) == 10
    assert {t.metric for t in tasks} == set(METRIC_NAMES)
    assert len({t.category for t in tasks}) >= 2
    for task in tasks:
        assert task.few_shot.strip() and task.prompt.strip() and task.references
        assert task.postprocess in POSTPROCESS_NAMES
    rendered = render(TASK_TEMPLATE, tasks[0])
    assert rendered == tasks[0].few_shot + tasks[0].prompt


def test_fixture_code_tasks_accept_their_reference_solution(tasks, checker):
    code = [t for t in tasks if t.metric == "code_exec"]
    assert code
    for task in code:
        verdict = checker(task, task.reference)
        assert verdict.score == 1.0, verdict


# ---------------------------------------------------------------- validation messages


def _write(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


GOOD = {"id": "t1", "category": "c", "metric": "exact_match", "prompt": "Q", "reference": "a"}


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"metric": "bleu"}, "metric", "exact_match"),
        ({"postprocess": "upper"}, "postprocess", "first_line"),
        ({"prompt": ""}, "prompt", "at least 1"),
        ({"colour": "red"}, "colour", "Extra inputs"),
        ({"metric": "code_exec"}, None, "'tests' is required"),
        ({"tests": "assert True"}, None, "only applies to metric 'code_exec'"),
        ({"postprocess": "lower", "reference": "Yes"}, None, "lower case"),
        ({"reference": []}, None, "at least one"),
    ],
)
def test_invalid_task_names_task_field_and_line(tmp_path, change, field, words):
    path = _write(tmp_path, [GOOD, {**GOOD, "id": "t2", **change}])
    with pytest.raises(ApeError) as info:
        load_tasks(path)
    text = str(info.value)
    assert "task 't2'" in text
    assert f"{path}:2" in text
    assert words in text
    if field is not None:
        assert f"field '{field}'" in text


def test_task_without_id_and_duplicate_ids_are_errors(tmp_path):
    bad = {k: v for k, v in GOOD.items() if k != "id"}
    with pytest.raises(ApeError, match="a task without an id: field 'id'"):
        load_tasks(_write(tmp_path, [bad]))
    with pytest.raises(ApeError, match="task 't1': duplicate id"):
        load_tasks(_write(tmp_path, [GOOD, GOOD]))
    with pytest.raises(ApeError, match="invalid JSON"):
        (tmp_path / "broken.jsonl").write_text("{nope\n")
        load_tasks(tmp_path / "broken.jsonl")


def test_write_tasks_round_trips(tmp_path, tasks):
    path = write_tasks(tasks, tmp_path / "copy.jsonl")
    assert load_tasks(path) == tasks


# ---------------------------------------------------------------- post-processing and checker


def test_every_schema_rule_has_a_postprocessor():
    assert set(POSTPROCESSORS) == set(POSTPROCESS_NAMES)


@pytest.mark.parametrize(
    ("rule", "text", "expected"),
    [
        ("none", " a ", " a "),
        ("strip", "  a b \n", "a b"),
        ("first_line", "\n  first  \nsecond", "first"),
        ("lower", "  YES ", "yes"),
        ("extract_code", "Code:\n```python\nx = 1\n```\nbye", "x = 1"),
        ("extract_code", "x = 2", "x = 2"),
        ("last_number", "3 then 1,200.0", "1200"),
        ("last_number", "no digits", ""),
    ],
)
def test_postprocess_rules(rule, text, expected):
    assert postprocess(rule, text) == expected


def test_unknown_rule_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown post-processing rule 'upper'"):
        postprocess("upper", "x")


def test_checker_applies_rule_then_metric_and_reports_the_metric(checker):
    task = TaskSpec(id="t", category="c", metric="exact_match", prompt="Q", reference="42", postprocess="last_number")
    passed = checker(task, "so the answer is 42")
    failed = checker(task, "so the answer is 41")
    assert (passed.score, passed.metadata["metric"]) == (1.0, "exact_match")
    assert type(passed).__name__ == "Passed" and type(failed).__name__ == "Failed"
    assert failed.metadata["processed"] == "41"
    graded = TaskSpec(id="g", category="c", metric="rouge_l", prompt="Q", reference="a b c d")
    half = checker(graded, "a b x y")
    assert half.score == pytest.approx(0.5) and type(half).__name__ == "Passed"  # graded: >= 0.5


def test_checker_runs_code_tasks_and_rejects_other_items(checker):
    task = TaskSpec(
        id="c",
        category="c",
        metric="code_exec",
        prompt="Q",
        reference="x",
        postprocess="extract_code",
        tests="assert f(1) == 2\nassert f(2) == 4",
    )
    half = checker(task, "```python\ndef f(x):\n    return 2 if x == 1 else 0\n```")
    assert half.score == 0.5 and half.metadata["passed"] == 1 and half.metadata["metric"] == "code_exec"
    with pytest.raises(TypeError, match="TaskSpecChecker grades TaskSpec items"):
        checker({"id": "x"}, "text")


# ---------------------------------------------------------------- the mock adapters


def test_mocks_satisfy_the_protocol_and_return_valid_generations(tasks):
    for adapter in demo_adapters():
        assert isinstance(adapter, ModelAdapter)
        for task in tasks:
            gen = adapter.generate("prompt", task)
            assert isinstance(gen, Generation)
            assert 0.0 <= gen.confidence <= 1.0
            assert gen.token_count >= 1
            # the token statistics agree with the confidence (geometric-mean probability)
            assert math.exp(-gen.token_nll / gen.token_count) == pytest.approx(max(gen.confidence, 1e-9), rel=1e-3)


def test_mocks_are_deterministic_and_independent_of_call_order(tasks):
    for adapter in demo_adapters():
        forward = [adapter.generate("p", t) for t in tasks]
        backward = [adapter.generate("p", t) for t in reversed(tasks)][::-1]
        assert forward == backward
    assert [NoisyAdapter(seed=1).generate("p", t) for t in tasks] != [
        NoisyAdapter(seed=2).generate("p", t) for t in tasks
    ]


def test_rule_based_earns_full_marks_on_every_task(tasks, checker):
    for task, gen, verdict in grade(RuleBasedAdapter(), tasks, checker):
        assert verdict.score == 1.0, (task.id, gen.text, verdict)
        assert gen.confidence >= 0.85


def test_rule_based_with_error_rate_one_gets_nothing_right(tasks, checker):
    results = grade(RuleBasedAdapter(error_rate=1.0), tasks, checker)
    assert not any(type(v).__name__ == "Passed" for _, _, v in results)


def test_noisy_is_often_wrong_but_always_confident(tasks, checker):
    results = grade(NoisyAdapter(seed=2), tasks, checker)
    wrong = sum(type(v).__name__ == "Failed" for _, _, v in results)
    assert wrong > len(tasks) / 2
    assert min(g.confidence for _, g, _ in results) >= 0.85


def test_biased_is_right_on_its_category_and_wrong_elsewhere(tasks, checker):
    results = grade(BiasedAdapter(strong_category="language"), tasks, checker)
    by_category = Counter((t.category, type(v).__name__) for t, _, v in results)
    language = sum(t.category == "language" for t in tasks)
    assert by_category[("language", "Passed")] == language
    assert by_category[("reasoning", "Passed")] == 0


def test_random_scores_near_nothing_with_spread_confidence(tasks, checker):
    results = grade(RandomAdapter(seed=4), tasks, checker)
    assert sum(v.score for _, _, v in results) / len(results) < 0.2
    confidences = [g.confidence for _, g, _ in results]
    assert max(confidences) - min(confidences) > 0.3


def test_mock_arguments_are_validated():
    with pytest.raises(ValueError, match="error_rate"):
        NoisyAdapter(error_rate=1.5)
    with pytest.raises(ValueError, match="Extra inputs"):
        RuleBasedAdapter(accuracy=0.9)


def test_mocks_need_a_task_with_a_reference():
    with pytest.raises(ValueError, match="'reference' field"):
        RuleBasedAdapter().generate("p", {"id": "x"})


# ---------------------------------------------------------------- adapters as config entries


def test_pydantic_adapter_becomes_a_class_path_entry_that_rebuilds_the_same_model(tasks):
    adapter = BiasedAdapter(seed=7, strong_category="reasoning")
    entry, key = model_entry(adapter)
    assert key is None
    assert entry["class"] == "ape.tasks.models.mocks.demo_adapters:BiasedAdapter"
    assert entry["name"] == "biased" and entry["args"]["seed"] == 7
    built = build_model(ModelConfig.model_validate(entry), REPO_ROOT)
    assert isinstance(built, ManagedChatModel) and built.model_id == "biased"
    assert isinstance(built.inner, AdapterChatModel)
    assert [built.inner.adapter.generate("p", t) for t in tasks] == [adapter.generate("p", t) for t in tasks]


class _PlainAdapter:
    """An adapter that is not a pydantic model: it goes through the registry."""

    def __init__(self):
        self.model_id = "plain"

    def generate(self, prompt, task):
        return Generation(text="x", confidence=0.5)


@pytest.fixture
def unregister_at_end() -> Iterator[Callable[[str], str]]:
    """Keys passed to it are taken out of the process-wide adapter registry after the test,
    passed or failed."""
    keys: list[str] = []

    def register(key: str) -> str:
        keys.append(key)
        return key

    yield register
    for key in keys:
        unregister_adapter(key)


def test_other_adapters_go_through_the_in_process_registry(unregister_at_end):
    adapter = _PlainAdapter()
    entry, key = model_entry(adapter)
    unregister_at_end(key)
    assert entry["class"] == REGISTRY_PATH and entry["args"] == {"key": key}
    assert registered_adapter(key) is adapter
    built = build_model(ModelConfig.model_validate(entry), REPO_ROOT)
    assert isinstance(built.inner, AdapterChatModel) and built.inner.adapter is adapter
    assert built.invoke("p").content == "x"
    unregister_adapter(key)
    with pytest.raises(ApeError, match="no adapter is registered"):
        registered_adapter(key)


def test_a_non_adapter_is_rejected_with_a_clear_message():
    with pytest.raises(ApeError, match="not a ModelAdapter"):
        model_entry(object())
