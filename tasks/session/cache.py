"""Prefect's result cache of a model stage, read and written without its task engine.

A session at the default granularity runs solve -> adapt as a plain call and is recorded
as a task run afterwards (:class:`ape.tasks.session.chain.RecordedAnswer`), so no task engine
looks its result up. This does what the engine would: the cache key from the stage's own
cache policy (its SessionSpec and its task's source, :func:`ape.tasks.session.stages.cached_variant`),
the record in the run's cache folder, the result in Prefect's result storage. The keys and
files are the engine's, so a cache written by a live task run (``task_granularity =
"stage"`` writes its own stages) is read here, and the other way round.

A record is read as raw bytes and checked here
(:func:`ape.tasks.storage.cache_format.checked_record`), never handed to Prefect to
deserialize: only APE's JSON records are read; anything else (an older APE's pickle cache,
a planted file) is a miss, counted and warned once per run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, cast

from prefect.results import ResultStore

from ape.schemas.transcript import SolveRecord
from ape.tasks.common.write_behind import WriteBehind
from ape.tasks.session.stages import SessionSpec
from ape.tasks.storage.cache_format import REFUSED, Expired, ForeignRecord, checked_record
from ape.tasks.storage.local_results import resolved_once
from ape.tasks.storage.prefect_internals import CacheRecords, task_context, task_result_store
from ape.tasks.storage.runs import CACHE_DIR

log = logging.getLogger("ape")


def combined_key(*keys: str) -> str:
    """Prefect's ``hash_objects(*keys)`` for string keys: the MD5 of the JSON of ``(keys, {})``
    with sorted keys (its ``JSONSerializer``), computed without building that serializer."""
    return hashlib.md5(json.dumps([list(keys), {}], sort_keys=True).encode(), usedforsecurity=False).hexdigest()


class SessionCache:
    """One model stage's cache for one run (the stage as :func:`cached_variant` bound it)."""

    def __init__(self, stage: Any) -> None:
        self.policy = stage.cache_policy
        # what the engine's policy reads of its task run context: the task (name, source)
        self._context = task_context(stage)
        store = task_result_store(stage)
        # results not kept in memory too (the task's setting): this store lives as long as the run
        # and the default local storage resolving its folder once (ape.tasks.storage.local_results)
        self.store = store.model_copy(
            update={"cache_result_in_memory": False, "result_storage": resolved_once(store.result_storage)}
        )
        self.folder = Path(str(cast(CacheRecords, self.policy.key_storage).basepath))  # its records (cached_variant)
        # cached_variant's policy: the SessionSpec's key, then the task source's (fixed for the run)
        policies = list(getattr(self.policy, "policies", []))
        self._spec_policy = policies[0] if len(policies) == 2 else self.policy
        self._source_key: str | None = (
            policies[1].compute_key(task_ctx=self._context, inputs={}, flow_parameters={})
            if len(policies) == 2
            else None
        )
        self._fast: bool | None = None  # known after the first key (see key())
        # who makes the writes' system calls: the caller (None), or one thread for the run's
        # solver threads (the thread feeder's, ape.tasks.common.write_behind)
        self.writer: WriteBehind | None = None

    def key(self, spec: SessionSpec) -> str:
        """The cache key the task engine computes for ``stage(spec)``.

        The engine's compound policy re-reads the task's source and builds a serializer (two
        imports by name under the import lock) for every key: at 256 solver workers that was
        about a sixth of the run's samples. The source's key is the same for the whole run, so
        it is taken once and combined the way Prefect's ``hash_objects`` combines keys
        (:func:`combined_key`). The first key is also computed by the engine's policy; if a
        Prefect version hashes differently, every key comes from the engine's policy, so a
        cache written by live task runs is always found."""
        fast = self._fast
        if fast is None:
            engine = self._engine_key(spec)
            fast = self._fast = (
                self._source_key is not None and combined_key(self._spec_part(spec), self._source_key) == engine
            )
            if not fast:
                log.debug("session cache: Prefect's key differs from the combined one; using its policy for every key")
            return engine
        return combined_key(self._spec_part(spec), cast(str, self._source_key)) if fast else self._engine_key(spec)

    def _engine_key(self, spec: SessionSpec) -> str:
        key = self.policy.compute_key(task_ctx=self._context, inputs={"spec": spec}, flow_parameters={})
        assert key is not None  # a SessionSpec always gives a key
        return str(key)

    def _spec_part(self, spec: SessionSpec) -> str:
        return str(self._spec_policy.compute_key(task_ctx=self._context, inputs={"spec": spec}, flow_parameters={}))

    def read(self, key: str) -> SolveRecord | None:
        """The cached record, or None when there is none, it expired, or it is not APE's
        JSON record (counted and warned: :data:`~ape.tasks.storage.cache_format.REFUSED`)."""
        try:
            content = (self.folder / key).read_bytes()
        except OSError:
            return None
        try:
            _, value = checked_record(content, f"{CACHE_DIR}/{key}")
        except ForeignRecord as exc:
            REFUSED.note(self.folder, str(exc))
            return None
        except (Expired, FileNotFoundError):
            return None
        if value is None:  # kept in a storage block: Prefect reads it, with APE's serializer (checked)
            value = self.store.read(key).result
        if not isinstance(value, SolveRecord):
            REFUSED.note(self.folder, f"{CACHE_DIR}/{key} holds a {type(value).__name__}, not a session record")
            return None
        return value

    def write(self, key: str, record: SolveRecord) -> None:
        """Keep ``record`` under ``key`` (over an older one: a refreshed session); through
        :attr:`writer` when one is set (done before the session's item is saved)."""
        writer = self.writer
        if writer is None:
            self.store.write(record, key=key, holder=_holder())
        else:
            holder = _holder()  # the solver thread's, as when it wrote the files itself
            writer.submit(lambda: self.store.write(record, key=key, holder=holder))


_THREAD = threading.local()


def _holder() -> str:
    """Prefect's default lock holder of this thread (host, process, thread), made once per
    thread: the store builds it on every write otherwise, about 2% of a 256-worker run's
    interpreter time. Solver threads run no event loop, so the default has no task part."""
    made = getattr(_THREAD, "holder", None)
    if made is None or made[0] != os.getpid():  # a forked child makes its own
        made = _THREAD.holder = (os.getpid(), ResultStore.generate_default_holder())
    return made[1]
