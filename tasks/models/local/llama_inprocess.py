"""Log-likelihoods of a local GGUF model computed in this process: ``provider = "llama-cpp"``.

Why in process and not through llama-cpp-python's server (which APE starts for
generation): that server's echoed prompt log-probabilities are off by one position for
models whose tokenizer adds no BOS token (SmolLM2 is one): it reports for each prompt
token the probability the model gives it *after* having read it (llama-cpp-python issue
#1983). Here the tokens are evaluated with every position's logits kept, and token ``j``
of the continuation is scored by the logits at position ``j - 1``, as a causal model's
log-likelihood is defined. It is also faster: no HTTP, no per-token sort of the whole
vocabulary, and the prompt shared by an item's choices is evaluated once (the key-value
cache keeps the longest common prefix between requests, up to the context's last token).

The prompt is tokenized as llama-cpp-python's server does (special tokens parsed, a BOS
token only when the model's metadata asks for one; ``args.add_bos = true`` forces one).
The continuation's tokens are those that start at or after the end of the context, as
:mod:`ape.tasks.models.completions` splits a server's answer, so both routes score the
same tokens.

One model is loaded per file and settings and shared by the run's solver workers under a
lock (llama.cpp computes one request at a time with all its threads anyway). ``args``:
``n_ctx`` (2048), ``n_threads`` (half the CPUs, as for the server), ``add_bos``.

``[model] timeout_s`` limits each continuation's evaluation, as it limits a request to a
server: llama.cpp asks an abort callback between the steps of its computation
(``llama_set_abort_callback``), which says stop once the limit has passed. The evaluation
then ends with :class:`ScoreTimeout` (the session is an ERROR that ``ape retry`` redoes),
the key-value cache is dropped, and the next request starts clean. A thread left running
would keep the model and its lock; this stops the computation itself.
"""

from __future__ import annotations

import ctypes
import importlib.util
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ape.schemas.config import ModelConfig
from ape.schemas.errors import ApeError
from ape.tasks.models.local.llama_server import DEFAULT_CONTEXT, ServerSpec, model_file
from ape.tasks.models.score_types import ContinuationScore, Scored, ScoreRequest

__all__ = ["LlamaScorer", "ScoreTimeout", "llama_scorer", "log_softmax"]

SCORER_ARGS = ("n_ctx", "n_threads", "add_bos")


@dataclass(frozen=True)
class LoadSpec:
    """What one in-process model is loaded with."""

    file: Path
    n_ctx: int = DEFAULT_CONTEXT
    n_threads: int = 0
    add_bos: bool | None = None

    @property
    def threads(self) -> int:
        return ServerSpec(file=self.file, n_threads=self.n_threads).threads


class ScoreTimeout(TimeoutError):
    """An in-process evaluation passed the model's ``timeout_s`` and was stopped."""


class _Loaded:
    """One llama.cpp model in memory, the lock its users take turns with, and the deadline
    its abort callback compares the clock with (module docstring)."""

    def __init__(self, spec: LoadSpec):
        import llama_cpp  # deferred: the llm extra, and a heavy import
        from llama_cpp import Llama

        overrides: dict[str, bool | int | float | str] | None = None
        if spec.add_bos is not None:
            overrides = {"tokenizer.ggml.add_bos_token": spec.add_bos}
        self.llama: Any = Llama(
            model_path=str(spec.file),
            n_ctx=spec.n_ctx,
            n_threads=spec.threads,
            n_threads_batch=spec.threads,
            logits_all=True,
            verbose=False,
            kv_overrides=overrides,
        )
        self.lock = threading.Lock()
        self.bos = int(self.llama.token_bos())
        self.deadline: float | None = None  # time.monotonic() past which llama.cpp stops
        # kept on the instance: llama.cpp holds only the C pointer
        self._abort = llama_cpp.ggml_abort_callback(self._past_deadline)
        llama_cpp.llama_set_abort_callback(self.llama._ctx.ctx, self._abort, None)

    def _past_deadline(self, _data: ctypes.c_void_p | None) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def eval_within(self, tokens: list[int], limit_s: float) -> None:
        """``llama.eval(tokens)``, stopped with ScoreTimeout once ``limit_s`` has passed."""
        self.deadline = time.monotonic() + limit_s
        try:
            self.llama.eval(tokens)
        except RuntimeError:
            if not self._past_deadline(None):
                raise
            self.llama.reset()  # the aborted batch left the cache part-filled
            raise ScoreTimeout(
                f"scoring one continuation ({len(tokens)} tokens) took longer than {limit_s:g} s"
            ) from None
        finally:
            self.deadline = None


_LOADED: dict[LoadSpec, _Loaded] = {}
_LOADED_LOCK = threading.Lock()


def _load(spec: LoadSpec) -> _Loaded:
    with _LOADED_LOCK:
        loaded = _LOADED.get(spec)
        if loaded is None:
            loaded = _LOADED[spec] = _Loaded(spec)
        return loaded


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log-softmax of one row of logits, in float64."""
    row = logits.astype(np.float64)
    shifted = row - row.max()
    return shifted - np.log(np.exp(shifted).sum())


def _common_prefix(a: Any, b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if int(x) != y:
            break
        n += 1
    return n


class LlamaScorer:
    """Scores continuations with an in-process llama.cpp model (module docstring)."""

    def __init__(self, spec: LoadSpec, model_id: str, limit_s: float = 120.0):
        self.spec = spec
        self.model_id = model_id
        self.limit_s = limit_s  # [model] timeout_s, per continuation

    def _offset(self, model: _Loaded, tokens: list[int], index: int) -> int:
        """Where token ``index`` starts, in characters of the decoded text (as the server counts)."""
        text: bytes = model.llama.detokenize([t for t in tokens[:index] if t != model.bos])
        return len(text.decode("utf-8", errors="ignore"))

    def _first_at(self, model: _Loaded, tokens: list[int], guess: int, position: int) -> int:
        """The first token that starts at or after character ``position``."""
        index = max(0, min(guess, len(tokens)))
        while index > 0 and self._offset(model, tokens, index) > position:
            index -= 1
        while index < len(tokens) and self._offset(model, tokens, index) < position:
            index += 1
        return index

    def _one(
        self, model: _Loaded, context_tokens: list[int], context: str, continuation: str
    ) -> tuple[ContinuationScore, int]:
        """One continuation's score, and the number of tokens of the prompt it was scored in."""
        llama = model.llama
        tokens = list(llama.tokenize((context + continuation).encode("utf-8"), add_bos=True, special=True))
        if len(tokens) > llama.n_ctx():
            raise ApeError(
                f"the prompt and a continuation are {len(tokens)} tokens, more than the context of {llama.n_ctx()}",
                where=f"[model] '{self.model_id}' args.n_ctx",
                hint="raise args.n_ctx",
            )
        start = self._first_at(model, tokens, _common_prefix(context_tokens, tokens), len(context))
        if start >= len(tokens):
            raise ValueError(f"the continuation {continuation!r} has no token of its own after the prompt")
        start = max(start, 1)  # the first token has no position before it to be scored from
        # Evaluate from the context's last token on, even when the cache holds more: llama.cpp
        # computes a batch of one token by another kernel, whose logits differ from a longer
        # batch's by up to a tenth of a nat (measured on SmolLM2 Q4_1), so every logit read
        # here comes from a batch of two tokens or more, as a server evaluating the whole
        # prompt computes it.
        keep = min(_common_prefix(llama.input_ids[: llama.n_tokens], tokens), start - 1)
        llama.n_tokens = keep
        try:
            model.eval_within(tokens[keep:], self.limit_s)
        except ScoreTimeout as exc:
            raise ScoreTimeout(f"{exc} (raise [model] '{self.model_id}' timeout_s)") from None
        values = [float(log_softmax(llama.scores[j - 1])[tokens[j]]) for j in range(start, len(tokens))]
        greedy = all(int(np.argmax(llama.scores[j - 1])) == tokens[j] for j in range(start, len(tokens)))
        return ContinuationScore(sum(values), len(values), greedy), len(tokens)

    def score(self, request: ScoreRequest) -> Scored:
        model = _load(self.spec)
        with model.lock:
            llama = model.llama
            context_tokens = list(llama.tokenize(request.context.encode("utf-8"), add_bos=True, special=True))
            scored = [self._one(model, context_tokens, request.context, c) for c in request.continuations]
        return Scored(
            scores=tuple(score for score, _ in scored),
            calls=len(scored),
            input_tokens=sum(used for _, used in scored),
            output_tokens=0,
        )


def llama_scorer(cfg: ModelConfig) -> LlamaScorer:
    """The in-process scorer of a ``provider = "llama-cpp"`` model."""

    if importlib.util.find_spec("llama_cpp") is None:
        raise ApeError(
            "provider 'llama-cpp': llama-cpp-python is not installed",
            where=f"[model] '{cfg.model_id}'",
            hint="pip install 'ape-bench[llm]'",
        )
    unknown = sorted(set(cfg.args) - set(SCORER_ARGS))
    if unknown:
        raise ApeError(
            f"unknown argument(s) {', '.join(unknown)} of an in-process llama-cpp scorer",
            where=f"[model] '{cfg.model_id}' args",
            hint=f"it takes {', '.join(SCORER_ARGS)}",
        )
    add_bos = cfg.args.get("add_bos")
    spec = LoadSpec(
        file=model_file(cfg),
        n_ctx=int(cfg.args.get("n_ctx", DEFAULT_CONTEXT)),
        n_threads=int(cfg.args.get("n_threads", 0)),
        add_bos=None if add_bos is None else bool(add_bos),
    )
    return LlamaScorer(spec, cfg.model_id, cfg.timeout_s)
