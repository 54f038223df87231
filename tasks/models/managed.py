"""The one wrapper every built model runs in: a retry policy and a rate limiter per request.

:class:`ManagedChatModel` is a thin ``BaseChatModel`` rather than a
``RunnableRetry``, because solvers need ``bind_tools`` on what they get and
because a retry must cover exactly one request (each attempt takes its own
rate-limit token and concurrency slot, and no slot is held while backing off).
The policy and the limiter themselves live in :mod:`ape.tasks.models.limits`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import Runnable, RunnableBinding
from pydantic import ConfigDict

from ape.schemas.config import DEFAULT_REASONING_TAGS
from ape.schemas.errors import ApeError
from ape.tasks.models.limits import Limiter, RetryPolicy
from ape.tasks.models.meter import meter_for

__all__ = ["ManagedChatModel"]


class ManagedChatModel(BaseChatModel):
    """A chat model whose every request goes through a retry policy and a rate limiter.

    It delegates ``_generate`` to the inner model, so usage metadata, response
    metadata (log-probabilities) and tool calls come through unchanged.
    ``bind_tools`` lets the inner model format the tools its own way and binds
    the result on this wrapper, so tool-calling requests are retried and
    limited too.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    inner: BaseChatModel
    retry: RetryPolicy
    limiter: Limiter
    model_id: str
    # [model] reasoning_tags: the solver splits the reasoning off each reply with them
    reasoning_tags: tuple[str, str] = DEFAULT_REASONING_TAGS

    @property
    def _llm_type(self) -> str:
        return f"ape-managed-{self.inner._llm_type}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_id": self.model_id, **self.inner._identifying_params}

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        def attempt() -> ChatResult:
            with self.limiter.acquire(), meter_for(self.model_id).request():  # counted for the live view
                return self.inner._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

        return self.retry.call(attempt)

    def bind_tools(
        self,
        tools: Sequence[Any],
        *,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
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
                "binding of the model itself; APE cannot route its tool calls through retries"
            )
        return self.bind(**bound.kwargs)
