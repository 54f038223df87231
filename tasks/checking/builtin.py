"""The score stage: built-in metric checkers and the score/correct pair of a session.

A ``[checker]`` whose ``implementation`` is a metric name (``exact_match``,
``accuracy``, ``f1``, ``bleu4``, ``rouge_l``, ``code_exec``) gets a
:class:`BuiltinChecker` from :func:`builtin_checker`: it reads the reference from
the item, scores the solution with the metric and answers ``Passed`` when the score
counts as correct (:func:`ape.tasks.checking.metrics.correct_from_score`), ``Failed`` otherwise,
carrying the score either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ape.schemas.check import Failed, Passed
from ape.schemas.data import item_id
from ape.schemas.errors import ApeError, did_you_mean, validation_error
from ape.schemas.results import CheckResult, CheckStatus, Outcome
from ape.tasks.checking.code.sandbox import SandboxSetting, SandboxUnavailable, resolve
from ape.tasks.checking.grade import CodeLimits, grade
from ape.tasks.checking.metrics import METRICS, correct_from_score

WHERE_NAME = "[checker] implementation"
WHERE_ARGS = "[checker] args"
# metrics that only compare normalised text or numbers: no user code, no pattern, linear time
INLINE_METRICS = frozenset({"exact_match", "accuracy"})


class MetricArgs(BaseModel):
    """``[checker] args`` of a text metric."""

    model_config = ConfigDict(extra="forbid")

    field: str = Field(default="answer", description="Item attribute holding the reference.")


class CodeExecArgs(BaseModel):
    """``[checker] args`` of ``code_exec``."""

    model_config = ConfigDict(extra="forbid")

    tests_field: str = Field(default="tests", description="Item attribute holding the tests.")
    timeout_s: float = Field(default=5.0, gt=0, description="Wall-time limit per solution.")
    memory_mb: int = Field(default=512, gt=0, description="Address-space limit per solution.")
    sandbox: SandboxSetting = Field(
        default="auto",
        description="Isolation of the candidate: bwrap, unshare, none, or auto (the first that works).",
    )


def item_value(item: Any, name: str) -> Any:
    """The attribute ``name`` of an item (a pydantic model, an object or a mapping)."""
    if isinstance(item, Mapping):
        if name in item:
            return item[name]
        known = [str(key) for key in item]
    else:
        if hasattr(item, name):
            return getattr(item, name)
        fields = getattr(type(item), "model_fields", None)
        known = list(fields) if fields else [n for n in vars(item) if not n.startswith("_")]
    raise ApeError(
        f"the item has no field '{name}' to read the reference from (fields: {', '.join(known)})",
        where=WHERE_ARGS,
        hint=did_you_mean(name, known) or "set args.field (args.tests_field for code_exec)",
    )


def describe_item(item: Any) -> str:
    """The item's id for messages ('q007'), or its type when it has none."""
    if isinstance(item, BaseModel):
        try:
            return repr(item_id(item))
        except ValueError:
            pass
    if isinstance(item, Mapping) and "id" in item:
        return repr(str(item["id"]))
    found = getattr(item, "id", None)
    return repr(str(found)) if found is not None else f"of type {type(item).__name__}"


class BuiltinChecker:
    """A checker ``(item, solution) -> Passed | Failed`` backed by one built-in metric.

    A plain class (not a closure) so it pickles to Dask workers.
    """

    def __init__(self, metric: str, args: MetricArgs | CodeExecArgs):
        self.metric = metric
        self.args = args
        # a comparison linear in the answer: called without a plugin thread (ape.tasks.common.deadline)
        self.runs_inline = metric in INLINE_METRICS

    def __repr__(self) -> str:
        return f"BuiltinChecker({self.metric!r}, {self.args!r})"

    def __call__(self, item: Any, solution: Any) -> Passed | Failed:
        if isinstance(self.args, CodeExecArgs):
            tests = item_value(item, self.args.tests_field)
            limits = CodeLimits(self.args.timeout_s, self.args.memory_mb, self.args.sandbox)
            return grade(self.metric, solution, tests=tests, limits=limits, item=f"item {describe_item(item)}")
        return grade(self.metric, solution, item_value(item, self.args.field))


def builtin_checker(name: str, args: Mapping[str, Any] | None = None) -> BuiltinChecker:
    """The checker for built-in metric ``name``; ApeError for an unknown name or bad args."""
    if name not in METRICS:
        raise ApeError(
            f"'{name}' is not a built-in checker; built-ins are {', '.join(METRICS)}, "
            "or give a dotted path 'package.module:checker'",
            where=WHERE_NAME,
            hint=did_you_mean(name, METRICS),
        )
    model = CodeExecArgs if name == "code_exec" else MetricArgs
    try:
        parsed = model.model_validate(dict(args or {}))
    except ValidationError as exc:
        raise validation_error(
            exc,
            f"bad argument for checker '{name}'",
            where=WHERE_ARGS,
            hint=f"accepted: {', '.join(model.model_fields)}",
            fields=model.model_fields,
        ) from None
    if isinstance(parsed, CodeExecArgs) and parsed.sandbox != "auto":
        try:
            resolve(parsed.sandbox)
        except SandboxUnavailable as exc:
            raise ApeError(
                f"sandbox '{parsed.sandbox}' cannot run here: {exc}",
                where=WHERE_ARGS + ".sandbox",
                hint='use sandbox = "auto" to take the best one available, or "none" for limits only',
            ) from None
    return BuiltinChecker(name, parsed)


def score_session(outcome: Outcome, check: CheckResult | None, metric: str | None) -> tuple[float, bool]:
    """The session's (score, correct).

    Only a SOLVED session whose checker ran without raising earns a score. The score is
    the checker's (1.0/0.0 from its grade when it gave none). For built-in metrics
    correct follows the metric's pass mark; for a user checker (any other ``metric``)
    its Passed/Failed grade decides.
    """
    if outcome is not Outcome.SOLVED or check is None or check.status is CheckStatus.ERROR:
        return 0.0, False
    passed = check.status is CheckStatus.PASSED
    score = float(check.score) if check.score is not None else float(passed)
    if metric in METRICS:
        return score, correct_from_score(metric, score)
    return score, passed
