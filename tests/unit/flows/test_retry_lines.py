"""What `ape retry --outcomes` says for one model: one true line, and a warning when cut
answers are asked again with the budget that cut them (a newcomer was told "redoing 30 items
whose answer was cut" and then "redoing 0 item(s) with outcome TRUNCATED", and a retry with
the same budget redid the cut items to the same cut without a word)."""

from __future__ import annotations

import logging

from ape.flows.resume import retry_lines
from ape.schemas.results import Outcome

CUT = {Outcome.TRUNCATED}


def test_a_larger_budget_already_said_it_so_the_retry_adds_nothing() -> None:
    # the budget grew: apply_changes redid the 30 cut items and said so in its own line
    assert retry_lines("m", CUT, redone=0, cut=0, budget_redone=30, max_tokens=512) == []


def test_the_same_budget_redoes_the_cut_items_with_a_warning() -> None:
    lines = retry_lines("m", CUT, redone=30, cut=30, budget_redone=None, max_tokens=64)
    assert lines[0] == (logging.INFO, "m: redoing 30 item(s) with outcome TRUNCATED")
    level, warning = lines[1]
    assert level == logging.WARNING
    assert "30 of them were cut" in warning and "max_tokens (64)" in warning
    assert "raise [model] max_tokens" in warning
    assert len(lines) == 2


def test_nothing_to_redo_is_said_as_such() -> None:
    lines = retry_lines("m", {Outcome.PARSING_FAILED}, redone=0, cut=0, budget_redone=None, max_tokens=None)
    assert lines == [(logging.INFO, "m: no saved item has outcome PARSING_FAILED: nothing to redo")]


def test_other_outcomes_beside_a_raised_budget_are_counted_without_a_warning() -> None:
    lines = retry_lines(
        "m", {Outcome.PARSING_FAILED, Outcome.TRUNCATED}, redone=5, cut=0, budget_redone=30, max_tokens=512
    )
    assert lines == [(logging.INFO, "m: redoing 5 item(s) with outcome PARSING_FAILED/TRUNCATED")]
