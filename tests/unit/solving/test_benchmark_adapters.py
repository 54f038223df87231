"""The catalogue's answer extraction: GSM8K's strict-match and flexible-extract take what
lm-evaluation-harness's gsm8k filters take (checked against its own RegexFilter where it is
installed), normalized as its exact match ignores; code from a reply for HumanEval and MBPP."""

from __future__ import annotations

import pytest

from ape.schemas.benchmark_items import GSM8KItem
from ape.tasks.solving.benchmark_adapters import gsm8k_flexible, gsm8k_strict, python_code

REPLIES = [
    "2 + 2 = 4.\n#### 4",
    "So the total is $1,001.",
    "It costs 18 dollars, then 3 more: 21.",
    "#### -7 and later 12",
    "First 3.5, then #### 1,250.",
    "I think the answer is 42.",
    "no digits here",
    "Only 5",
]


@pytest.mark.parametrize("reply", REPLIES)
def test_the_extractions_match_the_harness_filters(reply: str) -> None:
    extraction = pytest.importorskip("lm_eval.filters.extraction", reason="lm-evaluation-harness is not installed")
    strict = extraction.RegexFilter(regex_pattern=r"#### (\-?[0-9\.\,]+)", group_select=0)
    flexible = extraction.RegexFilter(regex_pattern=r"(-?[$0-9.,]{2,})|(-?[0-9]+)", group_select=-1)
    harness_strict = next(iter(strict.apply([[reply]], [{}])))[0]
    harness_flexible = next(iter(flexible.apply([[reply]], [{}])))[0]
    for ours, theirs in ((gsm8k_strict, harness_strict), (gsm8k_flexible, harness_flexible)):
        if theirs == "[invalid]":
            with pytest.raises(ValueError):
                ours(reply)
        else:  # the harness drops commas, $ and a final period before its exact match
            assert ours(reply) == theirs.replace(",", "").replace("$", "").removesuffix(".")


def test_the_target_and_an_answer_compare_after_the_same_normalization() -> None:
    item = GSM8KItem.model_validate({"question": "q", "answer": "1000 + 1 = 1001\n#### 1,001"}, context={"line": 7})
    assert (item.id, item.target) == ("7", "1001")
    assert gsm8k_flexible("So it is $1,001.") == item.target == gsm8k_strict("#### 1,001")


def test_python_code_takes_the_fenced_function() -> None:
    reply = "Here:\n```python\ndef add(a, b):\n    return a + b\n```\nDone."
    assert python_code(reply) == "def add(a, b):\n    return a + b\n"
    with pytest.raises(ValueError, match="defines no function"):
        python_code("```python\nx = 1\n```")
    with pytest.raises(ValueError, match="not valid Python"):
        python_code("```python\ndef f(:\n```")
