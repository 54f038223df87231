"""The terminal's "first 20 error lines, then run.log only" cap counts a run's models together."""

from __future__ import annotations

import logging

from ape.flows.logs import CONSOLE_SKIP
from ape.flows.progress import MAX_ERROR_LINES, RUN_ERROR_LINES, Tally, repeated_errors, report_errors
from ape.schemas.results import ErrorInfo, Outcome, OutputBatch, SessionResult


def _errored(model: str, n: int, *, same: bool = True) -> list[OutputBatch]:
    """``n`` items of ``model`` whose session errored: with the same error (``same``), or
    each with its own."""

    def error(i: int) -> ErrorInfo:
        return ErrorInfo(type="ValueError", message="boom" if same else f"boom {i}")

    return [
        OutputBatch(
            item_id=f"q{i}",
            model_id=model,
            sessions=[
                SessionResult(item_id=f"q{i}", run_index=0, model_id=model, outcome=Outcome.ERROR, error=error(i))
            ],
        )
        for i in range(n)
    ]


def _on_terminal(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if not getattr(r, CONSOLE_SKIP, False)]


def test_two_models_share_the_cap_of_one_run(caplog) -> None:
    RUN_ERROR_LINES.reset()
    with caplog.at_level(logging.INFO, logger="ape"):
        for model in ("atlas", "boreas"):  # each model has its own tally, as in a run
            tally = Tally(total=15)
            for batch in _errored(model, 15, same=False):
                report_errors(batch, tally)
    shown = _on_terminal(caplog.records)
    assert len(shown) == MAX_ERROR_LINES + 1  # 20 error lines and the note
    assert shown[-1] == "further error lines go to run.log only"
    assert sum("session error" in r.getMessage() for r in caplog.records) == 30  # run.log gets all


def test_a_new_run_starts_counting_again(caplog) -> None:
    RUN_ERROR_LINES.reset()
    for batch in _errored("atlas", MAX_ERROR_LINES + 5, same=False):
        report_errors(batch, Tally(total=1))
    RUN_ERROR_LINES.reset()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ape"):
        report_errors(_errored("atlas", 1)[0], Tally(total=1))
    assert _on_terminal(caplog.records) == ["item q0 run 0: session error: ValueError: boom"]


def test_the_same_error_on_every_session_is_one_line_then_a_count(caplog) -> None:
    """A dead endpoint fails 40 sessions alike: the terminal shows the first, run.log all
    40, and the model's end tells the count once."""
    RUN_ERROR_LINES.reset()
    with caplog.at_level(logging.INFO, logger="ape"):
        for batch in _errored("dead", 40):
            report_errors(batch, Tally(total=40))
        other = _errored("alive", 1)[0]  # another model's first error is shown too
        report_errors(other, Tally(total=1))
    assert _on_terminal(caplog.records) == [
        "item q0 run 0: session error: ValueError: boom",
        "item q0 run 0: session error: ValueError: boom",
    ]
    assert sum("session error" in r.getMessage() for r in caplog.records) == 41  # run.log gets all
    assert RUN_ERROR_LINES.shown == 2  # repeats do not use up the cap of distinct lines
    assert repeated_errors("dead") == [
        "dead: the same session error on 40 sessions (the first shown; all in run.log): ValueError: boom"
    ]
    assert repeated_errors("dead") == []  # told once
