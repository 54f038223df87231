"""A real local LLM through build_model: text, token usage and log-probabilities.

Runs SmolLM2-135M under a llama.cpp server on loopback (the ``llm`` extra);
skipped with the reason when that is not installed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from ape.schemas.config import ModelConfig
from ape.tasks.models.build import build_model
from ape.tasks.models.managed import ManagedChatModel
from tests.helpers.llm_server import MODEL_NAME, llm_missing

pytestmark = [
    pytest.mark.llm,
    pytest.mark.slow,
    pytest.mark.skipif(llm_missing() is not None, reason=llm_missing() or ""),
]


def real_model(base_url: str, **overrides: Any) -> Any:
    values: dict[str, Any] = {
        "provider": "openai",
        "model": MODEL_NAME,
        "base_url": base_url,
        "temperature": 0.0,
        "max_tokens": 24,
        "timeout_s": 60.0,
        "retry_initial_s": 0.1,
        "retry_max_s": 1.0,
    }
    values.update(overrides)
    return build_model(ModelConfig(**values), Path("."))


def test_chat_call_returns_text_usage_and_logprobs(llama_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APE_LOCAL_LLM_KEY", "local-key")
    # a local endpoint gets no log-probabilities by default (they are slow there): ask for them
    model = real_model(llama_server, api_key_env="APE_LOCAL_LLM_KEY", logprobs=True)
    assert isinstance(model, ManagedChatModel)

    reply = model.invoke("What is 2 + 3? Answer with a number.")

    assert isinstance(reply.content, str) and reply.content.strip()
    usage = reply.usage_metadata
    assert usage is not None
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    tokens = reply.response_metadata["logprobs"]["content"]
    assert len(tokens) == usage["output_tokens"]
    assert all(isinstance(t["logprob"], float) and t["logprob"] <= 0.0 for t in tokens)
    confidence = math.exp(sum(t["logprob"] for t in tokens))
    assert 0.0 < confidence <= 1.0


def test_logprobs_off_and_no_key_needed(llama_server: str) -> None:
    reply = real_model(llama_server, logprobs=False, max_tokens=8).invoke("Say hello.")
    assert isinstance(reply.content, str) and reply.content.strip()
    assert not reply.response_metadata.get("logprobs")
