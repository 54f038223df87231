"""The check stage: run a deterministic checker on a parsed solution, safely and timed.

A checker is ``(item, solution) -> Passed | Failed | bool`` (see ``ape.schemas.check``). It
never decides whether a *session* failed: a checker that raises marks only that
session's check as ``CheckStatus.ERROR`` with the exception recorded, and the run goes on.

Checkers are shared between solver workers through a :class:`CheckerCarousel`, a
fixed pool of instances (``[run] checker_workers``) handed out one at a time.
"""

from __future__ import annotations

import functools
import inspect
import queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from ape.schemas.check import Failed, Passed
from ape.schemas.config import CheckerConfig
from ape.schemas.errors import ApeError
from ape.schemas.results import CheckResult, CheckStatus, ErrorInfo
from ape.tasks.checking.builtin import builtin_checker
from ape.tasks.common.deadline import PluginTimeout, call_with_timeout
from ape.tasks.plugins.loader import call_plugin, load_object
from ape.tasks.plugins.registry import is_short_name, resolve

Checker = Callable[[Any, Any], Any]

WHERE = "[checker] implementation"
METRICS_MODULE = "ape.tasks.checking.metrics"


def checker_factory(cfg: CheckerConfig, base_dir: Path) -> Callable[[], Checker]:
    """Resolve ``[checker]`` now (so a bad path fails at start) and return a maker of instances.

    A class is instantiated with ``args`` on every call, so each pool slot owns its
    instance; a function is shared (with ``args`` bound as keyword arguments); a short
    built-in name (the registry's ``checker`` kind) is a metric of ``ape.tasks.checking.metrics``
    or one of APE's checker classes.
    """
    name = cfg.implementation
    if is_short_name(name):
        path = resolve("checker", name, where=WHERE)
        if path.startswith(METRICS_MODULE + ":"):
            return functools.partial(builtin_checker, name, dict(cfg.args))
        name = path
    target = load_object(name, where=WHERE, base_dir=base_dir)
    if inspect.isclass(target):
        return functools.partial(_instantiate, target, dict(cfg.args), name)
    if not callable(target):
        raise ApeError(f"'{name}' is a {type(target).__name__}, not a checker function or class", where=WHERE)
    checker = functools.partial(target, **cfg.args) if cfg.args else target
    return functools.partial(_same, checker)


def load_checker(cfg: CheckerConfig, base_dir: Path) -> Checker:
    """One checker instance for ``[checker]``."""
    return checker_factory(cfg, base_dir)()


def _instantiate(cls: type, args: dict[str, Any], name: str) -> Checker:
    instance = call_plugin(cls, args, label=f"checker '{name}'", where="[checker] args")
    if not callable(instance):
        raise ApeError(
            f"instances of '{name}' are not callable; give the class a method __call__(self, item, solution)",
            where=WHERE,
        )
    return instance


def _same(checker: Checker) -> Checker:
    return checker


def run_check(checker: Checker, item: Any, solution: Any, timeout_s: float | None = None) -> CheckResult:
    """Run one check; never raises. bool, Passed, Failed and CheckResult are accepted.

    A checker that raises, returns anything else or runs past ``timeout_s`` gives a check
    ERROR: the session scores nothing, and the item counts as errored (see the Runner).
    """
    start = time.perf_counter()
    try:
        returned = call_with_timeout(
            checker, item, solution, limit_s=timeout_s, label="the checker", key="[checker] timeout_s"
        )
    except Exception as exc:
        return CheckResult(
            status=CheckStatus.ERROR,
            runtime_s=time.perf_counter() - start,
            error=ErrorInfo.from_exception(exc),
        )
    runtime = time.perf_counter() - start
    return to_check_result(returned, runtime)


def to_check_result(returned: Any, runtime_s: float) -> CheckResult:
    """Normalise what a checker returned; an unexpected type is a check ERROR, not a crash."""
    if isinstance(returned, CheckResult):
        return returned.model_copy(update={"runtime_s": runtime_s})
    if isinstance(returned, Passed):
        return CheckResult(
            status=CheckStatus.PASSED,
            score=returned.score,
            runtime_s=runtime_s,
            metadata=_jsonable(returned.metadata),
        )
    if isinstance(returned, Failed):
        metadata = _jsonable(returned.metadata)
        if returned.reason:
            metadata.setdefault("reason", returned.reason)
        return CheckResult(status=CheckStatus.FAILED, score=returned.score, runtime_s=runtime_s, metadata=metadata)
    if _is_bool(returned):
        passed = bool(returned)
        return CheckResult(
            status=CheckStatus.PASSED if passed else CheckStatus.FAILED,
            score=1.0 if passed else 0.0,
            runtime_s=runtime_s,
        )
    return CheckResult(
        status=CheckStatus.ERROR,
        runtime_s=runtime_s,
        error=ErrorInfo(
            type="TypeError",
            message=f"the checker returned {type(returned).__name__} {returned!r:.200}; "
            "expected Passed, Failed or a bool",
        ),
    )


def _is_bool(value: Any) -> bool:
    """Python bools and numpy-style bool scalars (which are not ``bool`` subclasses)."""
    return isinstance(value, bool) or str(getattr(value, "dtype", "")) == "bool"


def _jsonable(metadata: dict[str, Any]) -> dict[str, Any]:
    return to_jsonable_python(metadata, fallback=repr)


class CheckerCarousel:
    """A fixed pool of checker instances shared by all solver workers (thread-safe).

    :meth:`check` blocks until an instance is free and puts it back afterwards, so at
    most ``size`` checks run at once and a stateful checker is never used by two
    threads at the same time.
    """

    def __init__(self, factory: Callable[[], Checker], size: int, timeout_s: float | None = None):
        if size < 1:
            raise ValueError(f"a checker carousel needs at least one checker, got size={size}")
        self.size = size
        self.timeout_s = timeout_s
        self._factory = factory
        self._pool: queue.Queue[Checker] = queue.Queue(maxsize=size)
        for _ in range(size):
            self._pool.put(factory())

    def check(self, item: Any, solution: Any) -> CheckResult:
        """:func:`run_check` with a borrowed checker and the carousel's time limit. An
        instance that timed out may still be running, so a fresh one takes its slot."""
        checker = self._pool.get()
        result = None
        try:
            result = run_check(checker, item, solution, self.timeout_s)
        finally:
            timed_out = result is not None and result.error is not None and result.error.type == PluginTimeout.__name__
            if timed_out:
                try:
                    checker = self._factory()
                except Exception:  # keep the old one rather than shrink the pool
                    pass
            self._pool.put(checker)
        return result


class CandidateAnswer(BaseModel):
    answer: str = Field(description="Your candidate final answer, written exactly as you would give it.")


def checker_tool(checker: Checker | CheckerCarousel, item: Any, adapter: Callable[[str], Any], name: str) -> BaseTool:
    """The checker offered to the model as a tool (``expose_as_tool``), bound to one item.

    The model passes a candidate answer; the tool parses it with the session's adapter
    and checks it. Parse and checker errors come back as text so the model can react.
    """

    def verify(answer: str) -> str:
        try:
            solution = adapter(answer)
        except Exception as exc:
            return f"UNPARSABLE: {exc}. Give the answer in the format the task asks for."
        if isinstance(checker, CheckerCarousel):
            result = checker.check(item, solution)
        else:
            result = run_check(checker, item, solution)
        return grade_text(result)

    return StructuredTool.from_function(
        func=verify,
        name=name,
        description="Check a candidate answer before committing to it. Returns PASSED or "
        "FAILED (with a reason when there is one). Call it with the answer exactly as you "
        "would give it finally.",
        args_schema=CandidateAnswer,
    )


def grade_text(result: CheckResult) -> str:
    """A one-line grade for the model (the checker as its tool)."""
    if result.status is CheckStatus.ERROR:
        error = result.error
        detail = f"{error.type}: {error.message}" if error else "unknown error"
        return f"ERROR: the checker could not check this answer ({detail})"
    text = result.status.value
    if result.score is not None and result.score not in (0.0, 1.0):
        text += f" (score {result.score:g})"
    reason = result.metadata.get("reason")
    if reason:
        text += f": {reason}"
    return text
