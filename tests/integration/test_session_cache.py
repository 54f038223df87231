"""A recorded session reads and writes Prefect's own result cache: what the task engine
cached, SessionCache finds (a cache from a live task run, or from before), and what
SessionCache wrote, the engine reports as Cached without running the task."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect import flow, task

from ape.schemas.results import Outcome
from ape.schemas.transcript import SolveRecord
from ape.tasks.session.cache import SessionCache
from ape.tasks.session.stages import SessionSpec, cached_variant
from ape.tasks.storage.local_results import ResolvedLocalFileSystem

pytestmark = pytest.mark.usefixtures("prefect_server")

CALLS: list[str] = []


@task(name="session", persist_result=True)
def toy_session(spec: SessionSpec) -> SolveRecord:
    CALLS.append(spec.prompt)
    return SolveRecord(outcome=Outcome.SOLVED, solution=spec.prompt.upper(), steps=1)


def _spec(prompt: str) -> SessionSpec:
    return SessionSpec(item_id="q1", run_index=0, item="{}", prompt=prompt, system=None, fingerprint="f")


def test_the_engine_and_session_cache_read_each_others_results(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PREFECT_LOCAL_STORAGE_PATH", str(tmp_path / "results"))
    bound = cached_variant(toy_session, tmp_path / "cache")
    CALLS.clear()

    @flow(persist_result=False)
    def engine(prompt: str):
        return bound(_spec(prompt), return_state=True)

    # the engine ran the task and cached it: SessionCache finds the same record
    state = engine("engine first")
    assert state.is_completed() and state.name == "Completed" and CALLS == ["engine first"]
    cache = SessionCache(bound)
    hit = cache.read(cache.key(_spec("engine first")))
    assert hit is not None and hit.solution == "ENGINE FIRST"
    assert cache.read(cache.key(_spec("never run"))) is None

    # SessionCache wrote it: the engine reports Cached and does not run the task
    cache.write(cache.key(_spec("recorded first")), SolveRecord(outcome=Outcome.SOLVED, solution="from the cache"))
    state = engine("recorded first")
    assert state.name == "Cached" and state.result().solution == "from the cache"
    assert CALLS == ["engine first"]
    assert not cache.store.cache_result_in_memory  # a long run keeps no result in memory
    # the default local storage, with its folder resolved once (ape.tasks.storage.local_results)
    assert isinstance(cache.store.result_storage, ResolvedLocalFileSystem)
    assert isinstance(cache.store.metadata_storage, ResolvedLocalFileSystem)
