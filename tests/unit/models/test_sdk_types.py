"""The response types pydantic builds lazily are built when a model is, before solver threads race.

OpenAI's SDK declares its models with ``defer_build``; two solver threads parsing their
first responses at once could race in pydantic's rebuild and fail a session with
"BaseModel cannot be instantiated directly". Each check runs in a fresh interpreter, since
any earlier test in this process may already have built the types.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.paths import REPO_ROOT

pytest.importorskip("langchain_openai", reason="the openai extra is not installed")

PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from openai.types.chat import ChatCompletion, ChatCompletionMessage
    from openai.types.chat.chat_completion import Choice
    from openai.types.completion_usage import CompletionUsage
    from prefect.events.schemas.events import Event
    from openai.types import Completion
    types = (ChatCompletion, Choice, ChatCompletionMessage, CompletionUsage, Event, Completion)
    before = [t.__pydantic_complete__ for t in types]
    if sys.argv[1] == "build":
        from ape.schemas.config import ModelConfig
        from ape.tasks.models.build import build_model
        cfg = ModelConfig(name="m", provider="openai", model="x", base_url="http://127.0.0.1:9/v1", api_key_env="APE_PROBE_KEY")
        build_model(cfg, Path("."))
    if sys.argv[1] == "score":
        from ape.schemas.config import ModelConfig
        from ape.tasks.models.scoring import build_scorer
        cfg = ModelConfig(name="m", provider="openai", model="x", base_url="http://127.0.0.1:9/v1", api_key_env="APE_PROBE_KEY")
        build_scorer(cfg, Path("."))
    print(json.dumps({"before": before, "after": [t.__pydantic_complete__ for t in types]}))
    """
)


def _probe(mode: str) -> dict[str, list[bool]]:
    env_path = str(REPO_ROOT)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": env_path, "APE_PROBE_KEY": "k"},
        timeout=120,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_the_types_start_unbuilt_so_the_check_below_means_something() -> None:
    assert _probe("import")["after"] == [False, False, False, False, False, False]


def test_building_an_openai_model_builds_the_response_types_it_will_parse() -> None:
    assert _probe("build")["after"] == [True] * 6


def test_building_a_completions_scorer_builds_the_completion_type_it_will_parse() -> None:
    after = _probe("score")["after"]
    assert after[5] is True and after[4] is True  # Completion, and Prefect's Event
