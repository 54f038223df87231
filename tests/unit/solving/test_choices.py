"""Log-likelihood scoring of multiple-choice items: requests, acc / acc_norm, confidence, the checker."""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel

from ape.schemas.check import Failed, Passed
from ape.schemas.choices import ChoicesConfig
from ape.schemas.results import Outcome
from ape.schemas.transcript import EntryKind
from ape.tasks.checking.choice import ChoiceChecker
from ape.tasks.models.scoring import ContinuationScore, Scored, ScoreRequest
from ape.tasks.solving.choices import choose, gold_index, predictions, score_choices, score_request, softmax


class Question(BaseModel):
    id: str
    question: str
    choices: list[str]
    answer: int | str


class Scripted:
    """A scorer that answers each continuation with the log-likelihood it was given."""

    def __init__(self, table: dict[str, float], tokens: int = 2):
        self.table = table
        self.tokens = tokens
        self.requests: list[ScoreRequest] = []

    def score(self, request: ScoreRequest) -> Scored:
        self.requests.append(request)
        scores = tuple(ContinuationScore(self.table[c], self.tokens) for c in request.continuations)
        return Scored(scores=scores, calls=len(scores), input_tokens=10 * len(scores), output_tokens=0)


CFG = ChoicesConfig(field="choices", gold="answer")


def session(table: dict[str, float], choices: list[str], answer: int | str, metric: str = "acc", **cfg: object):
    config = ChoicesConfig(field="choices", gold="answer", metric=metric, **cfg)  # type: ignore[arg-type]
    item = Question(id="q", question="?", choices=choices, answer=answer)
    scorer = Scripted(table)
    record = choose(score_choices(scorer, "Question: ?\nAnswer:", item, config), metric)
    verdict = ChoiceChecker(config)(item, record.solution)
    return record, verdict, scorer


def test_acc_takes_the_highest_sum_and_acc_norm_the_highest_per_character():
    # " Paris" (5 chars) -6.0 beats " Lyon" (4) -5.0 per character (-1.2 vs -1.25), not in total
    table = {" Paris": -6.0, " Lyon": -5.0, " Nice": -9.0}
    record, verdict, _ = session(table, ["Paris", "Lyon", "Nice"], 0, metric="acc")
    assert record.solution["acc"] == 1 and record.solution["acc_norm"] == 0
    assert record.solution["choice"] == 1 and isinstance(verdict, Failed)
    assert verdict.metadata == {"metric": "acc", "gold": 0, "choice": 1, "acc": 0.0, "acc_norm": 1.0}
    record, verdict, _ = session(table, ["Paris", "Lyon", "Nice"], 0, metric="acc_norm")
    assert record.solution["choice"] == 0 and isinstance(verdict, Passed)
    assert verdict.metadata["acc"] == 0.0 and verdict.metadata["acc_norm"] == 1.0


def test_confidence_is_the_softmax_of_the_log_likelihoods_at_the_answer():
    table = {" a": -1.0, " b": -2.0, " c": -3.0}
    record, _, _ = session(table, ["a", "b", "c"], 0)
    expected = math.exp(-1.0) / (math.exp(-1.0) + math.exp(-2.0) + math.exp(-3.0))
    assert record.confidence == pytest.approx(expected)
    assert sum(record.solution["probabilities"]) == pytest.approx(1.0)
    assert record.token_nll == pytest.approx(1.0) and record.token_count == 2
    assert record.raw_output == " a" and record.steps == 3 and record.input_tokens == 30


def test_every_choice_is_in_the_transcript_with_its_log_likelihood_and_tokens():
    record, _, _ = session({" x": -0.5, " y": -4.0}, ["x", "y"], "y")
    entries = [e for e in record.transcript if e.kind is EntryKind.CHOICE]
    assert [e.content for e in entries] == [" x", " y"]
    assert [(e.data["loglikelihood"], e.data["token_count"], e.data["chars"]) for e in entries] == [
        (-0.5, 2, 1),
        (-4.0, 2, 1),
    ]


def test_trailing_whitespace_of_the_prompt_moves_into_every_continuation():
    request = score_request("Answer: ", CFG, ["Paris", "Lyon"], 0)
    assert request.context == "Answer:"
    assert request.continuations == ("  Paris", "  Lyon")  # the prompt's space, then the delimiter


def test_letter_continuations_and_their_normalisation():
    cfg = ChoicesConfig(fields=["A", "B", "C"], continuation="letter", gold="answer")
    assert score_request("Q\nAnswer:", cfg, ["x", "yy", "zzz"], None).continuations == (" A", " B", " C")


@pytest.mark.parametrize(
    ("answer", "gold_is", "expected"),
    [(2, "auto", 2), ("2", "auto", 2), ("C", "auto", 2), ("c", "letter", 2), ("three", "auto", 2), ("1", "text", 0)],
)
def test_gold_is_read_as_an_index_a_letter_or_the_text(answer, gold_is, expected):
    cfg = ChoicesConfig(field="choices", gold="answer", gold_is=gold_is)
    choices = ["1", "two", "three"] if gold_is == "text" else ["one", "two", "three"]
    item = Question(id="q", question="?", choices=choices, answer=answer)
    assert gold_index(item, cfg, choices) == expected


def test_a_gold_outside_the_choices_is_a_session_error_naming_it():
    item = Question(id="q", question="?", choices=["a", "b"], answer=5)
    record = score_choices(Scripted({" a": -1, " b": -2}), "Q", item, CFG)
    assert record.outcome is Outcome.ERROR
    assert "[choices] gold 'answer' is 5" in record.error.message  # type: ignore[union-attr]


def test_ties_go_to_the_first_choice_as_numpy_argmax():
    assert predictions([-1.0, -1.0, -2.0], [1, 1, 1]) == (0, 0)
    assert softmax([0.0, 0.0]) == [0.5, 0.5]


def test_the_checker_rederives_the_answer_so_a_changed_metric_needs_no_model_call():
    table = {" Paris": -6.0, " Lyon": -5.0}
    record, _, _ = session(table, ["Paris", "Lyon"], 0, metric="acc")
    item = Question(id="q", question="?", choices=["Paris", "Lyon"], answer=0)
    # the solution saved by an acc run, graded by an acc_norm checker
    verdict = ChoiceChecker(ChoicesConfig(field="choices", gold="answer", metric="acc_norm"))(item, record.solution)
    assert isinstance(verdict, Passed)
