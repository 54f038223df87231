"""What the final state of a benchmark or evaluate flow run means for its caller."""

from __future__ import annotations

from typing import Any

from prefect.states import State

from ape.flows.evaluate import ItemsFailed


def items_failed(state: State[Any]) -> ItemsFailed | None:
    """None when the flow run completed; its :class:`ItemsFailed` when it finished but more
    items errored than ``fail_on_error`` tolerates (an expected end: the report exists and a
    retry redoes only those items). Anything else is a crash, raised here."""
    if state.is_completed():
        return None
    exc = state.result(raise_on_failure=False)
    if isinstance(exc, ItemsFailed):
        return exc
    raise exc if isinstance(exc, BaseException) else RuntimeError(str(exc))
