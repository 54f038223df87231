"""The one wrapper for the chat models APE makes: tools bound on the wrapper itself.

Solvers call ``bind_tools`` on the model they get, and each request with tools must still
go through the wrapper's own ``_generate`` (a retry and a rate-limit slot per request in
:class:`ape.tasks.models.managed.ManagedChatModel`, a provider batch in
:class:`ape.tasks.models.batch.chat.BatchChatModel`, the scripted answer of
:class:`ape.tasks.models.mocks.chat.MockChatModel`). So the tools are formatted once, by the
inner model where there is one (each provider has its own format) or OpenAI's way, and the
request arguments that result are bound on the wrapper, never on the inner model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable, RunnableBinding
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, PrivateAttr

from ape.schemas.errors import ApeError

__all__ = ["ToolBindingChatModel", "WrappedChatModel"]


class ToolBindingChatModel(BaseChatModel):
    """A chat model that binds its tools on itself; :meth:`tool_kwargs` says what a request
    with tools carries (OpenAI's ``tools=[{"type": "function", ...}]`` unless overridden)."""

    def tool_kwargs(self, tools: Sequence[Any], **kwargs: Any) -> dict[str, Any]:
        return {"tools": [convert_to_openai_tool(tool) for tool in tools], **kwargs}

    def bind_tools(
        self,
        tools: Sequence[Any],
        *,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(**self.tool_kwargs(tools, **kwargs))


class WrappedChatModel(ToolBindingChatModel):
    """A chat model around ``inner``: the inner model formats the tools, the wrapper sends.

    Usage, response metadata (log-probabilities) and tool calls come through unchanged;
    ``_llm_type`` is ``ape-<wrapper_kind>-<inner's>``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    inner: BaseChatModel
    model_id: str
    wrapper_kind: ClassVar[str] = "wrapped"

    _settings: dict[str, Any] | None = PrivateAttr(default=None)

    def _get_invocation_params(self, stop: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
        """LangChain's invocation parameters, from the model's settings taken once: its own
        method rebuilds them on every call under ``warnings.catch_warnings`` (process-wide
        state), about 3% of the interpreter at 256 solver workers; a wrapper's settings do not
        change once it is built."""
        if self._settings is None:
            self._settings = super()._get_invocation_params()
        return {**self._settings, "stop": stop, **kwargs}

    @property
    def _llm_type(self) -> str:
        return f"ape-{self.wrapper_kind}-{self.inner._llm_type}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return dict(self.inner._identifying_params)

    def tool_kwargs(self, tools: Sequence[Any], **kwargs: Any) -> dict[str, Any]:
        """The inner model's own tool format, refused with one error naming the model section
        when it has none or binds something other than itself (its tool calls would bypass
        the wrapper)."""
        try:
            bound = self.inner.bind_tools(tools, **kwargs)
        except NotImplementedError as exc:
            reason = f" ({exc})" if str(exc) else ""
            raise ApeError(
                f"model class {type(self.inner).__name__} does not support tools{reason}",
                where=f"[model] '{self.model_id}'",
                hint="use a model with tool calling, or remove the [tools] sections",
            ) from None
        if not isinstance(bound, RunnableBinding) or bound.bound is not self.inner:
            raise TypeError(
                f"{type(self.inner).__name__}.bind_tools returned {type(bound).__name__}, not a "
                "binding of the model itself; APE cannot route its tool calls through the wrapper"
            )
        return dict(bound.kwargs)
