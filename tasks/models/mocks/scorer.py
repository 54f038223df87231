"""The built-in mock model of log-likelihood runs: ``provider = "mock"`` with ``[choices]``.

A product feature, not only a test double: it lets a multiple-choice benchmark run
anywhere, with no model file and no server, for demos, for dry runs of a new config
(is the gold field read right? do the reports come out?) and for load tests. Its
log-likelihoods are made up, deterministically (the same request gives the same numbers
in every process): each continuation gets -1 nat and about -1.2 per token (a token counted
per four characters) plus a little noise, and on a share ``accuracy`` of the items
(drawn by the prompt and ``seed``) the model "knows" the answer, and the gold choice
gets a margin over the best other choice. So ``acc`` is about ``accuracy`` plus chance
on the rest, ``acc_norm`` differs from it where the choices' lengths differ, and the
choice probabilities are higher on known items than on guessed ones, which is what a
calibration table should show.

With ``behaviour = "oracle"`` it plays the ``oracle`` chat mock instead
(:mod:`ape.tasks.models.mocks.oracle`): it is right on a share ``accuracy`` of the items, drawn
from ``seed`` and the item's id (the run index too with ``sampling``), never from the prompt
or the order, and on the others a seeded other choice is the most likely, so ``acc`` and
``acc_norm`` both come out near ``accuracy`` itself (not ``accuracy`` plus chance), the same
with any number of workers. Its gold is the ``[choices] gold`` field: it takes no ``field``.

``[model] args``: ``behaviour`` (none, or ``"oracle"``), ``accuracy`` (0.8), ``seed`` (0),
``sampling`` (false; oracle only: draw per session instead of per item), ``latency_s``
(seconds slept per request), ``call_log`` (a file that gets one line per request, to count
them across processes).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError, problem_key, problem_message
from ape.tasks.models.mocks.oracle import is_right
from ape.tasks.models.score_types import ContinuationScore, Scored, ScoreRequest
from ape.tasks.models.session_item import current_session_item

__all__ = ["MockScorer", "mock_scorer"]

NATS_PER_TOKEN = 1.2
CHARS_PER_TOKEN = 4


def _unit(*parts: object) -> float:
    """A number in [0, 1) fixed by ``parts`` (the same in every process)."""
    digest = hashlib.sha256("\0".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def mock_tokens(text: str) -> int:
    """The mock's token count of ``text``: one per four characters, at least one."""
    return max(1, round(len(text) / CHARS_PER_TOKEN))


class MockScorer(BaseModel):
    """Deterministic made-up log-likelihoods (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "mock"
    behaviour: Literal["oracle"] | None = Field(
        default=None, description="'oracle': right on exactly the drawn share of items, by item id."
    )
    sampling: bool = Field(default=False, description="Oracle: draw right/wrong per session, not per item.")
    accuracy: float = Field(default=0.8, ge=0.0, le=1.0, description="Share of items whose answer it knows.")
    seed: int = 0
    latency_s: float = Field(default=0.0, ge=0.0, description="Seconds slept per request.")
    call_log: str | None = Field(default=None, description="File that gets one line per request.")

    def _log_call(self, request: ScoreRequest) -> None:
        """One ``call_log`` line per continuation scored, when the config asks for the log."""
        calls = len(request.continuations)
        if self.call_log:
            line = json.dumps(
                {"model": self.name, "pid": os.getpid(), "time": time.time(), "prompt": request.context[:200]}
            )
            with open(self.call_log, "a", encoding="utf-8") as handle:
                handle.write((line + "\n") * calls)

    def score(self, request: ScoreRequest) -> Scored:
        self._log_call(request)
        if self.latency_s:
            time.sleep(self.latency_s * len(request.continuations))
        tokens = [mock_tokens(c) for c in request.continuations]
        lls = [
            -1.0 - NATS_PER_TOKEN * n - 2.0 * _unit(self.seed, request.context, index, continuation)
            for index, (n, continuation) in enumerate(zip(tokens, request.continuations, strict=True))
        ]
        gold = request.gold
        if self.behaviour == "oracle":
            self._oracle(request, lls)
            gold = None  # the oracle has placed the winner
        knows = gold is not None and _unit(self.seed, "knows", request.context) < self.accuracy
        if knows and gold is not None and 0 <= gold < len(lls) and len(lls) > 1:
            best_other = max(ll for index, ll in enumerate(lls) if index != gold)  # at most -1
            margin = 0.5 + 3.0 * _unit(self.seed, "margin", request.context)
            lls[gold] = min(-0.05, best_other + margin)  # a log-probability is never above 0
        context_tokens = mock_tokens(request.context)
        return Scored(
            scores=tuple(ContinuationScore(ll, n, None) for ll, n in zip(lls, tokens, strict=True)),
            calls=len(tokens),
            input_tokens=sum(context_tokens + n for n in tokens),
            output_tokens=0,
        )

    def _oracle(self, request: ScoreRequest, lls: list[float]) -> None:
        """Make the gold (right) or a seeded other choice (wrong) the most likely, by both the
        raw log-likelihood (acc) and the log-likelihood per character (acc_norm)."""
        current = current_session_item()
        if current is None:
            raise ValueError("mock behaviour 'oracle' answers from the session's item, and this request has none")
        gold = request.gold
        if gold is None or not 0 <= gold < len(lls) or len(lls) < 2:
            raise ValueError("mock behaviour 'oracle' needs the gold choice of an item with two or more choices")
        right = is_right(self.seed, current.item_id, current.run_index, self.accuracy, sampling=self.sampling)
        key = (self.seed, "oracle", current.item_id, current.run_index if self.sampling else "")
        winner = gold
        if not right:
            winner = (gold + 1 + int(_unit(*key, "choice") * (len(lls) - 1))) % len(lls)
        chars = [max(1, len(c.strip())) for c in request.continuations]
        others = [index for index in range(len(lls)) if index != winner]
        margin = 0.5 + 3.0 * _unit(*key, "margin")
        by_raw = max(lls[i] for i in others) + margin
        by_char = max(lls[i] / chars[i] for i in others) * chars[winner] + 0.1
        lls[winner] = min(-0.01, max(by_raw, by_char))  # a log-probability is never above 0


def mock_scorer(cfg: ModelConfig, base_dir: Path) -> MockScorer:
    """The mock scorer of a ``[model]`` section with ``provider = "mock"``."""
    args = dict(cfg.args)
    if cfg.model == "oracle" and "behaviour" not in args:
        args["behaviour"] = "oracle"  # `model = "oracle"` names the behaviour, as for the chat mock
    if args.get("behaviour") != "oracle":
        args.pop("behaviour", None)  # a generation mock's other behaviours mean nothing here
    elif "field" in args:
        raise ApeError(
            "the log-likelihood oracle takes no 'field': its answer is the [choices] gold",
            where=f"[model] '{cfg.model_id}' args",
            hint="remove field; [choices] gold names the field that holds the right choice",
        )
    args.setdefault("name", cfg.model_id)
    if args.get("call_log"):
        args["call_log"] = str(base_dir / Path(str(args["call_log"]).strip()))
    try:
        return MockScorer(**args)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ApeError(
            f"invalid mock scorer argument '{problem_key(first, 'args')}': {problem_message(first)}",
            where=f"[model] '{cfg.model_id}' args",
            hint='a log-likelihood mock takes behaviour ("oracle"), accuracy, seed, sampling, latency_s and call_log',
        ) from None
