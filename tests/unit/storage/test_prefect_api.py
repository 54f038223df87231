"""The one module that talks to Prefect's public API: keys, the client-or-None, artifacts."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from ape.tasks.storage import prefect_api


@pytest.mark.parametrize(
    ("parts", "key"),
    [
        (("My Bench!", "live", "Qwen/Qwen2-7B"), "my-bench-live-qwen-qwen2-7b"),
        (("GPT 4o/mini", "batches"), "gpt-4o-mini-batches"),
        (("é", "", "--"), "benchmark"),
        (("a__b",), "a-b"),
    ],
)
def test_artifact_key_is_a_prefect_key(parts: tuple[str, ...], key: str) -> None:
    assert prefect_api.artifact_key(*parts) == key


def test_artifact_key_is_at_most_200_characters() -> None:
    assert len(prefect_api.artifact_key("x" * 500)) == 200


def test_client_or_none_tells_why_and_yields_none() -> None:
    said: list[BaseException] = []

    def refused() -> Any:
        raise ConnectionError("no server")

    with prefect_api.client_or_none(said.append, refused) as client:
        assert client is None
    assert [str(e) for e in said] == ["no server"]


class _Client:
    def __init__(self) -> None:
        self.entered = self.closed = False
        self.created: list[Any] = []
        self.updated: list[tuple[Any, Any]] = []

    def __enter__(self) -> _Client:
        self.entered = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True
        raise RuntimeError("closing fails quietly")

    def create_artifact(self, artifact: Any) -> Any:
        self.created.append(artifact)
        return SimpleNamespace(id=uuid.uuid4())

    def update_artifact(self, artifact_id: Any, update: Any) -> None:
        self.updated.append((artifact_id, update))


def test_client_or_none_enters_and_closes_the_client() -> None:
    made = _Client()
    with prefect_api.client_or_none(lambda exc: pytest.fail(str(exc)), lambda: made) as client:
        assert client is made and made.entered
    assert made.closed


def test_upsert_artifact_creates_once_then_updates_in_place() -> None:
    client, run = _Client(), uuid.uuid4()
    fields = {"key": "k-live-m", "kind": "markdown", "description": "m: live view", "flow_run_id": run}
    first = prefect_api.upsert_artifact(client, None, data="one", **fields)
    again = prefect_api.upsert_artifact(client, first, data="two", **fields)
    assert again == first
    assert [(a.key, a.type, a.data, a.flow_run_id) for a in client.created] == [("k-live-m", "markdown", "one", run)]
    assert [(i, u.data) for i, u in client.updated] == [(first, "two")]


def test_no_flow_run_outside_a_flow() -> None:
    assert prefect_api.current_flow_run_id() is None


def test_update_variable_leaves_tags_alone_unless_given() -> None:
    sent: list[Any] = []
    client = SimpleNamespace(update_variable=sent.append)
    prefect_api.update_variable(client, "v", 1)
    prefect_api.update_variable(client, "v", 2, ["ape"])
    assert ["tags" in u.model_fields_set for u in sent] == [False, True]
