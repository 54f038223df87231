"""Scorers of log-likelihood runs: an OpenAI-compatible /v1/completions endpoint (a fake one on the
loopback), the log-probability canary that refuses a bad one, chat-only models, the mock."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import pytest

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError
from ape.tasks.checking.canary import CanaryFailed
from ape.tasks.checking.logprob_canary import check_endpoint
from ape.tasks.models.completions import CompletionsScorer
from ape.tasks.models.mocks.scorer import MockScorer
from ape.tasks.models.scoring import ScoreRequest, build_scorer, check_can_score
from tests.helpers.fake_completions import completions, logprob, tokens_of
from tests.helpers.fake_openai import LoopbackEndpoint, Request, error_body


@pytest.fixture
def endpoint() -> Iterator[callable]:
    made: list[LoopbackEndpoint] = []

    def start(respond) -> tuple[LoopbackEndpoint, ModelConfig, CompletionsScorer]:
        server = LoopbackEndpoint(respond)
        made.append(server)
        cfg = ModelConfig(name="fake", provider="openai", model="local", base_url=server.base_url, max_retries=0)
        scorer = build_scorer(cfg, base_dir=__import__("pathlib").Path("."))
        assert isinstance(scorer, CompletionsScorer)
        return server, cfg, scorer

    yield start
    for server in made:
        server.close()


def test_an_endpoint_with_right_prompt_log_probabilities_passes_and_scores_the_continuations(endpoint):
    server, cfg, scorer = endpoint(completions("right"))
    assert check_endpoint(scorer, cfg) == "The capital of France is"
    scored = scorer.score(ScoreRequest("Question: capital?\nAnswer:", (" Paris", " Lyon city")))
    words = tokens_of("Question: capital?\nAnswer:")
    paris = logprob(words, " Paris")
    lyon = logprob(words, " Lyon") + logprob([*words, " Lyon"], " city")
    assert [s.loglikelihood for s in scored.scores] == pytest.approx([paris, lyon])
    assert [s.token_count for s in scored.scores] == [1, 2]
    assert scored.calls == 2 and scored.input_tokens == len(words) * 2 + 3 and scored.output_tokens == 2
    body = server.requests[-1].body
    assert body["echo"] is True and body["max_tokens"] == 1 and body["logprobs"] == 1 and body["temperature"] == 0


def test_an_endpoint_that_returns_log_probabilities_only_for_generated_tokens_is_refused(endpoint):
    _, cfg, scorer = endpoint(completions("generated"))
    with pytest.raises(CanaryFailed) as caught:
        check_endpoint(scorer, cfg)
    line = str(caught.value)
    assert "\n" not in line
    assert "only for generated tokens" in line and "fake" in line


def test_an_endpoint_that_shifts_prompt_log_probabilities_is_refused(endpoint):
    _, cfg, scorer = endpoint(completions("shifted"))
    with pytest.raises(CanaryFailed, match="shifted by one token"):
        check_endpoint(scorer, cfg)


def test_a_chat_only_endpoint_is_refused_by_the_canary(endpoint):
    _, cfg, scorer = endpoint(lambda request: (404, error_body("This is a chat model and not supported")))
    with pytest.raises(CanaryFailed, match="chat-only endpoint has no completions route"):
        check_endpoint(scorer, cfg)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"provider": "anthropic", "model": "claude"}, "provider 'anthropic' is chat-only"),
        ({"class": "pkg.mod:Chat"}, "cannot score continuations"),
        ({"provider": "openai", "model": "gpt-4o"}, "api.openai.com's models are chat models"),
    ],
)
def test_models_that_cannot_score_text_get_one_clear_error(section, message):
    with pytest.raises(ApeError, match=re.escape(message)) as caught:
        check_can_score(ModelConfig(**section))
    assert "log-likelihood scoring ([choices]) needs" in str(caught.value)


def test_the_mock_scorer_is_deterministic_and_knows_about_its_accuracy():
    request = ScoreRequest("Question: ?\nAnswer:", (" a", " bb", " ccc"), gold=2)
    knows = MockScorer(name="k", accuracy=1.0)
    first, second = knows.score(request), knows.score(request)
    assert first == second
    lls = [s.loglikelihood for s in first.scores]
    assert max(range(3), key=lls.__getitem__) == 2 and all(ll < 0 for ll in lls)
    guesses = [MockScorer(accuracy=0.0, seed=s).score(request) for s in range(40)]
    picks = {max(range(3), key=[x.loglikelihood for x in g.scores].__getitem__) for g in guesses}
    assert picks != {2}  # without knowledge it does not always find the gold
    assert all(not math.isnan(s.loglikelihood) for g in guesses for s in g.scores)


def test_a_dropped_request_is_retried_like_a_chat_call(endpoint):
    answer = completions("right")
    failed: list[int] = []

    def flaky(request: Request):
        if not failed:
            failed.append(1)
            return 503, error_body("overloaded")
        return answer(request)

    server = LoopbackEndpoint(flaky)
    try:
        cfg = ModelConfig(
            name="flaky", provider="openai", model="local", base_url=server.base_url, max_retries=2, retry_initial_s=0
        )
        scorer = build_scorer(cfg, base_dir=__import__("pathlib").Path("."))
        scored = scorer.score(ScoreRequest("Q:", (" a",)))
    finally:
        server.close()
    assert len(server.requests) == 2 and scored.scores[0].token_count == 1
