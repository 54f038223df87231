"""A ``ModelAdapter`` seen as a LangChain chat model, so every model runs one dialogue.

A ModelAdapter has one call, ``generate(prompt, task) -> Generation | str``: a prompt
string in, no conversation, no tools. :class:`AdapterChatModel` turns a message list
into that prompt the way adapters have always been prompted:

- the first call gets the opening: the system message and the prompt as
  ``f"{system}\\n\\n{prompt}"`` (just the prompt without a system message);
- a later call (a reformat attempt) gets the opening, ``"\\n\\n"`` and the newest
  human message: the adapter never sees its own earlier answers.

The task an adapter answers differs per session while the wrapper is built once
per model, so the item comes with each call as the invoke keyword ``item``
(``model.bind(item=...)``); only adapter-backed models are given it
(:func:`takes_item`). A :class:`ape.schemas.results.Generation`'s confidence and
token statistics land in the reply's ``response_metadata`` (``confidence``,
``token_nll``, ``token_count``), where the solver reads them. Adapters cannot call
tools: ``bind_tools`` raises ``NotImplementedError``, which the solver turns into
its usual error for models without tool support.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from pydantic import ConfigDict, PlainValidator

from ape.schemas.models import ModelAdapter

__all__ = ["AdapterChatModel", "adapter_prompt", "is_model_adapter", "takes_item"]


def is_model_adapter(obj: Any) -> bool:
    """A ModelAdapter: anything with a callable ``generate`` (``model_id`` is optional here)."""
    return not isinstance(obj, (BaseChatModel, Runnable, type)) and callable(getattr(obj, "generate", None))


def _adapter(value: Any) -> Any:
    if not is_model_adapter(value):
        raise ValueError(f"{type(value).__name__} is not a ModelAdapter (it needs a generate(prompt, task) method)")
    return value


def _text(message: BaseMessage) -> str:
    return str(message.text)


def adapter_prompt(messages: Sequence[BaseMessage]) -> str:
    """The prompt string an adapter gets for a conversation (see the module docstring)."""
    system = [_text(m) for m in messages if isinstance(m, SystemMessage)]
    humans = [index for index, m in enumerate(messages) if isinstance(m, HumanMessage)]
    if not humans:
        raise ValueError("a ModelAdapter needs a human message to answer")
    opening = _text(messages[humans[0]])
    if system and system[0]:
        opening = f"{system[0]}\n\n{opening}"
    if len(humans) == 1:
        return opening
    return f"{opening}\n\n{_text(messages[humans[-1]])}"


class AdapterChatModel(BaseChatModel):
    """A ``BaseChatModel`` that answers through a ModelAdapter's ``generate``."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    adapter: Annotated[ModelAdapter, PlainValidator(_adapter)]

    @property
    def model_id(self) -> str:
        return str(getattr(self.adapter, "model_id", type(self.adapter).__name__))

    @property
    def _llm_type(self) -> str:
        return "ape-model-adapter"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"adapter": self.model_id}

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        *,
        item: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        if kwargs:
            raise TypeError(f"a ModelAdapter takes no call options besides 'item' (got {', '.join(sorted(kwargs))})")
        generation = self.adapter.generate(adapter_prompt(messages), item)
        if isinstance(generation, str):
            text, metadata = generation, {}
        else:
            text = str(getattr(generation, "text", ""))
            metadata = {
                key: value
                for key in ("confidence", "token_nll", "token_count")
                if (value := getattr(generation, key, None)) is not None
            }
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text, response_metadata=metadata))])

    def bind_tools(
        self,
        tools: Sequence[Any],
        *,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        raise NotImplementedError(
            f"the ModelAdapter '{self.model_id}' answers a prompt with generate(prompt, task) and cannot call tools"
        )


def takes_item(model: Any) -> bool:
    """Whether ``model`` answers through a ModelAdapter, so its calls need the session's item.

    Sees through wrappers that keep their chat model as ``inner`` (the retry and
    rate-limit wrapper) and through ``bind``.
    """
    seen: set[int] = set()
    while model is not None and id(model) not in seen:
        seen.add(id(model))
        if isinstance(model, AdapterChatModel):
            return True
        model = getattr(model, "inner", None) or getattr(model, "bound", None)
    return False
