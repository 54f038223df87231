"""Solution adapters: turn a model's raw answer text into the solution the checker gets.

An adapter is any callable ``(str) -> SolutionT`` that raises when the text cannot
be parsed; the exception message is what the reformat prompt tells the model
(``{error}``), so built-ins raise short, specific messages.

Built-ins (``[adapter] implementation = "<name>"``, options in ``[adapter] args``):

``raw``          the text as it is.
``strip``        the text without surrounding whitespace.
``regex``        a capture group of a regular expression: ``pattern``, ``group`` (number or
                 name; default 1, or the whole match when the pattern has no group),
                 ``flags`` (e.g. ``"IGNORECASE|MULTILINE"``), ``last`` (take the last match
                 instead of the first).
``last_number``  the last number in the text: an ``int`` when integral, else a ``float``.
``json``         the first JSON object or array in the text, also inside a fenced
                 code block; with ``model = "pkg.module:Model"`` validated into that pydantic model.

Anything else is a dotted path to user code: a function (extra ``args`` are passed as
keyword arguments), a class (instantiated with ``args``; instances must be callable), or
a pydantic model class (parsed like ``json`` into that model).

Built-ins are small pydantic models, so their options are validated (a typo is an
error naming the key) and they pickle cleanly across Prefect task boundaries.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, field_validator

from ape.schemas.config import AdapterConfig
from ape.schemas.errors import ApeError, did_you_mean, validation_lines
from ape.tasks.plugins.loader import call_plugin, describe_exception, load_object
from ape.tasks.plugins.registry import is_short_name, resolve

Adapter = Callable[[str], Any]

WHERE = "[adapter] implementation"


class BuiltinAdapter(BaseModel):
    """Base of the built-in adapters: options validated like a config section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # linear in the answer and no user code: called without a plugin thread
    # (ape.tasks.common.deadline); a pattern or schema from the config keeps its limit
    runs_inline: ClassVar[bool] = False

    def __call__(self, text: str) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


class RawAdapter(BuiltinAdapter):
    """The answer text unchanged: for checkers that do their own normalisation."""

    runs_inline: ClassVar[bool] = True

    def __call__(self, text: str) -> str:
        return text


class StripAdapter(BuiltinAdapter):
    """The answer without surrounding whitespace."""

    runs_inline: ClassVar[bool] = True

    def __call__(self, text: str) -> str:
        return text.strip()


class RegexAdapter(BuiltinAdapter):
    """One capture group of a regular expression, e.g. ``Answer:\\s*(\\S+)``."""

    pattern: str
    group: int | str | None = None
    flags: str | list[str] | int = 0
    last: bool = False

    _compiled: re.Pattern[str] | None = PrivateAttr(default=None)
    _group: int | str = PrivateAttr(default=0)

    @field_validator("flags")
    @classmethod
    def _known_flags(cls, value: str | list[str] | int) -> str | list[str] | int:
        _flag_bits(value)
        return value

    def model_post_init(self, context: Any) -> None:
        try:
            self._compiled = re.compile(self.pattern, _flag_bits(self.flags))
        except re.error as exc:
            raise ValueError(f"invalid regular expression {self.pattern!r}: {exc}") from None
        if self.group is None:
            self._group = 1 if self._compiled.groups else 0
            return
        self._group = self.group
        if isinstance(self.group, int) and self.group > self._compiled.groups:
            raise ValueError(f"group {self.group} does not exist; the pattern has {self._compiled.groups} group(s)")
        if isinstance(self.group, str) and self.group not in self._compiled.groupindex:
            raise ValueError(f"the pattern has no group named {self.group!r}")

    def __call__(self, text: str) -> str:
        assert self._compiled is not None
        matches = list(self._compiled.finditer(text))
        if not matches:
            raise ValueError(f"the answer does not match the pattern {self.pattern!r}")
        match = matches[-1] if self.last else matches[0]
        value = match.group(self._group)
        if value is None:
            raise ValueError(f"group {self._group!r} of the pattern matched nothing")
        return value


_NUMBER = re.compile(
    r"""(?<![\w.])            # not inside a word or after a dot
        [-+]?
        (?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?   # 1,234,567 or 1234, optional decimals
        (?:[eE][-+]?\d+)?
      | (?<![\w.])[-+]?\.\d+(?:[eE][-+]?\d+)?  # .5
    """,
    re.VERBOSE,
)


class LastNumberAdapter(BuiltinAdapter):
    """The last number in the answer: models usually state the final result last."""

    runs_inline: ClassVar[bool] = True

    def __call__(self, text: str) -> int | float:
        found = _NUMBER.findall(text)
        if not found:
            raise ValueError("the answer contains no number")
        return parse_number(found[-1])


def parse_number(token: str) -> int | float:
    """``"1,234"`` -> 1234, ``"2.50"`` -> 2.5, ``"3.0"`` -> 3 (integral values become ints)."""
    cleaned = token.replace(",", "")
    value = float(cleaned)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{token!r} is not a finite number")
    if value.is_integer():
        if re.fullmatch(r"[-+]?\d+", cleaned):
            return int(cleaned)  # exact, also beyond float precision
        return int(value)
    return value


_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)


class JsonAdapter(BuiltinAdapter):
    """The first JSON object or array in the answer, optionally validated into a model."""

    model: str | None = None

    _resolved: type[BaseModel] | None = PrivateAttr(default=None)
    _base_dir: Path | None = PrivateAttr(default=None)

    def schema_model(self) -> type[BaseModel] | None:
        """The pydantic model named by ``model``, imported on first use."""
        if self.model is not None and self._resolved is None:
            target = load_object(self.model, where="[adapter] args.model", base_dir=self._base_dir)
            if not (inspect.isclass(target) and issubclass(target, BaseModel)):
                raise ApeError(
                    f"'{self.model}' is not a pydantic model class",
                    where="[adapter] args.model",
                )
            self._resolved = target
        return self._resolved

    def __call__(self, text: str) -> Any:
        value = extract_json(text)
        schema = self.schema_model()
        if schema is None:
            return value
        try:
            return schema.model_validate(value)
        except ValidationError as exc:
            problems = "; ".join(validation_lines(exc, default="(root)", quote=False))
            raise ValueError(f"the JSON does not fit {schema.__name__}: {problems}") from None


def extract_json(text: str) -> Any:
    """Find a JSON value: a fenced block first, then the whole text, then the first ``{``/``[``."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        stripped = candidate.strip()
        try:
            return json.loads(stripped)
        except ValueError:
            pass
        for start, char in enumerate(stripped):
            if char in "{[":
                try:
                    value, _ = decoder.raw_decode(stripped, start)
                except ValueError:
                    continue
                return value
    raise ValueError("the answer contains no valid JSON object")


def _flag_bits(value: str | list[str] | int) -> int:
    if isinstance(value, int):
        return value
    names = value if isinstance(value, list) else [p for p in re.split(r"[|,\s]+", value) if p]
    bits = 0
    for name in names:
        flag = getattr(re.RegexFlag, name.upper(), None)
        if flag is None:
            known = [f.name for f in re.RegexFlag if f.name]
            hint = did_you_mean(name.upper(), known)
            raise ValueError(f"unknown regex flag {name!r}" + (f" ({hint})" if hint else ""))
        bits |= flag
    return bits


def builtin_adapter(name: str, args: dict[str, Any] | None = None) -> BuiltinAdapter:
    """A built-in adapter by name (the registry's ``adapter`` kind); ApeError with a hint
    for unknown names or bad options."""
    cls = load_object(resolve("adapter", name, where=WHERE), where=WHERE)
    try:
        return cls(**(args or {}))
    except (ValidationError, ValueError, TypeError) as exc:
        raise ApeError(
            f"bad options for the '{name}' adapter: {describe_exception(exc)}", where="[adapter] args"
        ) from None


def load_adapter(cfg: AdapterConfig, base_dir: Path) -> Adapter:
    """Resolve ``[adapter]`` to a callable ``(str) -> solution``."""
    name = cfg.implementation
    if is_short_name(name):
        adapter = builtin_adapter(name, cfg.args)
        if isinstance(adapter, JsonAdapter):
            adapter._base_dir = base_dir
            adapter.schema_model()  # a bad model path fails now, not in every session
        return adapter
    target = load_object(name, where=WHERE, base_dir=base_dir)
    if inspect.isclass(target) and issubclass(target, BaseModel):
        adapter = JsonAdapter(model=name)
        adapter._base_dir = base_dir
        adapter.schema_model()
        return adapter
    if inspect.isclass(target):
        instance = call_plugin(target, cfg.args, label=f"adapter '{name}'", where="[adapter] args")
        if not callable(instance):
            raise ApeError(
                f"instances of '{name}' are not callable; give the class a __call__(self, text)",
                where=WHERE,
            )
        return instance
    if not callable(target):
        raise ApeError(f"'{name}' is a {type(target).__name__}, not a function (str) -> solution", where=WHERE)
    return functools.partial(target, **cfg.args) if cfg.args else target
