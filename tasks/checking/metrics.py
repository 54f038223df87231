"""Built-in metrics: each scores one prediction against its reference as a float in [0, 1].

These are the scorers behind the built-in checkers (``implementation = "f1"`` and so
on in the ``[checker]`` section). All of them accept either one reference or a list
of acceptable references:

- ``exact_match``: 1.0 when the prediction equals a reference after stripping
  surrounding whitespace (case and inner spacing matter), else 0.0.
- ``accuracy``: 1.0 when the prediction names the same label or value as a reference:
  numbers compare as numbers (``"3.0"`` equals ``3``), text compares case-insensitively
  with runs of whitespace collapsed. Meant for multiple choice and classification.
- ``f1``: SQuAD v1.1 token F1 (lower case, punctuation and the articles a/an/the
  removed, whitespace collapsed), best over the references. As in SQuAD v1.1, a
  pair whose normal form is empty on either side scores 0.
- ``bleu4``: sentence BLEU-4 with the mteval-13a tokenisation, exponential smoothing
  and effective order, divided by 100 (the conventions of sacrebleu's
  ``sentence_bleu`` defaults). Several references are pooled as BLEU defines it.
- ``rouge_l``: ROUGE-L F-measure over lower-cased alphanumeric tokens, no stemming
  (the conventions of the rouge-score package), best over the references.
- ``code_exec``: runs the candidate code and then the item's tests in a sandboxed
  Python process; the score is the **share of tests passed** (see
  :func:`ape.tasks.checking.code.code_exec.run_code`).

Whether a score counts as correct follows :func:`correct_from_score`.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ape.tasks.checking.code.code_exec import run_code
from ape.tasks.checking.code.sandbox import SandboxSetting

Metric = Callable[[Any, Any], float]


# Metrics whose score is all-or-nothing by nature: correct only at a full score.
PASS_FAIL_METRICS = frozenset({"exact_match", "accuracy", "code_exec"})
GRADED_THRESHOLD = 0.5
PASS_FAIL_THRESHOLD = 1.0


def correct_from_score(metric: str | None, score: float) -> bool:
    """The correct signal: a full score for pass/fail metrics, at least 0.5 for graded ones.

    ``metric=None`` stands for a user checker that answers pass/fail, so it needs 1.0
    too. Any other name is taken as a graded metric.
    """
    if score is None or math.isnan(score):
        return False
    threshold = PASS_FAIL_THRESHOLD if metric is None or metric in PASS_FAIL_METRICS else GRADED_THRESHOLD
    return score >= threshold


def references_of(reference: Any) -> list[Any]:
    """A reference may be one value or a list/tuple of acceptable values."""
    if isinstance(reference, (list, tuple)):
        if not reference:
            raise ValueError("the list of references is empty; give at least one reference")
        return list(reference)
    return [reference]


def as_text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


# --- exact match and accuracy -------------------------------------------------------------


def exact_match(prediction: Any, reference: Any) -> float:
    """1.0 when the prediction equals one reference, ignoring surrounding whitespace."""
    text = as_text(prediction).strip()
    return float(any(text == as_text(ref).strip() for ref in references_of(reference)))


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(as_text(value).strip().replace(",", ""))
    except ValueError:
        return None


def _same_label(prediction: Any, reference: Any) -> bool:
    left, right = _as_number(prediction), _as_number(reference)
    if left is not None and right is not None:
        return math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-12)
    norm = lambda value: " ".join(as_text(value).split()).casefold()  # noqa: E731
    return norm(prediction) == norm(reference)


def accuracy(prediction: Any, reference: Any) -> float:
    """1.0 when the prediction is the same label or number as one reference."""
    return float(any(_same_label(prediction, ref) for ref in references_of(reference)))


# --- SQuAD v1.1 F1 -----------------------------------------------------------------------

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def squad_normalize(text: str) -> str:
    """Lower case, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _f_measure(matched: int, predicted: int, expected: int) -> float:
    """Harmonic mean of precision (matched / predicted) and recall (matched / expected)."""
    if matched == 0:
        return 0.0
    precision, recall = matched / predicted, matched / expected
    return 2 * precision * recall / (precision + recall)


def _token_f1(prediction_tokens: list[str], reference_tokens: list[str]) -> float:
    overlap = sum((Counter(prediction_tokens) & Counter(reference_tokens)).values())
    return _f_measure(overlap, len(prediction_tokens), len(reference_tokens))


def f1(prediction: Any, reference: Any) -> float:
    """SQuAD v1.1 token F1, best over the references."""
    tokens = squad_normalize(as_text(prediction)).split()
    return max(_token_f1(tokens, squad_normalize(as_text(ref)).split()) for ref in references_of(reference))


# --- BLEU-4 ------------------------------------------------------------------------------

# The mteval-v13a tokenisation, as a list of (pattern, replacement) steps applied in order.
_13A_STEPS = [
    # split off every ASCII symbol except period, comma and hyphen-minus (those follow)
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),
    # period and comma become tokens unless they sit between digits
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),
    # a hyphen after a digit is a token of its own
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
]
_13A_ENTITIES = (("&quot;", '"'), ("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">"))
BLEU_MAX_ORDER = 4


def tokenize_13a(text: str) -> list[str]:
    """Tokens of ``text`` under the mteval-v13a rules WMT uses for BLEU."""
    text = text.rstrip().replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    for entity, char in _13A_ENTITIES:
        text = text.replace(entity, char)
    text = f" {text} "
    for pattern, replacement in _13A_STEPS:
        text = pattern.sub(replacement, text)
    return text.split()


def _ngrams(tokens: Sequence[str], max_order: int) -> Counter[tuple[str, ...]]:
    counts: Counter[tuple[str, ...]] = Counter()
    for order in range(1, max_order + 1):
        for start in range(len(tokens) - order + 1):
            counts[tuple(tokens[start : start + order])] += 1
    return counts


def _closest_length(hyp_len: int, ref_lens: list[int]) -> int:
    """The reference length nearest the hypothesis length; the shorter one on a tie."""
    return min(ref_lens, key=lambda ref_len: (abs(hyp_len - ref_len), ref_len))


def bleu4(prediction: Any, reference: Any) -> float:
    """Sentence BLEU-4 in [0, 1]: 13a tokens, exponential smoothing, effective order."""
    hyp = tokenize_13a(as_text(prediction))
    refs = [tokenize_13a(as_text(ref)) for ref in references_of(reference)]
    ref_counts: Counter[tuple[str, ...]] = Counter()
    for ref in refs:
        ref_counts |= _ngrams(ref, BLEU_MAX_ORDER)  # per n-gram, the most any reference has
    hyp_counts = _ngrams(hyp, BLEU_MAX_ORDER)
    matches = [0] * BLEU_MAX_ORDER
    totals = [0] * BLEU_MAX_ORDER
    for gram, count in hyp_counts.items():
        totals[len(gram) - 1] += count
        matches[len(gram) - 1] += min(count, ref_counts.get(gram, 0))
    if not any(matches):
        return 0.0
    hyp_len, ref_len = len(hyp), _closest_length(len(hyp), [len(r) for r in refs])
    brevity = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
    log_sum, order, smoothing = 0.0, 0, 1.0
    for total, match in zip(totals, matches):
        if total == 0:  # effective order: stop at the first order the hypothesis lacks
            break
        order += 1
        if match == 0:  # exponential smoothing: 1 / (2^k * total) for the k-th empty order
            smoothing *= 2
            log_sum += math.log(1.0 / (smoothing * total))
        else:
            log_sum += math.log(match / total)
    return brevity * math.exp(log_sum / order)


# --- ROUGE-L -----------------------------------------------------------------------------

_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def rouge_tokens(text: str) -> list[str]:
    """Lower-cased runs of ASCII letters and digits; everything else separates tokens."""
    return _NON_ALNUM.sub(" ", text.lower()).split()


def lcs_length(left: Sequence[str], right: Sequence[str]) -> int:
    """Length of the longest common subsequence, in O(len(right)) memory."""
    if len(right) > len(left):
        left, right = right, left
    row = [0] * (len(right) + 1)
    for token in left:
        diagonal = 0
        for j, other in enumerate(right, start=1):
            above = row[j]
            row[j] = diagonal + 1 if token == other else max(above, row[j - 1])
            diagonal = above
    return row[-1]


def _rouge_l_pair(prediction_tokens: list[str], reference_tokens: list[str]) -> float:
    if not prediction_tokens or not reference_tokens:
        return 0.0
    return _f_measure(lcs_length(prediction_tokens, reference_tokens), len(prediction_tokens), len(reference_tokens))


def rouge_l(prediction: Any, reference: Any) -> float:
    """ROUGE-L F-measure, best over the references."""
    tokens = rouge_tokens(as_text(prediction))
    return max(_rouge_l_pair(tokens, rouge_tokens(as_text(ref))) for ref in references_of(reference))


# --- code execution (the sandbox and harness live in tasks/checking/code/code_exec.py) ----------------------


def code_exec(
    code: Any, tests: Any, *, timeout_s: float = 5.0, memory_mb: int = 512, sandbox: SandboxSetting = "auto"
) -> float:
    """Share of the item's tests the candidate code passes, run in a sandbox (see :func:`run_code`)."""
    return run_code(as_text(code), as_text(tests), timeout_s=timeout_s, memory_mb=memory_mb, sandbox=sandbox).score


METRICS: dict[str, Metric] = {
    "exact_match": exact_match,
    "accuracy": accuracy,
    "f1": f1,
    "bleu4": bleu4,
    "rouge_l": rouge_l,
    "code_exec": code_exec,
}
