"""The user's ``[hooks]``: each named callable loaded the one way, with the same error.

``on_batch_saved`` is called with each saved item's batch (:mod:`ape.flows.evaluate`),
``on_regression`` with each regressed model's row (:mod:`ape.tasks.after_run.alerts`); both are
loaded when the run is planned, so a hook that cannot be imported, or is not callable,
is one line before the first model call rather than after the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError
from ape.tasks.plugins.loader import load_object

Hook = Literal["on_batch_saved", "on_regression"]


def load_hook(config: ApeConfig, name: Hook) -> Callable[[Any], Any] | None:
    """The callable ``[hooks] <name>`` names, or None when the config sets none."""
    path = getattr(config.hooks, name)
    if not path:
        return None
    where = f"{config.shown_file()} [hooks] {name}"
    hook = load_object(path, where=where, base_dir=config.base_dir)
    if not callable(hook):
        raise ApeError(f"'{path}' is not callable", where=where)
    return hook
