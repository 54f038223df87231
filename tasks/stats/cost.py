"""Cost accounting: the price of a session, the run's budget, and an estimate before a run.

Prices are per million tokens and per model (``[[model]] price_input_per_mtok`` and
``price_output_per_mtok``); a session's cost is ``input_tokens * input price +
output_tokens * output price`` (times ``batch_price_factor``, 0.5 by default, for a
``batch = true`` model), recorded in ``results.jsonl`` with the tokens it came
from. A model without prices, or a session whose model reported no token usage, has no
cost (``null``), never a made-up zero.

``[run] max_cost`` is checked before each item is submitted (:class:`Budget`): the
budget counts every session saved in the run's output folders (all models) that was
really generated, not answered from the cache. Once spent, no further item starts, the
items in flight finish and are saved, and the run ends with one line saying what was
spent; raising the budget and running again resumes where it stopped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ape.schemas.config import ApeConfig, ModelConfig
from ape.schemas.results import OutputBatch, SessionResult
from ape.tasks.storage.save import read_batches

MILLION = 1_000_000
CHARS_PER_TOKEN = 4.0  # a rough rule for English text with BPE tokenizers, for estimates only


def has_prices(model: ModelConfig) -> bool:
    return model.price_input_per_mtok is not None or model.price_output_per_mtok is not None


def session_cost(model: ModelConfig, input_tokens: int | None, output_tokens: int | None) -> float | None:
    """The price of one session's tokens; None without prices or without token counts.

    A ``batch = true`` model's tokens cost ``batch_price_factor`` of its prices (providers
    bill batches at about half the interactive price)."""
    if not has_prices(model) or (input_tokens is None and output_tokens is None):
        return None
    factor = model.batch_price_factor if model.batch else 1.0
    return (
        factor
        * (
            (input_tokens or 0) * (model.price_input_per_mtok or 0.0)
            + (output_tokens or 0) * (model.price_output_per_mtok or 0.0)
        )
        / MILLION
    )


def spent(sessions: Iterable[SessionResult]) -> float:
    """Money really spent on these sessions: cached ones cost nothing this time."""
    return sum(s.cost for s in sessions if s.cost is not None and not s.cached)


class BudgetReached(Exception):
    """``[run] max_cost`` was reached; the run stopped before every item ran."""


class Budget:
    """The run's spending against ``[run] max_cost`` (no limit when it is None).

    Items in flight cost money before their results arrive, so the runner asks before
    each submission: until the first item of this run has finished, at most
    ``first_wave`` items run at once; after that an item starts only while the money
    spent plus the average cost of this run's items times those in flight stays within
    the budget. The overshoot is therefore about the items of one wave, not a window.
    """

    def __init__(self, max_cost: float | None, already_spent: float = 0.0, first_wave: int = 1):
        self.max_cost = max_cost
        self.spent = already_spent
        self.first_wave = max(1, first_wave)
        self.stopped = False  # set when the budget, not the data, ended the run
        self._run_spent = 0.0
        self._run_items = 0

    @classmethod
    def for_run(cls, config: ApeConfig) -> Budget:
        """A budget that starts from what the saved results of every model already cost."""

        total = 0.0
        if config.run.max_cost is not None:
            for model in config.model:
                path = config.output_dir_for(model) / config.run.save_file
                for batch in read_batches(path):
                    total += spent(batch.sessions)
        return cls(config.run.max_cost, total, first_wave=config.run.solver_workers)

    @property
    def exhausted(self) -> bool:
        return self.max_cost is not None and self.spent >= self.max_cost

    def allow(self, in_flight: int = 0) -> bool:
        """May one more item start while ``in_flight`` items are still running?

        False with ``stopped`` set once the budget is spent; False without it while the
        items in flight are expected to use up what is left (wait for them, then ask again).
        """
        if self.max_cost is None:
            return True
        if self.exhausted:
            self.stopped = True
            return False
        if in_flight == 0:
            return True
        if self._run_items == 0:
            return in_flight < self.first_wave
        per_item = self._run_spent / self._run_items
        return self.spent + (in_flight + 1) * per_item <= self.max_cost

    def add(self, batches: Iterable[OutputBatch]) -> None:
        for batch in batches:
            cost = spent(batch.sessions)
            self.spent += cost
            self._run_spent += cost
            self._run_items += 1

    def message(self, model_id: str, not_run: int) -> str:
        return (
            f"budget reached: {self.spent:.4f} spent of [run] max_cost = {self.max_cost:g}; "
            f"{not_run} item(s) of {model_id} not run. Raise max_cost and run again to resume."
        )


@dataclass(frozen=True)
class Estimate:
    """A pre-run estimate for one model: tokens from prompt lengths and max_tokens."""

    model_id: str
    sessions: int
    input_tokens: float
    output_tokens: float
    cost: float | None
    output_bound: bool  # True when max_tokens bounded the output (else a guess)


def estimate(model: ModelConfig, prompt_chars: Iterable[int], runs_per_data: int, max_steps: int) -> Estimate:
    """Estimate tokens and cost of one model's run from its rendered prompt lengths.

    Input: prompt characters / 4 per session (one model call; tool use and reformat
    prompts add more). Output: ``max_tokens`` per call when set (an upper bound for one
    call), else 256 tokens as a guess. ``max_steps`` is not multiplied in: most sessions
    end after one call, and the estimate says so.
    """
    del max_steps  # documented above: a single call per session is assumed
    chars = list(prompt_chars)
    sessions = len(chars) * runs_per_data
    input_tokens = sum(math.ceil(c / CHARS_PER_TOKEN) for c in chars) * runs_per_data
    per_call = model.max_tokens if model.max_tokens is not None else 256
    output_tokens = float(per_call * sessions)
    cost = session_cost(model, int(input_tokens), int(output_tokens))
    return Estimate(model.model_id, sessions, float(input_tokens), output_tokens, cost, model.max_tokens is not None)
