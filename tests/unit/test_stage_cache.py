"""Every model stage that is cached gets a cache key: a stage without one would silently
call the model again on every resume."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ape.tasks.session.stages import SessionSpec, adapt_task, cached_variant, choices_task, session_task, solve_task

STAGES = (session_task, solve_task, adapt_task, choices_task)


def _spec(prompt: str = "What is 2 + 3?") -> SessionSpec:
    return SessionSpec(item_id="q1", run_index=0, item="{}", prompt=prompt, system=None, fingerprint="f")


def _key(stage, spec: SessionSpec, cache_dir: Path) -> str | None:
    policy = cached_variant(stage, cache_dir).cache_policy
    return policy.compute_key(task_ctx=SimpleNamespace(task=stage), inputs={"spec": spec}, flow_parameters={})


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_every_cached_stage_has_a_key_of_its_spec(stage, tmp_path: Path) -> None:
    key = _key(stage, _spec(), tmp_path)
    assert key is not None
    assert _key(stage, _spec(), tmp_path) == key  # the same session hits its cache
    assert _key(stage, _spec("What is 2 + 4?"), tmp_path) != key  # a changed prompt does not


def test_stages_of_one_session_have_their_own_keys(tmp_path: Path) -> None:
    keys = {_key(stage, _spec(), tmp_path) for stage in STAGES}
    assert len(keys) == len(STAGES)


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_session_cache_keys_equal_the_engines_keys(stage, tmp_path: Path) -> None:
    """SessionCache combines the spec's key with the source's key taken once; each key must be
    the one Prefect's task engine computes, or a cache written by live task runs is missed."""
    from ape.tasks.session.cache import SessionCache

    cache = SessionCache(cached_variant(stage, tmp_path))
    specs = [_spec(), _spec("What is 2 + 4?"), _spec('ünïcode "quoted" \\ prompt')]
    assert [cache.key(s) for s in specs] == [_key(stage, s, tmp_path) for s in specs]
    assert cache._fast is True  # the combined key agreed with the engine's on the first spec


def test_session_cache_uses_the_engines_policy_when_prefect_hashes_differently(tmp_path: Path, monkeypatch) -> None:
    from ape.tasks.session import cache as cache_module

    monkeypatch.setattr(cache_module, "combined_key", lambda *keys: "not prefect's")
    cache = cache_module.SessionCache(cached_variant(session_task, tmp_path))
    specs = [_spec(), _spec("What is 2 + 4?")]
    assert [cache.key(s) for s in specs] == [_key(session_task, s, tmp_path) for s in specs]
    assert cache._fast is False


def test_the_cache_writes_under_prefects_own_holder_of_each_thread() -> None:
    """The holder made once per thread is the one Prefect's store would make on each write."""
    import threading

    from prefect.results import ResultStore

    from ape.tasks.session.cache import _holder

    assert _holder() == ResultStore.generate_default_holder()
    other: list[str] = []
    thread = threading.Thread(target=lambda: other.append(_holder()))
    thread.start()
    thread.join()
    assert other and other[0] != _holder() and str(threading.get_ident()) not in other[0]
