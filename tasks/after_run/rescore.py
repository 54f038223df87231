"""Re-scoring saved generations with another run's checker: no model is called.

When two runs of a model differ in their checker (a fixed reference field, a new pass
mark, a repaired checker), their scores are not comparable as saved. Every session of the
earlier run that produced an answer is adapted again from its saved answer text and
checked with the later run's adapter and checker, so both sides are graded the same way.
Sessions that produced no answer (model errors, no final text) keep their outcome and
score 0, as they would have under any checker; so do sessions whose answer was cut at the
token limit (TRUNCATED): a checker change does not finish a cut answer.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ape.schemas.config import ApeConfig
from ape.schemas.data import item_id
from ape.schemas.errors import ApeError
from ape.schemas.results import CheckStatus, Outcome
from ape.tasks.checking.builtin import score_session
from ape.tasks.checking.check import run_check
from ape.tasks.setup.model import ModelSetup, make_setup

log = logging.getLogger("ape")
# outcomes whose saved text is no answer to grade again
_KEPT = frozenset({Outcome.ERROR.value, Outcome.TRUNCATED.value})


def rescore(sessions: pd.DataFrame, config: ApeConfig, model_id: str) -> pd.DataFrame:
    """``sessions`` of ``model_id`` with score, correct and check columns recomputed by the
    adapter and checker ``config`` gives that model. Other models' rows are returned as they are."""
    return regrader(config, model_id)(sessions)


def regrader(config: ApeConfig, model_id: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """:func:`rescore` with the setup, the items and the checker built once, for grading
    several earlier runs with one config."""
    model_cfg = next((m for m in config.model if m.model_id == model_id), None)
    if model_cfg is None:
        raise ApeError(f"the later run's config has no model '{model_id}'", where=config.shown_file())
    setup = make_setup(config, model_cfg)
    items = {str(item_id(item)): item for item in setup.provider()}
    checker = setup.checker_factory()
    return functools.partial(_regrade, setup=setup, items=items, checker=checker, model_id=model_id)


def _regrade(
    sessions: pd.DataFrame, *, setup: ModelSetup, items: dict[str, Any], checker: Any, model_id: str
) -> pd.DataFrame:
    timeout = setup.config.checker.timeout_s
    out = sessions.copy()
    columns = ["outcome", "score", "correct", "check_status", "check_score", "check_metadata", "check_error_message"]
    for column in columns:
        if column not in out.columns:
            out[column] = None
    values = {c: out[c].to_numpy(dtype=object).copy() for c in columns}
    ids, texts, outcomes = (out[c].to_numpy(dtype=object) for c in ("item_id", "raw_output", "outcome"))
    for position in np.flatnonzero((out["model_id"] == model_id).to_numpy()):
        item = items.get(str(ids[position]))
        text = texts[position]
        if item is None or text is None or pd.isna(text) or outcomes[position] in _KEPT:
            continue
        try:
            solution = setup.adapter(str(text))
        except Exception as exc:  # noqa: BLE001 - a parse failure is an outcome, as in a run
            values["outcome"][position], values["score"][position] = Outcome.PARSING_FAILED.value, 0.0
            values["correct"][position], values["check_metadata"][position] = False, None
            log.debug("re-score: %s of %s no longer parses: %s", ids[position], model_id, exc)
            continue
        result = run_check(checker, item, solution, timeout)
        score, correct = score_session(Outcome.SOLVED, result, setup.metric)
        values["outcome"][position] = Outcome.SOLVED.value
        values["score"][position], values["correct"][position] = score, correct
        values["check_status"][position], values["check_score"][position] = result.status.value, result.score
        values["check_metadata"][position] = json.dumps(result.metadata, default=str) if result.metadata else None
        if result.status is CheckStatus.ERROR and result.error is not None:
            values["check_error_message"][position] = result.error.message
    for column, array in values.items():
        out[column] = pd.Series(array, index=out.index).infer_objects()
    return out
