"""The ``judge-agreement`` task: a judge checker with a calibration file grades that file before
any model runs, so the report can say how far the judge agrees with people."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from ape.schemas.config import ApeConfig
from ape.tasks.checking.judge import JudgeSpec
from ape.tasks.checking.judge_labels import measure_agreement
from ape.tasks.setup.model import load_data_model


@task(name="judge-agreement", cache_policy=NO_CACHE, persist_result=False)
def judge_agreement_task(config: ApeConfig, judge: JudgeSpec | None = None) -> None:
    """A judge checker with a calibration file grades it before any model runs
    (``ape.tasks.checking.judge_labels``); the report compares it with the people's grades.
    ``judge``: the judge preflight resolved (else resolved here)."""

    measure_agreement(config, load_data_model(config), judge)
