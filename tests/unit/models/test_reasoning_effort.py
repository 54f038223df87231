"""``[model] reasoning_effort``: mapped per provider, refused where it cannot be said, and part
of the model's fingerprint only when set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError
from ape.tasks.models.build import build_model
from ape.tasks.models.fingerprint import model_fingerprint
from ape.tasks.models.reasoning_effort import merge_args, reasoning_effort_args


def model(**values: Any) -> ModelConfig:
    return ModelConfig(**{"name": "r", "max_retries": 0, **values})


@pytest.mark.parametrize(
    ("values", "local", "expected"),
    [
        ({"provider": "openai", "model": "o", "reasoning_effort": "low"}, False, {"reasoning_effort": "low"}),
        ({"provider": "openai", "model": "o", "reasoning_effort": "none"}, False, {"reasoning_effort": "none"}),
        (
            {"provider": "openai", "model": "q", "base_url": "http://127.0.0.1:8000/v1", "reasoning_effort": "none"},
            True,
            {"reasoning_effort": "none", "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
        ),
        (
            {"provider": "anthropic", "model": "c", "max_tokens": 9000, "reasoning_effort": "medium"},
            False,
            {"thinking": {"type": "enabled", "budget_tokens": 8192}},
        ),
        (
            {"provider": "anthropic", "model": "c", "reasoning_effort": "none"},
            False,
            {"thinking": {"type": "disabled"}},
        ),
        ({"provider": "mock", "reasoning_effort": "max"}, False, {}),
        ({"provider": "openai", "model": "o"}, False, {}),
    ],
)
def test_each_provider_gets_its_own_words(values: dict[str, Any], local: bool, expected: dict[str, Any]) -> None:
    assert reasoning_effort_args(model(**values), local=local) == expected


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"provider": "openai", "model": "o", "reasoning_effort": "max"}, "accepted values: none, minimal, low"),
        ({"provider": "mistralai", "model": "m", "reasoning_effort": "low"}, "provider 'mistralai'"),
        ({"class": "pkg.mod:Model", "reasoning_effort": "low"}, "class 'pkg.mod:Model'"),
        ({"provider": "anthropic", "model": "c", "max_tokens": 1000, "reasoning_effort": "low"}, "above 2048"),
        (
            {"provider": "anthropic", "model": "c", "max_tokens": 9000, "temperature": 0.0, "reasoning_effort": "low"},
            "temperature",
        ),
    ],
)
def test_a_level_the_provider_cannot_express_is_a_config_error(values: dict[str, Any], named: str) -> None:
    with pytest.raises(ApeError) as caught:
        reasoning_effort_args(model(**values), local=False)
    text = str(caught.value)
    assert "[model] 'r'" in text and "reasoning_effort" in text and named in text


def test_an_unknown_level_names_the_accepted_values() -> None:
    with pytest.raises(ValidationError, match="'none', 'minimal', 'low', 'medium', 'high' or 'max'"):
        model(provider="openai", model="o", reasoning_effort="extreme")


def test_build_model_refuses_before_building() -> None:
    with pytest.raises(ApeError, match="accepted values"):
        build_model(
            model(provider="openai", model="o", base_url="http://127.0.0.1:9/v1", reasoning_effort="max"), Path(".")
        )


def test_the_openai_client_sends_it() -> None:
    pytest.importorskip("langchain_openai")
    built = build_model(
        model(provider="openai", model="q", base_url="http://127.0.0.1:9/v1", max_tokens=64, reasoning_effort="none"),
        Path("."),
    )
    inner: Any = built.inner
    assert inner.reasoning_effort == "none"
    # merged with the max_tokens APE sends for local servers, not in place of it
    assert inner.extra_body == {"max_tokens": 64, "chat_template_kwargs": {"enable_thinking": False}}


def test_merge_args_keeps_the_extra_body_there() -> None:
    kwargs: dict[str, Any] = {"extra_body": {"max_tokens": 8}}
    merge_args(kwargs, {"reasoning_effort": "low", "extra_body": {"a": 1}})
    assert kwargs == {"extra_body": {"max_tokens": 8, "a": 1}, "reasoning_effort": "low"}


def test_the_fingerprint_holds_it_only_when_set() -> None:
    plain = model(provider="openai", model="o", base_url="http://127.0.0.1:9/v1")
    low = model(provider="openai", model="o", base_url="http://127.0.0.1:9/v1", reasoning_effort="low")
    tagged = model(provider="openai", model="o", base_url="http://127.0.0.1:9/v1", reasoning_tags=("<r>", "</r>"))
    assert "reasoning_effort" not in model_fingerprint(plain)  # older fingerprints stay what they were
    assert model_fingerprint(low)["reasoning_effort"] == "low"
    assert model_fingerprint(tagged)["reasoning_tags"] == ["<r>", "</r>"]
    assert len({str(model_fingerprint(m)) for m in (plain, low, tagged)}) == 3


@pytest.mark.parametrize("tags", [("<t>", "<t>"), ("", "</t>"), (" ", "</t>")])
def test_reasoning_tags_must_be_two_different_tags(tags: tuple[str, str]) -> None:
    with pytest.raises(ValidationError, match="two different, non-empty tags"):
        model(provider="mock", reasoning_tags=tags)
