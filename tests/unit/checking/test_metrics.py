"""Metrics against their reference implementations, the correct signal, and the score stage."""

from __future__ import annotations

import pickle
import random

import pytest
from pydantic import BaseModel

from ape.schemas.check import Failed, Passed
from ape.schemas.errors import ApeError
from ape.schemas.results import CheckResult, CheckStatus, ErrorInfo, Outcome
from ape.tasks.checking.builtin import BuiltinChecker, builtin_checker, score_session
from ape.tasks.checking.metrics import (
    METRICS,
    accuracy,
    bleu4,
    correct_from_score,
    exact_match,
    f1,
    lcs_length,
    rouge_l,
    squad_normalize,
    tokenize_13a,
)

sacrebleu = pytest.importorskip("sacrebleu")
rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")

# Words chosen to exercise tokenisation: punctuation, digits with separators, hyphens,
# HTML entities, case, non-ASCII letters, newlines and markup.
VOCABULARY = (
    "the The cat sat on mat dog ran . , ! ? ; : ' \" ( ) [ ] { } - -- a-b 12-3 3.5 1,000 "
    "x.y end. U.S. &amp; &quot; &lt; &gt; <skipped> é Über naïve café 42 hello-\nworld "
    "foo\nbar tab\tbed ... $5 50% @user #tag a/b e-mail"
).split(" ")


def random_text(rng: random.Random, longest: int = 18) -> str:
    words = [rng.choice(VOCABULARY) for _ in range(rng.randint(0, longest))]
    return rng.choice([" ", "", "  "]).join(words) if rng.random() < 0.15 else " ".join(words)


# --- BLEU-4 -------------------------------------------------------------------------------


def test_bleu4_matches_sacrebleu_sentence_bleu_on_random_pairs():
    rng = random.Random(1234)
    for _ in range(600):
        hypothesis = random_text(rng)
        references = [random_text(rng) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
        expected = sacrebleu.sentence_bleu(hypothesis, references).score / 100.0
        assert bleu4(hypothesis, references) == pytest.approx(expected, abs=1e-6), (
            hypothesis,
            references,
        )


def test_bleu4_matches_sacrebleu_on_close_paraphrases():
    """Random pairs rarely share long n-grams; these do, so high scores are compared too."""
    rng = random.Random(99)
    base = "the quick brown fox jumps over the lazy dog , and 3.5 cats sat on 1,000 mats .".split()
    for _ in range(300):
        tokens = list(base)
        for _ in range(rng.randint(0, 4)):
            position = rng.randrange(len(tokens))
            action = rng.choice(["drop", "swap", "insert"])
            if action == "drop" and len(tokens) > 1:
                tokens.pop(position)
            elif action == "swap":
                tokens[position] = rng.choice(VOCABULARY)
            else:
                tokens.insert(position, rng.choice(base))
        hypothesis, reference = " ".join(tokens), " ".join(base)
        expected = sacrebleu.sentence_bleu(hypothesis, [reference]).score / 100.0
        assert bleu4(hypothesis, reference) == pytest.approx(expected, abs=1e-6)


def test_bleu4_edges():
    assert bleu4("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(1.0)
    assert bleu4("", "the cat") == 0.0
    assert bleu4("dog", "the cat") == 0.0
    assert tokenize_13a("Hello, world. 3.5 and 1,000!") == ["Hello", ",", "world", ".", "3.5", "and", "1,000", "!"]


# --- ROUGE-L ------------------------------------------------------------------------------


def test_rouge_l_matches_rouge_score_on_random_pairs():
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    rng = random.Random(4321)
    for _ in range(600):
        prediction, target = random_text(rng), random_text(rng)
        expected = scorer.score(target, prediction)["rougeL"].fmeasure
        assert rouge_l(prediction, target) == pytest.approx(expected, abs=1e-6), (prediction, target)


def test_rouge_l_takes_the_best_reference_like_score_multi():
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    rng = random.Random(7)
    for _ in range(100):
        prediction = random_text(rng)
        targets = [random_text(rng) for _ in range(3)]
        expected = scorer.score_multi(targets, prediction)["rougeL"].fmeasure
        assert rouge_l(prediction, targets) == pytest.approx(expected, abs=1e-6)


def test_lcs_length_small_cases():
    assert lcs_length("abcbdab", "bdcaba") == 4
    assert lcs_length([], ["a"]) == 0
    assert lcs_length("abc", "abc") == 3


# --- F1 (SQuAD v1.1) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("The Cat!", "cat", 1.0),
        ("  Paris\n\tFrance ", "paris france", 1.0),
        ("Barack Obama", "Obama", 2 / 3),
        ("the the cat", "cat cat", 2 / 3),  # articles vanish; counts are clipped
        ("a an the", "the", 0.0),  # both sides empty after normalising: 0, as in SQuAD v1.1
        ("anthem theater", "anthem theater", 1.0),  # articles only as whole words
        ("state-of-the-art", "state of the art", 0.0),  # hyphens vanish, joining the words
        ("U.S. army", "us army", 1.0),
        ("1,000 men", "1000 men", 1.0),
        ("café’s", "café's", 0.0),  # the curly apostrophe is not ASCII punctuation
        ("blue green", "green blue", 1.0),  # a bag of tokens: order does not matter
        ("", "something", 0.0),
    ],
)
def test_f1_squad_normalisation(prediction, reference, expected):
    assert f1(prediction, reference) == pytest.approx(expected)


def test_f1_best_over_references_and_normal_form():
    assert f1("red car", ["a blue truck", "the red car"]) == pytest.approx(1.0)
    assert squad_normalize("An Apple, the PIE; a tart.") == "apple pie tart"


# --- exact match and accuracy -------------------------------------------------------------


def test_exact_match_is_strict_but_ignores_surrounding_whitespace():
    assert exact_match(" 42\n", "42") == 1.0
    assert exact_match("Paris", "paris") == 0.0
    assert exact_match("a  b", "a b") == 0.0
    assert exact_match("B", ["A", "B"]) == 1.0
    with pytest.raises(ValueError, match="empty"):
        exact_match("x", [])


def test_accuracy_compares_labels_and_numbers():
    assert accuracy("3.0", 3) == 1.0
    assert accuracy("1,000", "1000") == 1.0
    assert accuracy(" b ", "B") == 1.0
    assert accuracy("New  York", "new york") == 1.0
    assert accuracy("3.01", 3) == 0.0
    assert accuracy(True, "true") == 1.0
    assert accuracy("C", ["A", "B"]) == 0.0


# --- the correct signal -------------------------------------------------------------------


def test_correct_from_score_thresholds():
    for metric in ("exact_match", "accuracy", "code_exec", None):
        assert correct_from_score(metric, 1.0)
        assert not correct_from_score(metric, 0.99)
    for metric in ("f1", "bleu4", "rouge_l"):
        assert correct_from_score(metric, 0.5)
        assert not correct_from_score(metric, 0.4999)
    assert not correct_from_score("f1", float("nan"))


def test_metrics_registry_names():
    assert set(METRICS) == {"exact_match", "accuracy", "f1", "bleu4", "rouge_l", "code_exec"}


# --- built-in checkers ----------------------------------------------------------------------


class QA(BaseModel):
    id: str
    question: str
    answer: str | list[str]


def test_builtin_checker_passes_and_fails_with_scores():
    checker = builtin_checker("exact_match", {})
    assert checker.metric == "exact_match"
    item = QA(id="1", question="?", answer="Paris")
    passed = checker(item, "Paris")
    assert isinstance(passed, Passed) and passed.score == 1.0
    assert passed.metadata["metric"] == "exact_match"
    failed = checker(item, "Lyon")
    assert isinstance(failed, Failed) and failed.score == 0.0 and "below" in failed.reason


def test_builtin_graded_checker_uses_half_as_pass_mark_and_other_field():
    checker = builtin_checker("f1", {"field": "question"})
    item = QA(id="1", question="Barack Obama", answer="x")
    result = checker(item, "Obama")
    assert isinstance(result, Passed) and result.score == pytest.approx(2 / 3)
    assert isinstance(checker(item, "Michelle"), Failed)


def test_builtin_checker_reads_mappings_and_pickles():
    checker = builtin_checker("accuracy", {"field": "label"})
    assert isinstance(checker({"label": "B"}, "b"), Passed)
    clone = pickle.loads(pickle.dumps(checker))
    assert isinstance(clone, BuiltinChecker) and clone.metric == "accuracy"


def test_unknown_checker_name_suggests_the_nearest():
    with pytest.raises(ApeError) as info:
        builtin_checker("exact_mach", {})
    assert info.value.where == "[checker] implementation"
    assert "did you mean 'exact_match'?" in str(info.value)


def test_bad_checker_args_name_the_key():
    with pytest.raises(ApeError) as info:
        builtin_checker("f1", {"feild": "answer"})
    assert info.value.where == "[checker] args"
    assert "feild" in str(info.value) and "did you mean 'field'?" in str(info.value)
    with pytest.raises(ApeError, match="timeout_s"):
        builtin_checker("code_exec", {"timeout_s": -1})


def test_missing_reference_field_is_a_clear_error():
    checker = builtin_checker("exact_match", {"field": "anwser"})
    with pytest.raises(ApeError) as info:
        checker(QA(id="1", question="q", answer="a"), "a")
    assert "anwser" in str(info.value) and "did you mean 'answer'?" in str(info.value)


# --- score_session -------------------------------------------------------------------------


def check(status: CheckStatus, score: float | None) -> CheckResult:
    error = ErrorInfo(type="KeyError", message="x") if status is CheckStatus.ERROR else None
    return CheckResult(status=status, score=score, error=error)


def test_score_session_only_scores_solved_sessions_with_a_clean_check():
    assert score_session(Outcome.SOLVED, check(CheckStatus.PASSED, 1.0), "exact_match") == (1.0, True)
    assert score_session(Outcome.SOLVED, check(CheckStatus.FAILED, 0.4), "f1") == (0.4, False)
    assert score_session(Outcome.SOLVED, check(CheckStatus.PASSED, 0.6), "rouge_l") == (0.6, True)
    assert score_session(Outcome.SOLVED, check(CheckStatus.ERROR, None), None) == (0.0, False)
    assert score_session(Outcome.SOLVED, None, None) == (0.0, False)
    for outcome in (Outcome.PARSING_FAILED, Outcome.GAVE_UP, Outcome.ERROR):
        assert score_session(outcome, check(CheckStatus.PASSED, 1.0), None) == (0.0, False)


def test_score_session_user_checker_verdict_decides():
    assert score_session(Outcome.SOLVED, check(CheckStatus.PASSED, None), None) == (1.0, True)
    assert score_session(Outcome.SOLVED, check(CheckStatus.FAILED, None), None) == (0.0, False)
    assert score_session(Outcome.SOLVED, check(CheckStatus.PASSED, 0.7), None) == (0.7, True)
