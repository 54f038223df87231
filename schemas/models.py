"""Protocols for the model side: ModelAdapters and tool providers."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ape.schemas.results import Generation


@runtime_checkable
class ModelAdapter(Protocol):
    """Any model with one call: a prompt in, one Generation out (mock, local or API)."""

    @property
    def model_id(self) -> str:
        """Read-only here, so frozen models and plain attributes both satisfy the protocol."""
        ...

    def generate(self, prompt: str, task: Any) -> Generation: ...


@runtime_checkable
class ToolProvider(Protocol):
    """A lightweight holder of one LangChain tool (for tools that keep state)."""

    def get_tool(self) -> Any: ...
