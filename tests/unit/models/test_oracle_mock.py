"""The mocks that answer from the session's item: ``oracle`` (chat and log-likelihood) and
``scripted`` keyed by item id. Whole runs with 1 and 4 workers: tests/integration/test_mock_workers.py."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from pydantic import BaseModel, Field, ValidationError

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError
from ape.tasks.models.build import build_model
from ape.tasks.models.mocks.chat import MockChatModel
from ape.tasks.models.mocks.oracle import is_right, wrong_value
from ape.tasks.models.mocks.scorer import MockScorer, mock_scorer
from ape.tasks.models.score_types import ScoreRequest
from ape.tasks.models.session_item import current_session_item, session_item
from ape.tasks.solving.choices import predictions


class Item(BaseModel):
    id: str
    question: str
    answer: int
    reference: str = Field(default="", alias="ref")


def within_binomial(hits: int, n: int, p: float) -> bool:
    return abs(hits - n * p) <= 4 * math.sqrt(n * p * (1 - p)) + 1


def ask(model: MockChatModel, item: object, item_id: str, run_index: int = 0) -> str:
    with session_item(item, item_id, run_index):
        return str(model.invoke([HumanMessage("What is it?")]).content)


def test_the_session_item_is_set_only_inside_the_block() -> None:
    assert current_session_item() is None
    with session_item({"a": 1}, "x", 2) as current:
        assert current_session_item() == current and current.run_index == 2
    assert current_session_item() is None


def test_oracle_accuracy_is_within_a_binomial_bound_and_independent_of_order_and_instance() -> None:
    n, accuracy = 2000, 0.8
    items = [Item(id=f"q{i}", question=f"q {i}", answer=i * 7) for i in range(n)]
    args = {"behaviour": "oracle", "field": "answer", "accuracy": accuracy, "seed": 1, "template": "ANSWER: {{answer}}"}
    first = {item.id: ask(MockChatModel(**args), item, item.id) for item in items}
    hits = sum(first[item.id] == f"ANSWER: {item.answer}" for item in items)
    assert within_binomial(hits, n, accuracy), hits
    # wrong answers are numbers too (the adapter reads them), never the right one
    assert all(text.startswith("ANSWER: ") and text[8:].lstrip("-").isdigit() for text in first.values())
    # one instance, the items shuffled (another worker, another order): the same answers
    model = MockChatModel(**args)
    shuffled = items[:]
    random.Random(0).shuffle(shuffled)
    assert {item.id: ask(model, item, item.id) for item in shuffled} == first
    # another seed draws other items; accuracy 0 and 1 are all wrong and all right
    assert {item.id: ask(MockChatModel(**{**args, "seed": 2}), item, item.id) for item in items} != first
    assert all(ask(MockChatModel(**{**args, "accuracy": 1.0}), i, i.id) == f"ANSWER: {i.answer}" for i in items[:50])
    assert all(ask(MockChatModel(**{**args, "accuracy": 0.0}), i, i.id) != f"ANSWER: {i.answer}" for i in items[:50])


def test_oracle_draws_per_item_or_with_sampling_per_session() -> None:
    item = Item(id="q1", question="?", answer=5)
    per_item = MockChatModel(behaviour="oracle", field="answer", accuracy=0.5, seed=4)
    assert len({ask(per_item, item, "q1", run) for run in range(20)}) == 1
    sampled = MockChatModel(behaviour="oracle", field="answer", accuracy=0.5, seed=4, sampling=True)
    answers = [ask(sampled, item, "q1", run) for run in range(40)]
    assert "5" in answers and any(a != "5" for a in answers)
    assert answers == [ask(sampled, item, "q1", run) for run in range(40)]  # reproducible per session
    assert [a == "5" for a in answers] == [is_right(4, "q1", run, 0.5, sampling=True) for run in range(40)]


def test_oracle_template_sees_the_item_fields_by_alias_and_answers_from_an_alias() -> None:
    item = Item(id="q1", question="2 + 3", answer=5, ref="five")
    model = MockChatModel(behaviour="oracle", field="ref", template="{{question}} is {{answer}} <&>")
    assert ask(model, item, "q1") == "2 + 3 is five <&>"  # no HTML escaping: code keeps its < and &


@pytest.mark.parametrize(
    ("value", "choices", "check"),
    [
        (7, None, lambda w: isinstance(w, int) and 1 <= abs(w - 7) <= 3),
        (2.5, None, lambda w: isinstance(w, float) and w != 2.5),
        ("72", None, lambda w: w != "72" and w.lstrip("-").isdigit()),
        (True, None, lambda w: w is False),
        ("Paris", None, lambda w: isinstance(w, str) and "paris" not in w.lower()),
        (1, ["a", "b", "c"], lambda w: w in (0, 2)),
        ("B", ["a", "b", "c"], lambda w: w in ("A", "C")),
        ("b", ["a", "b", "c"], lambda w: w in ("a", "c")),
        ("Lyon", ["Paris", "Lyon"], lambda w: w == "Paris"),
        ("2", ["x", "y", "z"], lambda w: w in ("0", "1")),
    ],
)
def test_a_wrong_value_is_never_the_right_one_and_keeps_its_form(value, choices, check) -> None:
    for seed in range(30):
        wrong = wrong_value(value, (seed,), choices)
        assert wrong != value and check(wrong), (value, wrong)


def test_oracle_multiple_choice_answers_another_choice_when_wrong() -> None:
    model = MockChatModel(
        behaviour="oracle", field="gold", choices="options", accuracy=0.0, template="Answer: {{answer}}"
    )
    item = {"gold": "C", "options": ["1", "2", "3", "4"]}
    answers = {ask(model, item, f"x{i}") for i in range(40)}
    assert answers == {"Answer: A", "Answer: B", "Answer: D"}


def test_oracle_fixed_wrong_answer() -> None:
    model = MockChatModel(behaviour="oracle", field="answer", accuracy=0.0, wrong="I_DO_NOT_KNOW")
    assert ask(model, {"answer": 3}, "a") == "I_DO_NOT_KNOW"


@pytest.mark.parametrize(
    ("args", "item", "message"),
    [
        ({"field": "answr"}, {"answer": 1}, "the item has no field 'answr'"),
        ({"field": "answer", "template": "{{answer}} {{reasoning}}"}, {"answer": 1}, r"\{\{ reasoning \}\}"),
        ({"field": "answer", "choices": "opts", "accuracy": 0.0}, {"answer": 1}, "no field 'opts'"),
    ],
)
def test_oracle_errors_name_what_is_missing(args, item, message) -> None:
    model = MockChatModel(behaviour="oracle", **args)
    with pytest.raises(ValueError, match=message):
        ask(model, item, "a")


def test_oracle_and_keyed_scripted_outside_a_session_say_so() -> None:
    for model in (
        MockChatModel(behaviour="oracle", field="answer"),
        MockChatModel(behaviour="scripted", responses={"a": "1"}),
    ):
        with pytest.raises(ValueError, match="belongs to no session"):
            model.invoke("hi")


def test_scripted_by_item_id_answers_each_item_its_response_on_every_call() -> None:
    model = MockChatModel(behaviour="scripted", responses={"q1": "one", "q2": "two"})
    assert [ask(model, {}, "q2"), ask(model, {}, "q1"), ask(model, {}, "q2")] == ["two", "one", "two"]
    with pytest.raises(ValueError, match="no response for item 'q3'"):
        ask(model, {}, "q3")
    # the list form still answers in turn, per instance, whatever the item
    listed = MockChatModel(behaviour="scripted", responses=["a", "b"])
    assert [ask(listed, {}, "q1"), ask(listed, {}, "q1"), ask(listed, {}, "q1")] == ["a", "b", "a"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"behaviour": "oracle"}, "needs 'field'"),
        ({"behaviour": "scripted", "responses": {}}, "needs 'responses'"),
        ({"behaviour": "echo", "field": "answer"}, "'field' is an argument of behaviour 'oracle'"),
        ({"behaviour": "arithmetic", "template": "{{answer}}!"}, "'template' is an argument of behaviour 'oracle'"),
    ],
)
def test_mock_arguments_are_checked(args, message) -> None:
    with pytest.raises(ValidationError, match=message):
        MockChatModel(**args)


def test_an_oracle_without_field_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ApeError, match="needs 'field'"):
        build_model(ModelConfig(name="o", provider="mock", model="oracle"), tmp_path)
    built = build_model(ModelConfig(name="o", provider="mock", model="oracle", args={"field": "answer"}), tmp_path)
    assert isinstance(built.inner, MockChatModel) and built.inner.behaviour == "oracle"


# ------------------------------------------------------------------ the log-likelihood oracle


def mc_request(i: int, count: int) -> ScoreRequest:
    texts = [f" choice {k}" + " long" * ((i * 7 + k * 3) % 5) for k in range(count)]
    return ScoreRequest(f"Question {i}?\nAnswer:", tuple(texts), i % count)


def test_the_log_likelihood_oracle_is_right_on_its_share_by_acc_and_acc_norm() -> None:
    n, accuracy = 1500, 0.6
    scorer = mock_scorer(ModelConfig(name="o", provider="mock", model="oracle", args={"accuracy": accuracy}), Path())
    assert isinstance(scorer, MockScorer) and scorer.behaviour == "oracle"
    hits = 0
    for i in range(n):
        request = mc_request(i, 2 + i % 4)
        with session_item({}, f"m{i}"):
            lls = [s.loglikelihood for s in scorer.score(request).scores]
        assert all(ll < 0 for ll in lls)
        chars = [len(c.strip()) for c in request.continuations]
        acc, acc_norm = predictions(lls, chars)
        assert acc == acc_norm  # both rules pick the oracle's answer
        right = is_right(0, f"m{i}", 0, accuracy, sampling=False)
        assert (acc == request.gold) == right
        hits += right
    assert within_binomial(hits, n, accuracy), hits


def test_the_log_likelihood_oracle_takes_no_field_and_needs_a_session(tmp_path: Path) -> None:
    with pytest.raises(ApeError, match="takes no 'field'"):
        mock_scorer(ModelConfig(name="o", provider="mock", args={"behaviour": "oracle", "field": "answer"}), tmp_path)
    scorer = MockScorer(behaviour="oracle")
    with pytest.raises(ValueError, match="has none"):
        scorer.score(mc_request(1, 3))


def test_the_documented_log_likelihood_oracle_passes_preflight(tmp_path: Path) -> None:
    """docs/config/choices.md's oracle block, in the multiple-choice example: ``ape validate``
    and ``ape run`` check a [choices] model as the scorer a worker builds, not as a chat mock
    (which needs a ``field`` the log-likelihood oracle refuses)."""
    import re
    import shutil

    from ape.config import load_config
    from ape.flows.preflight import preflight
    from tests.helpers.paths import REPO_ROOT

    block = re.search(
        r"```toml\n(\[\[model\]\]\nname = \"knows-70\".*?)```", (REPO_ROOT / "docs/config/choices.md").read_text(), re.S
    )
    assert block is not None, "the oracle block left docs/config/choices.md"
    folder = tmp_path / "mc"
    shutil.copytree(REPO_ROOT / "examples/multiple_choice", folder, ignore=shutil.ignore_patterns("output"))
    config = folder / "config.toml"
    config.write_text(config.read_text(encoding="utf-8") + "\n" + block.group(1), encoding="utf-8")
    checked = preflight(load_config(config))
    assert [setup.model_cfg.name for setup in checked.setups][-1] == "knows-70"
