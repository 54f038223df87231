"""Prefect's result cache of a model stage, read and written without its task engine.

A session at the default granularity runs solve -> adapt as a plain call and is recorded
as a task run afterwards (:class:`ape.tasks.chain.RecordedAnswer`), so no task engine
looks its result up. This does what the engine would: the cache key from the stage's own
cache policy (its SessionSpec and its task's source, :func:`ape.tasks.stages.cached_variant`),
the record in the run's cache folder, the result in Prefect's result storage. The keys and
files are the engine's, so a cache written by a live task run (``task_granularity =
"stage"`` writes its own stages; a cache from before) is read here, and the other way round.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, cast

from prefect.results import ResultStore

from ape.schemas.transcript import SolveRecord
from ape.tasks.stages import SessionSpec
from ape.tasks.storage.local_results import resolved_once

log = logging.getLogger("ape")


class SessionCache:
    """One model stage's cache for one run (the stage as :func:`cached_variant` bound it)."""

    def __init__(self, stage: Any) -> None:
        self.policy = stage.cache_policy
        # what the engine's policy reads of its task run context: the task (name, source)
        self._context = SimpleNamespace(task=stage)
        store = cast(ResultStore, ResultStore().update_for_task(stage, _sync=True))  # type: ignore[call-arg]
        # results not kept in memory too (the task's setting): this store lives as long as the run
        # and the default local storage resolving its folder once (ape.tasks.storage.local_results)
        self.store = store.model_copy(
            update={"cache_result_in_memory": False, "result_storage": resolved_once(store.result_storage)}
        )

    def key(self, spec: SessionSpec) -> str:
        """The cache key the task engine computes for ``stage(spec)``."""
        key = self.policy.compute_key(task_ctx=self._context, inputs={"spec": spec}, flow_parameters={})
        assert key is not None  # a SessionSpec always gives a key
        return str(key)

    def read(self, key: str) -> SolveRecord | None:
        """The cached record, or None when there is none (or it expired)."""
        if not self.store.exists(key):
            return None
        value = self.store.read(key).result
        return value if isinstance(value, SolveRecord) else None

    def write(self, key: str, record: SolveRecord) -> None:
        """Keep ``record`` under ``key`` (over an older one: a refreshed session)."""
        self.store.write(record, key=key)
