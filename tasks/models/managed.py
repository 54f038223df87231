"""The one wrapper every built model runs in: a retry policy and a rate limiter per request.

:class:`ManagedChatModel` is a thin ``BaseChatModel`` rather than a
``RunnableRetry``, because solvers need ``bind_tools`` on what they get and
because a retry must cover exactly one request (each attempt takes its own
rate-limit token and concurrency slot, and no slot is held while backing off).
The policy and the limiter themselves live in :mod:`ape.tasks.models.limits.policy`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

from ape.schemas.config import DEFAULT_REASONING_TAGS
from ape.tasks.models.chat_wrapper import WrappedChatModel
from ape.tasks.models.limits.limiter import Limiter
from ape.tasks.models.limits.meter import meter_for
from ape.tasks.models.limits.policy import RetryPolicy

__all__ = ["ManagedChatModel"]


class ManagedChatModel(WrappedChatModel):
    """A chat model whose every request goes through a retry policy and a rate limiter.

    It delegates ``_generate`` to the inner model, so usage metadata, response
    metadata (log-probabilities) and tool calls come through unchanged; tools bound
    through :class:`ape.tasks.models.chat_wrapper.WrappedChatModel` are bound on this
    wrapper, so tool-calling requests are retried and limited too.
    """

    retry: RetryPolicy
    limiter: Limiter
    # [model] reasoning_tags: the solver splits the reasoning off each reply with them
    reasoning_tags: tuple[str, str] = DEFAULT_REASONING_TAGS
    wrapper_kind: ClassVar[str] = "managed"

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
