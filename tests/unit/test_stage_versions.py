"""Every model stage that is cached has a code version: a missing one silently disabled its cache."""

from __future__ import annotations

from ape.tasks.stages import STAGE_CODE_VERSIONS, adapt_task, session_task, solve_task


def test_every_cached_stage_has_a_code_version():
    # StageCode looks the version up by task name; a KeyError there made Prefect skip the
    # cache of that stage without a word (the default "session" granularity cached nothing)
    for stage in (session_task, solve_task, adapt_task):
        assert stage.name in STAGE_CODE_VERSIONS, stage.name
    # the TASK_SOURCE hash the session stage had before the layout change, so old caches stay valid
    assert STAGE_CODE_VERSIONS["session"] == "7428cad8dd3c7d26c7019515e88d3de5"
