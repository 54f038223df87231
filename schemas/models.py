"""Protocols for the model side: ModelAdapters and tool providers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ape.schemas.results import Generation

# the message fields OpenAI-compatible servers put a reply's reasoning in: vLLM, llama.cpp and
# DeepSeek ``reasoning_content``, OpenRouter ``reasoning``
REASONING_FIELDS = ("reasoning_content", "reasoning")


@runtime_checkable
class ModelAdapter(Protocol):
    """Any model with one call: a prompt in, one Generation out (mock, local or API).

    Satisfy it structurally (any object with ``model_id`` and ``generate``, a frozen
    pydantic model included) or subclass it and set ``self.model_id = name`` in
    ``__init__``: at run time ``model_id`` is a plain attribute, not a property, so the
    assignment works."""

    if TYPE_CHECKING:
        # Read-only for type checkers, so frozen models (whose fields are read-only) and
        # plain attributes both satisfy the protocol.
        @property
        def model_id(self) -> str: ...

    else:
        # A bare annotation at run time: a property here would be inherited by subclasses
        # and make ``self.model_id = name`` fail with "property has no setter".
        model_id: str

    def generate(self, prompt: str, task: Any) -> Generation:
        """One answer to ``prompt``; ``task`` is the session's data item."""
        ...


@runtime_checkable
class ToolProvider(Protocol):
    """A lightweight holder of one LangChain tool (for tools that keep state)."""

    def get_tool(self) -> Any:
        """The tool (a LangChain ``BaseTool``) this provider holds."""
        ...
